"""`orch import` + `orch table` reproduce the published tables from the raw fixture files."""
from __future__ import annotations

import json
import shutil

import pytest
from cli_helpers import orch_ok as orch
from click.testing import CliRunner
from sqlalchemy import func, select
from test_analysis_oracle import (
    FIX,
    JUL13_SECTIONS,
    JUL13_SUFFIX_LABEL,
    NEW_COLUMNS,
    PR23_SECTIONS,
    md_cells,
    pr23_expected,
    published,
    raw_new_cells,
)

from orchestrator.cli import main
from orchestrator.db import schema
from orchestrator.db.runs import Runs
from orchestrator.db.store import Store


def table_cells(text: str) -> dict[tuple[str, str], str]:
    """{(row label, column header): cell} over every table orch printed; a header two tables
    share (the latency table repeats the decode mean, not in bold) keeps the first table's."""
    out: dict[tuple[str, str], str] = {}
    header: list[str] = []
    for line in text.splitlines():
        if not line.startswith("|") or line.startswith("|---"):
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells[0] == "Config":
            header = cells
            continue
        for h, c in zip(header[1:], cells[1:]):
            out.setdefault((cells[0], h), c)
    return out


@pytest.fixture
def db(tmp_path):
    return str(tmp_path / "orch.db")


def test_jul13_table_reproduces_summary_md(db):
    orch("import", str(FIX / "2026-07-13"), "--db", db)
    got = table_cells(orch("table", "--db", db, "--format", "md"))
    want = md_cells(published("2026-07-13"))        # memory in GiB, as orch writes it
    compared = 0
    for (section, label, header), cell in want.items():
        if cell == "—":
            continue
        prefix = next(p for title, p in JUL13_SECTIONS if title == section)
        suffix = next(s for s, lab in JUL13_SUFFIX_LABEL.items() if lab == label)
        assert got[(f"{prefix}_{suffix}", header)] == cell, (section, label, header)
        compared += 1
    assert compared == 2 * 4 * (10 + 5 + 7) - 26
    # p5 and compute + I/O, against the raw CSV and .log
    for csv in sorted((FIX / "2026-07-13").glob("*.csv")):
        for header, cell in raw_new_cells(csv).items():
            assert got[(csv.stem, header)] == cell, (csv.stem, header)


def test_pr23_table_reproduces_summary_md(db):
    orch("import", str(FIX / "2026-07-12-pr23"), "--db", db)
    # The 2026-07-12 table took p95 without interpolation: --quantile lower reproduces it.
    got = table_cells(orch("table", "--db", db, "--tables", "variants", "--quantile", "lower"))
    want = md_cells(pr23_expected())
    compared = 0
    for (section, label, header), cell in want.items():
        stem = dict((lab, st) for _, rows in PR23_SECTIONS if _ == section
                    for st, lab in rows)[label]
        mine = got[(stem, header)]
        if header == "decode tok/s":
            # orch's variants table is one table, so deltas are against its first row; the
            # published ones are per section: compare the tok/s figure itself.
            mine, cell = mine.split(" (")[0], cell.split(" (")[0]
        assert mine == cell, (section, label, header)
        compared += cell != "—"
    assert compared >= 100
    for csv in sorted((FIX / "2026-07-12-pr23").glob("*.csv")):
        for header, cell in raw_new_cells(csv, "lower").items():
            assert got[(csv.stem, header)] == cell, (csv.stem, header)
    assert {h for _, h in got} >= NEW_COLUMNS


def test_import_twice_changes_nothing(db):
    orch("import", str(FIX / "2026-07-13"), "--db", db)
    out = orch("import", str(FIX / "2026-07-13"), "--db", db)
    assert "0 run(s) imported, 8 unchanged" in out
    store = Store.open(db)
    assert store.fetch(select(func.count()).select_from(schema.run))[0][0] == 8
    assert store.fetch(select(func.count()).select_from(schema.session))[0][0] == 1
    assert store.fetch(select(func.count()).select_from(schema.token))[0][0] == 8 * 256


def test_jul17_keeps_22_columns_and_preamble(db):
    orch("import", str(FIX / "2026-07-17"), "--db", db, "--name", "topk")
    store = Store.open(db)
    runs = Runs(store).current()
    assert len(runs) == 9 and all(r.status == "ok" for r in runs)
    run = next(r for r in runs if r.config == "qwen_k6")
    settings = run.summary["settings"]
    assert (settings["cache_mb"], settings["io_threads"], settings["overlap"],
            settings["n_expert_used"]) == (4000, 4, 1, 6)
    assert "cache_mb=4000" in run.flags and run.model == "Qwen3-30B-A3B-Q4_K_M"
    tokens = store.frame("token", [run.id])
    first = tokens.iloc[0]
    assert first.extra["rss_mib"] == 5399.7 and first.extra["swap_mib"] == 262.7
    assert first.extra["mem_available_mib"] == 1552.1
    assert run.text and "history of computing" in run.text


def test_truncated_csv_is_interrupted_and_daggered(db, tmp_path):
    folder = tmp_path / "cut"
    folder.mkdir()
    lines = (FIX / "2026-07-13" / "qwen_base_ov.csv").read_text().splitlines()
    (folder / "qwen_base_ov.csv").write_text("\n".join(lines[:-41]) + "\n")  # 40 rows + trailer
    shutil.copy(FIX / "2026-07-13" / "gemma_base_ov.csv", folder)
    orch("import", str(folder), "--db", db)
    store = Store.open(db)
    runs = {r.config: r for r in Runs(store).current()}
    assert runs["qwen_base_ov"].status == "interrupted"
    assert len(store.frame("token", [runs["qwen_base_ov"].id])) == 256 - 40
    assert runs["gemma_base_ov"].status == "ok"
    out = orch("table", "--db", db)
    assert "| qwen_base_ov † |" in out and "† qwen_base_ov: interrupted" in out


def test_malformed_files_get_a_message_and_the_rest_imports(db, tmp_path):
    folder = tmp_path / "mixed"
    folder.mkdir()
    shutil.copy(FIX / "2026-07-13" / "qwen_base_ov.csv", folder)
    (folder / "garbage.csv").write_bytes(bytes(range(256)) * 40)
    (folder / "header_only.csv").write_text("step,steps,wall_ms,io_ms,compute_ms,read_bytes,cache_hit_pct\n")
    rows = (FIX / "2026-07-13" / "gemma_base_ov.csv").read_text().splitlines()
    rows[5] += ",999"
    (folder / "bad_row.csv").write_text("\n".join(rows) + "\n")
    (folder / "huge.csv").write_text("step,steps,wall_ms\n1,2," + "9" * 2_000_000 + "\n")
    result = CliRunner().invoke(main, ["import", str(folder), "--db", db])
    assert result.exit_code == 0
    err = result.stderr
    assert "garbage.csv: not imported" in err
    assert "header_only.csv" in err and "no data rows" in err
    assert "bad_row.csv" in err and "wrong column count" in err
    assert "huge.csv" in err and "too long" in err
    store = Store.open(db)
    runs = {r.config: r for r in Runs(store).current()}
    assert runs["qwen_base_ov"].status == "ok" and len(store.frame("token", [runs["qwen_base_ov"].id])) == 256
    assert len(store.frame("token", [runs["bad_row"].id])) == 255


def test_table_csv_json_and_export(db, tmp_path):
    orch("import", str(FIX / "2026-07-13"), "--db", db)
    rows = json.loads(orch("table", "--db", db, "--format", "json", "-t", "throughput"))
    base = next(r for r in rows if r["config"] == "qwen_base_ov")
    assert round(base["mean"], 2) == 5.02 and base["status"] == "ok"
    assert "qwen_base_ov" in orch("table", "--db", db, "--format", "csv")
    out_dir = tmp_path / "exp"
    for fmt in ("csv", "json"):
        orch("export", "--db", db, "--format", fmt, "-o", str(out_dir))
        assert (out_dir / f"tokens.{fmt}").stat().st_size > 0
    import pandas as pd

    assert len(pd.read_csv(out_dir / "tokens.csv")) == 8 * 256
    assert "stat_mean" in pd.read_csv(out_dir / "runs.csv").columns


@pytest.mark.extra("parquet")
def test_export_parquet(db, tmp_path):
    orch("import", str(FIX / "2026-07-13"), "--db", db)
    out_dir = tmp_path / "exp"
    orch("export", "--db", db, "--format", "parquet", "-o", str(out_dir))
    import pandas as pd

    assert len(pd.read_parquet(out_dir / "tokens.parquet")) == 8 * 256
    assert "stat_mean" in pd.read_parquet(out_dir / "runs.parquet").columns
