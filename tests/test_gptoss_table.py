"""The study's gpt-oss-120b table from its raw files, and the display rules it needs.

tests/fixtures/bigmoe/2026-07-14 holds the study's raw files: gptoss-matrix.out, a driver's
summary log of 12 streaming cells (no per-token CSV: summary lines only) and two mmap
baselines, whose per-token CSVs (gptoss_mmap_k2.csv, gptoss_mmap_k4.csv) are there too. The
study printed this table from them (its "gpt-oss-120b" section, "Results"); the constants
below are its cells, copied as printed. `orch import` with no options, then `orch table`,
must print each of them at the study's precision.
"""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from cli_helpers import orch_ok
from test_report import md_tables
from orchestrator.record import EntryState, RunRecord
from orchestrator.report.format.columns import SHOW, THROUGHPUT
from orchestrator.report.format.formatters import PAGE_CACHE_NOTE, STATS
from orchestrator.stats.statistics import RunInput, compute
from orchestrator.stats.values import DASH

FIX = Path(__file__).parent / "fixtures" / "bigmoe"


def md_table_rows(text: str) -> list[dict[str, str]]:
    """The rows of the first markdown table in `text`, header -> cell (test_report's
    parser: escaped pipes)."""
    table = next(iter(md_tables(text)))
    return [dict(zip(table["headers"], row)) for row in table["rows"]]

# (top-k, lanes, prefetch) -> (tok/s, s/token, compute s/tok, flash read MiB/token, cache hit %)
# as the study printed them; None where it printed "—"
STREAMING = {
    (2, 4, "off"): ("0.687", "1.455", "1.159", "535.75", "20.4"),
    (2, 4, "4"): ("0.532", "1.878", "1.529", "640.91", "21.2"),
    (2, 8, "off"): ("0.620", "1.613", "1.310", "535.75", "20.4"),
    (2, 8, "4"): ("0.516", "1.937", "1.647", "640.91", "21.2"),
    (3, 4, "off"): ("0.391", "2.556", "2.118", "925.74", "16.9"),
    (3, 4, "4"): ("0.304", "3.293", "2.854", "1100.68", "18.1"),
    (3, 8, "off"): ("0.279", "3.581", "3.074", "925.74", "16.9"),
    (3, 8, "4"): ("0.295", "3.394", "2.924", "1100.68", "18.1"),
    (4, 4, "off"): ("0.223", "4.489", "3.869", "1402.75", "13.4"),
    (4, 4, "4"): ("0.188", "5.327", "4.701", "1619.72", "14.7"),
    (4, 8, "off"): ("0.383", "2.613", "2.042", "1402.75", "13.4"),
    (4, 8, "4"): ("0.213", "4.704", "4.045", "1623.57", "14.7"),
}
# the mmap rows: flash read "0 (page cache)" in the study (see test_mmap_rows)
MMAP = {"gptoss_mmap_k2": ("0.089", "11.240", None, None, None),     # "mmap"
        "gptoss_mmap_k4": ("0.075", "13.337", None, None, None)}     # "mmap (k=4)"


def config_name(k: int, lanes: int, prefetch: str) -> str:
    """The driver's section name of a cell (`k2_io4_pf0`), the row's label in orch."""
    return f"k{k}_io{lanes}_pf{0 if prefetch == 'off' else prefetch}"


@pytest.fixture(scope="module")
def gptoss(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, dict[str, str]], str]:
    """The folder imported with no options; (the gpt-oss throughput table's rows by config,
    the whole `orch table` text)."""
    root = tmp_path_factory.mktemp("gptoss")
    shutil.copytree(FIX / "2026-07-14", root / "2026-07-14")
    db = f"sqlite:///{root / 'orch.db'}"
    orch_ok("import", str(root / "2026-07-14"), "--db", db)
    text = orch_ok("table", "--db", db)
    group = text.split("### gptoss")[1].split("###")[0]
    table = group.split("**Throughput**")[1].split("**Prefill")[0]
    rows = {row["Config"]: row for row in md_table_rows(table)}
    return rows, text


def number(cell: str) -> str:
    return cell.replace("**", "").strip()


def split_compute(cell: str) -> str:
    """The compute half of the "decode: compute + I/O" cell ("1.159 + 0.747")."""
    return DASH if cell == DASH else cell.split(" + ")[0]


@pytest.mark.parametrize("cell", sorted(STREAMING), ids=lambda c: config_name(*c))
def test_streaming_cells_as_the_study_printed_them(gptoss, cell) -> None:
    rows, _ = gptoss
    tps, s_tok, compute_s, read, hit = STREAMING[cell]
    row = rows[config_name(*cell)]
    assert number(row["decode mean"]) == tps
    assert row["s/token"] == s_tok
    assert split_compute(row["decode: compute + I/O (s/tok)"]) == compute_s
    assert row["flash read/token"] == f"{read} MiB"
    assert row["cache hit"] == f"{hit}%"


@pytest.mark.parametrize("name", sorted(MMAP))
def test_mmap_rows(gptoss, name) -> None:
    """The mmap rows come from per-token CSVs: orch's mean is n / Σ decode s (0.08897), shown
    to three significant figures, which is the study's 0.089 at its precision; s/token is
    Σ decode s / n. A plain mmap run has no compute split, no cache and no counted flash
    read: the study's "0 (page cache)" is the engine's streaming counter, which is 0 by
    construction; orch prints "—" (not measured) and says why under the table."""
    rows, text = gptoss
    tps, s_tok, compute_s, read, hit = MMAP[name]
    row = rows[name]
    shown = number(row["decode mean"])
    assert round(float(shown), 3) == float(tps) and len(shown.split(".")[1]) >= 3
    assert row["s/token"] == s_tok
    assert split_compute(row["decode: compute + I/O (s/tok)"]) == DASH   # study: —
    assert row["cache hit"] == DASH                                         # study: —
    assert row["flash read/token"] == DASH                        # study: 0 (page cache)
    assert PAGE_CACHE_NOTE in text


def test_fourteen_rows_five_figures(gptoss) -> None:
    rows, _ = gptoss
    names = [config_name(*c) for c in STREAMING] + list(MMAP)
    assert set(names) <= set(rows)
    assert len(names) == 14


# ---- the figures behind the table ------------------------------------------------------------

def test_summary_only_runs_count_their_tokens(gptoss, tmp_path: Path) -> None:
    """A summary-only run's token count is its generation line's (24, 22), not "0 tokens"."""
    root = tmp_path / "s"
    shutil.copytree(FIX / "2026-07-14", root)
    db = f"sqlite:///{tmp_path / 'o.db'}"
    orch_ok("import", str(root), "--db", db)
    runs = {r["config"]: r for r in json.loads(orch_ok("runs", "--db", db, "--format", "json"))}
    assert runs["k2_io4_pf0"]["tokens"] == 24
    assert runs["k3_io4_pf0"]["tokens"] == 22
    assert runs["gptoss_mmap_k2"]["tokens"] == 24
    show = orch_ok("show", str(runs["k3_io4_pf0"]["id"]), "--db", db)
    assert ", 22 tokens, " in show
    assert re.search(r"decode s/token .*│\s+2\.556 │", show)
    assert re.search(r"flash read/token\s+│\s+925\.74 MiB │", show)


def one_run(tokens: pd.DataFrame, record: RunRecord):
    return compute(tokens, {0: RunInput(record)})[0]


def test_s_per_token_figure() -> None:
    """Σ decode s / n over a run's token rows; the engine's own s/token without rows."""
    rows = pd.DataFrame({"run_id": [0] * 4, "wall_ms": [100.0, 200.0, 300.0, 400.0]})
    figures = one_run(rows, RunRecord(tokens=4, s_per_token=9.0))
    assert figures.s_per_token == pytest.approx(0.25)
    assert figures.tokens == 4 and not figures.summary_only
    none = pd.DataFrame({"run_id": pd.Series([], dtype=int), "wall_ms": pd.Series([], dtype=float)})
    engine = one_run(none, RunRecord(tokens=24, decode_tps=0.687, s_per_token=1.455,
                                     read_mib=12858.0, read_mib_per_token=535.75,
                                     extra={"summary_only": True}))
    assert (engine.s_per_token, engine.mean, engine.tokens) == (1.455, 0.687, 24)
    assert engine.read_mib_per_token == 535.75 and engine.summary_only
    # no printed per-token read: the total over the generation line's tokens, not "—"
    total = one_run(none, RunRecord(tokens=24, decode_tps=0.5, read_mib=12858.0))
    assert total.read_mib_per_token == pytest.approx(535.75)
    assert total.s_per_token == pytest.approx(2.0)


def test_entry_state_cpu_temperature_is_the_pressure_tables_cpu_start(tmp_path: Path) -> None:
    """A run with no samples and no sidecar temperature: CPU start is its driver log's entry
    state (`ENTRY STATE: ... cpu=44400 mC`), the value `orch show` prints."""
    none = pd.DataFrame({"run_id": pd.Series([], dtype=int), "wall_ms": pd.Series([], dtype=float)})
    record = RunRecord(entry_state=EntryState(driver={"cpu_temp_mC": 44400}))
    assert one_run(none, record).cpu_temp_start_c == 44.4
    root = tmp_path / "replay"
    shutil.copytree(FIX / "2026-07-20-cache-replay", root)
    db = f"sqlite:///{tmp_path / 'o.db'}"
    orch_ok("import", str(root), "--db", db)
    pressure = orch_ok("table", "--db", db, "-t", "pressure")
    row = next(r for r in md_table_rows(pressure) if r["Config"] == "lanes8_k2")
    assert row["CPU start"] == "44.4 °C"
    runs = {r["config"]: r for r in json.loads(orch_ok("runs", "--db", db, "--format", "json"))}
    show = orch_ok("show", str(runs["lanes8_k2"]["id"]), "--db", db)
    assert "CPU 44.4 °C" in show                               # the driver's entry line
    assert re.search(r"CPU start\s+│\s+44\.4 °C │", show)       # the figure


# ---- the precision rule (report/format/formatters.py) ---------------------------------------

def test_precision_rule() -> None:
    tps, majflt = STATS["mean"].fmt, STATS["majflt_per_token"].fmt
    assert tps(0.687) == "0.687"           # the engine's three decimals, not 0.69
    assert tps(0.08896851) == "0.0890"     # three significant figures
    assert tps(4.702) == "4.70"            # the published two decimals where they show three
    assert tps(5.0213) == "5.02"           # a 2026-07-13 oracle cell, unchanged
    assert STATS["min"].fmt(0.0712) == "0.07"   # the per-token distribution: published 0.07
    assert STATS["min"].fmt(0.3004) == "0.30"
    assert majflt(0.0213) == "0.0213"      # not a false 0.0
    assert majflt(0.0) == "0.0"            # a true zero stays
    assert majflt(6.0) == "6.0"
    assert STATS["cache_hit_pct"].fmt(76.47) == "76%"      # the published whole percent
    assert STATS["read_mib_per_token"].fmt(225.4) == "225 MiB"
    assert STATS["stall_ms_per_token"].fmt(0.0004) == "0.000400"


def test_summary_only_rows_print_the_engines_digits() -> None:
    """A summary-only run's figures are what its engine printed: at the engine's digits."""
    summary = {"summary_only": True, "mean": 0.62, "s_per_token": 1.613,
               "cache_hit_pct": 20.4, "read_mib_per_token": 535.75, "majflt_per_token": 0.02}
    measured = {**summary, "summary_only": False}
    cols = {c.key: c for c in (*THROUGHPUT.columns, *SHOW.columns)}
    assert [cols[k].text(summary) for k in ("mean", "s_per_token", "cache_hit_pct",
                                            "read_mib_per_token", "majflt_per_token")] == \
        ["0.620", "1.613", "20.4%", "535.75 MiB", "0.02"]
    assert [cols[k].text(measured) for k in ("mean", "cache_hit_pct", "read_mib_per_token",
                                             "majflt_per_token")] == \
        ["0.620", "20%", "536 MiB", "0.0200"]


def test_s_per_token_column_only_beside_a_summary_only_run() -> None:
    """The oracle tables (runs with token rows) keep their columns: no s/token there."""
    from orchestrator.report.table import runs as tables

    frame = pd.DataFrame([{"mean": 5.0, "s_per_token": 0.2, "summary_only": False}],
                         index=pd.Index([1], name="run_id"))
    assert "s/token" not in tables.cells(frame, "throughput").columns
    frame.loc[1, "summary_only"] = True
    assert "s/token" in tables.cells(frame, "throughput").columns
