"""`orch import` takes a study folder as it is: subfolders, matrix
stdout sections, every skipped file with its reason, exit codes, --replace / --model / --label,
entry state from driver logs and .state files, per-token memory columns, impossible values,
non-regular files."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from cli_helpers import orch
from sqlalchemy import func, select

from orchestrator.db import schema
from orchestrator.db.store import Store
from orchestrator.engines.bmoe import BmoeRunParser
from orchestrator.record import load_record
from orchestrator.cli.documents import report_text as render_report
from orchestrator.ingest.state import parse_state
from orchestrator.ingest.importer import import_dir
from orchestrator.db.runs import Runs, Sessions

FIX = Path(__file__).resolve().parent / "fixtures" / "bigmoe"
JUL13_CSV = FIX / "2026-07-13" / "qwen_base_ov.csv"


@pytest.fixture
def db(tmp_path):
    return str(tmp_path / "orch.db")


def _sessions(db: str) -> int:
    return Store.open(db).fetch(select(func.count()).select_from(schema.session))[0][0]


def _runs(db: str) -> dict[str, object]:
    return {r.config: r for r in Runs(Store.open(db)).current()}


def _with_row(src: Path, row_index: int, column: str, value: str) -> str:
    """The CSV's text with one data row's column set to value (row_index: 0 = first row)."""
    lines = src.read_text().splitlines()
    header = next(i for i, l in enumerate(lines) if l.startswith("step,"))
    cols = lines[header].split(",")
    fields = lines[header + 1 + row_index].split(",")
    fields[cols.index(column)] = value
    lines[header + 1 + row_index] = ",".join(fields)
    return "\n".join(lines) + "\n"


# ---- each fixture folder ------------------------------------------------------------------

@pytest.mark.parametrize(("folder", "runs", "skipped"), [
    ("2026-07-12-pr23", 10, ["summary.md: not imported: unknown kind"]),
    ("2026-07-13", 8, ["summary.md: not imported: unknown kind"]),
    ("2026-07-14", 20, []),
    ("2026-07-15-route-trace", 1, []),
    ("2026-07-17", 9, []),
])
def test_each_fixture_folder_imports_and_lists_what_it_skipped(db, folder, runs, skipped):
    code, out = orch("import", str(FIX / folder), "--db", db)
    assert code == 0, out
    assert f"{runs} run(s) imported, 0 unchanged, {len(skipped)} skipped" in out
    for line in skipped:
        assert line in out
    assert len(_runs(db)) == runs
    code, out = orch("import", str(FIX / folder), "--db", db)      # again: nothing changes
    assert code == 0 and f"0 run(s) imported, {runs} unchanged" in out
    assert len(_runs(db)) == runs


def test_jul14_warmup_and_matrix_stdout(db):
    code, out = orch("import", str(FIX / "2026-07-14"), "--db", db)
    assert code == 0, out
    runs = _runs(db)
    warm = sorted(c for c in runs if c.startswith("warmup/"))
    assert warm == [f"warmup/{s}" for s in ("gemma_k6", "gemma_k8", "gptoss_k2", "gptoss_k4",
                                            "qwen_k6", "qwen_k8")]
    store = Store.open(db)
    assert len(store.frame("token", [runs["warmup/gemma_k6"].id])) == 256
    assert runs["warmup/gemma_k6"].model == "gemma"
    # gptoss-matrix.out: 12 summary-only runs, none with token rows, model from its name
    summary_only = [c for c in runs if c.startswith("k")]
    assert len(summary_only) == 12
    k2 = runs["k2_io4_pf0"]
    assert k2.status == "ok" and k2.model == "gptoss" and not len(store.frame("token", [k2.id]))
    rec = load_record(k2.summary)
    assert (rec.tokens, rec.decode_tps, rec.cache_hit_pct) == (24, 0.687, 20.4)
    assert "Canberra" in k2.text
    assert Runs(store).figures([k2])[k2.id].as_dict()["mean"] == pytest.approx(0.687)
    # its mmap_k2 / mmap_k4 sections are the CSV runs' stdout (same tokens and s/token)
    assert "mmap_k2" not in runs and "Canberra" in runs["gptoss_mmap_k2"].text


def test_same_stem_in_two_folders_stays_two_runs(db, tmp_path):
    folder = tmp_path / "day"
    (folder / "warmup").mkdir(parents=True)
    shutil.copy(FIX / "2026-07-14" / "warmup" / "gemma_k6.csv", folder / "warmup")
    shutil.copy(FIX / "2026-07-17" / "gemma_k6.csv", folder)
    code, out = orch("import", str(folder), "--db", db)
    assert code == 0, out
    runs = _runs(db)
    assert set(runs) == {"gemma_k6", "warmup/gemma_k6"}
    assert runs["gemma_k6"].cell_key != runs["warmup/gemma_k6"].cell_key
    assert _sessions(db) == 1


def test_section_without_summary_lines_and_plain_out_are_listed(db, tmp_path):
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "sweep.out").write_text(
        "==== a ====\ngeneration: 8 tokens, 0.500 s/token (2.000 tok/s)\n"
        "==== b ====\nsegfault\n==== c ====\nprefill: 5 tokens, 1.000 s (5.0 tok/s)\n")
    (folder / "notes.out").write_text("just some notes\n")
    code, out = orch("import", str(folder), "--db", db)
    assert code == 0, out
    assert "sweep.out [b]: not imported: section without engine summary lines" in out
    assert "notes.out: not imported: no notes.csv" in out
    runs = _runs(db)
    assert runs["a"].status == "ok" and runs["c"].status == "interrupted"
    assert "generation" in runs["c"].cause


# ---- bad files ----------------------------------------------------------------------------

def test_bad_files_exit_1_with_reasons_and_no_session(db, tmp_path):
    folder = tmp_path / "bad"
    folder.mkdir()
    (folder / "binary.csv").write_bytes(bytes(range(256)) * 40)
    (folder / "empty.csv").write_bytes(b"")
    os.mkfifo(folder / "fifo.csv")          # must be skipped unopened, not block the import
    (folder / "negative.csv").write_text(_with_row(JUL13_CSV, 6, "wall_ms", "-12.5"))
    (folder / "hit200.csv").write_text(_with_row(JUL13_CSV, 2, "cache_hit_pct", "200.00"))
    (folder / "steps.csv").write_text(_with_row(JUL13_CSV, 3, "step", "2"))
    (folder / "orphan.metrics").write_text("peak_rss_kb=1\n")
    code, out = orch("import", str(folder), "--db", db)
    assert code == 1, out
    assert "binary.csv: not imported: binary" in out
    assert "empty.csv: not imported: empty" in out
    assert "fifo.csv: not imported: not a regular file (a FIFO), not opened" in out
    assert "negative.csv: not imported: impossible value at line 8: wall_ms=-12.5" in out
    assert "hit200.csv: not imported: impossible value at line 4: cache_hit_pct=200.0 is outside" in out
    assert "steps.csv: not imported: impossible value at line 5: step=2 does not increase" in out
    assert "orphan.metrics: not imported: sidecar without its CSV" in out
    assert "nothing imported from" in out
    assert _sessions(db) == 0


def test_fifo_sidecar_is_skipped_and_the_run_imports(db, tmp_path):
    folder = tmp_path / "f"
    folder.mkdir()
    shutil.copy(JUL13_CSV, folder)
    os.mkfifo(folder / "qwen_base_ov.metrics")
    code, out = orch("import", str(folder), "--db", db)
    assert code == 0, out
    assert "qwen_base_ov.metrics: not imported: not a regular file (a FIFO)" in out
    assert _runs(db)["qwen_base_ov"].status == "ok"


def test_only_a_bad_route_trace_exits_1(db, tmp_path):
    folder = tmp_path / "trace"
    folder.mkdir()
    (folder / "gemma.route.csv").write_text("# route_trace v1\nnot,a,trace\n")
    shutil.copy(FIX / "2026-07-15-route-trace" / "gemma.metrics", folder)
    code, out = orch("import", str(folder), "--db", db)
    assert code == 1, out
    assert "gemma.route.csv: not imported: not a readable route trace" in out
    assert _sessions(db) == 0
    (folder / "gemma.metrics").unlink()
    code, out = orch("import", str(folder), "--db", db)
    assert code == 1 and "route trace without its gemma.metrics" in out


def test_too_large_broken_symlink_and_empty_folder(db, tmp_path):
    folder = tmp_path / "odd"
    folder.mkdir()
    shutil.copy(JUL13_CSV, folder / "big.csv")
    (folder / "gone.csv").symlink_to(tmp_path / "missing.csv")
    report = import_dir(Store.open(db), folder, max_bytes=1024)
    assert not report.ok and report.session_id is None
    reasons = dict(report.skipped)
    assert reasons["big.csv"].startswith("too large")
    assert reasons["gone.csv"].startswith("unreadable")
    empty = tmp_path / "empty"
    empty.mkdir()
    code, out = orch("import", str(empty), "--db", db)
    assert code == 1 and "nothing imported" in out


def test_live_parser_flags_impossible_values_as_record_errors():
    parser = BmoeRunParser()
    text = _with_row(JUL13_CSV, 0, "read_bytes", "-1")
    rows = [r for line in text.splitlines() for r in parser.feed("C", line)]
    record = parser.record()
    assert len(rows) == 255 and rows[0].step == 2          # the impossible row is dropped
    assert any(e.startswith("line 2: impossible value: read_bytes=-1") for e in record.errors)


def test_sentinels_and_speculative_rows_are_not_impossible():
    parser = BmoeRunParser()
    src = FIX / "2026-07-14" / "gptoss_mmap_k2.csv"         # cache_hit_pct -1 on every row
    text = _with_row(src, 3, "wall_ms", "0.000")              # a speculative group's later row
    rows = [r for line in text.splitlines() for r in parser.feed("C", line)]
    assert len(rows) == 24 and not parser.record().errors


# ---- options ------------------------------------------------------------------------------

def test_replace_applies_new_options_without_duplicates(db):
    folder = str(FIX / "2026-07-13")
    orch("import", folder, "--db", db, "-n", "first", "-d", "phone-a")
    code, out = orch("import", folder, "--db", db, "-n", "second", "-d", "phone-b")
    assert code == 0 and "0 run(s) imported, 8 unchanged" in out
    assert "options ignored: --device 'phone-b' (stored: 'phone-a')" in out
    assert "--name 'second' (stored: 'first')" in out and "(use --replace)" in out
    runs = list(_runs(db).values())
    assert {r.device for r in runs} == {"phone-a"} and runs[0].session_name == "first"
    code, out = orch("import", folder, "--db", db, "-n", "second", "-d", "phone-b",
                     "--label", "fixed vs auto cache", "--replace")
    assert code == 0 and "8 run(s) imported, 0 unchanged" in out
    store = Store.open(db)
    runs = Runs(store).current()
    assert len(runs) == 8 and {r.device for r in runs} == {"phone-b"}
    assert {r.session_name for r in runs} == {"second"} and _sessions(db) == 1
    assert store.fetch(select(func.count()).select_from(schema.token))[0][0] == 8 * 256
    assert Sessions(store).get(runs[0].session_id).label == "fixed vs auto cache"
    code, out = orch("import", folder, "--db", db)      # no options given: none ignored
    assert code == 0 and "options ignored" not in out and "8 unchanged" in out


def test_label_heads_the_report(db):
    orch("import", str(FIX / "2026-07-13"), "--db", db, "--label", "fixed vs auto cache")
    store = Store.open(db)
    text = render_report(store, Runs(store).current(), plots=False)
    assert "fixed vs auto cache" in text.split("- **Measured:**")[0]


def test_replace_with_nothing_importable_keeps_the_runs(db, tmp_path):
    folder = tmp_path / "day"
    folder.mkdir()
    shutil.copy(JUL13_CSV, folder)
    orch("import", str(folder), "--db", db)
    (folder / "qwen_base_ov.csv").write_bytes(b"\0\0\0")
    code, out = orch("import", str(folder), "--db", db, "--replace")
    assert code == 1 and "1 earlier run(s) are kept" in out
    assert list(_runs(db)) == ["qwen_base_ov"]


def test_model_option_lines_up_with_jul17(db):
    code, out = orch("import", str(FIX / "2026-07-14"), "--db", db,
                     "--model", "gptoss=gpt-oss-120b-Q4_K_M.gguf")
    assert code == 0, out
    orch("import", str(FIX / "2026-07-17"), "--db", db)
    runs = Runs(Store.open(db)).current()
    warm = next(r for r in runs if r.config == "warmup/gptoss_k2")
    jul17 = next(r for r in runs if r.config == "gpt_k2")
    assert warm.model == jul17.model == "gpt-oss-120b-Q4_K_M"
    assert next(r for r in runs if r.config == "k2_io4_pf0").model == warm.model
    assert next(r for r in runs if r.config == "warmup/qwen_k6").model == "qwen"
    # no config name in common: compare says so (exit 2) until --match pairs two of them
    code, out = orch("compare", "--session", "1", "--session", "2", "--db", db)
    assert code == 2 and "no config in common" in out
    code, out = orch("compare", "--session", "1", "--session", "2", "--db", db,
                     "--match", "warmup/gptoss_k2=gpt_k2")
    assert code == 0, out
    assert "warmup/gptoss_k2" in out and "↔ gpt_k2" in out and "10.97×" in out


def test_model_option_for_every_run(db, tmp_path):
    folder = tmp_path / "one"
    folder.mkdir()
    shutil.copy(FIX / "2026-07-14" / "warmup" / "gptoss_k2.csv", folder)
    shutil.copy(FIX / "2026-07-17" / "gpt_k2.csv", folder)      # preamble model= is overridden
    code, out = orch("import", str(folder), "--db", db, "--model", "gpt-oss-120b")
    assert code == 0, out
    assert {r.model for r in _runs(db).values()} == {"gpt-oss-120b"}
    code, out = orch("import", str(folder), "--db", db, "--model", "=x")
    assert code == 2 and "expected NAME or GLOB=NAME" in out


# ---- entry state and memory ---------------------------------------------------------------

def test_state_file_gives_start_facts_shown_by_orch_show(db):
    code, out = orch("import", str(FIX / "2026-07-15-route-trace"), "--db", db)
    assert code == 0, out
    run = _runs(db)["gemma"]
    assert run.mem_avail_start_kb == 6794156
    state = load_record(run.summary).entry_state.state
    assert state["before"]["thermal_status"] == 1 and state["after"]["thermal_status"] == 2
    assert state["before"]["policies"]["policy0"] == {"scaling_max": 2188800,
                                                      "hw_max": 3321600, "cur": 556800}
    assert state["before"]["batt_temp_dC"] is None and state["file"] == "gemma.state"
    code, out = orch("show", str(run.id), "--db", db)
    assert code == 0, out
    assert "start: MemAvailable 6794156 kB" in out
    assert "before (gemma.state): thermal status 1" in out
    assert "policy0 cap 1900800/3321600 kHz" in out          # the AFTER block's lowered cap


def test_state_parse_is_defensive():
    assert parse_state("") == {}
    got = parse_state("--- BEFORE ---\nmeminfo: garbage\npolicy0: scaling_max=x\n"
                      "Thermal Status: \nbattery_temp_dC: 312\n")
    before = got["before"]
    assert before["mem_avail_kb"] is None and before["thermal_status"] is None
    assert before["policies"] == {"policy0": {}} and before["batt_temp_dC"] == 312


def test_driver_entry_state_shown_by_orch_show(db):
    orch("import", str(FIX / "2026-07-17"), "--db", db)
    run = _runs(db)["gpt_c2000_l8_k2"]
    code, out = orch("show", str(run.id), "--db", db)
    assert code == 0, out
    assert "driver entry (driver-k2.log): CPU 1555200 kHz" in out
    assert "MemAvailable 6836980 kB" in out       # the sidecar's before-value wins


def test_token_memory_columns_fill_the_pressure_table(db, tmp_path):
    folder = tmp_path / "nosidecar"
    folder.mkdir()
    src = FIX / "2026-07-17" / "qwen_k6.csv"
    shutil.copy(src, folder)
    orch("import", str(folder), "--db", db)
    store = Store.open(db)
    run = Runs(store).current()[0]
    rows = store.frame("token", [run.id])
    peak = max(e["rss_mib"] for e in rows.extra) / 1024
    floor = min(e["mem_available_mib"] for e in rows.extra) / 1024
    stats = Runs(store).figures([run])[run.id].as_dict()
    assert stats["peak_rss_gib"] == pytest.approx(peak)
    assert stats["mem_floor_gib"] == pytest.approx(floor)
    code, out = orch("table", "--db", db, "-t", "pressure")
    assert code == 0 and f"{peak:.2f}" in out
    # with the sidecar, its values stay (VmHWM catches peaks between the per-token reads)
    shutil.copy(src.with_suffix(".metrics"), folder)
    orch("import", str(folder), "--db", db)
    run = Runs(Store.open(db)).current()[0]
    assert Runs(store).figures([run])[run.id].as_dict()["peak_rss_gib"] == pytest.approx(
        load_record(run.summary).extra["sidecar"]["peak_rss_kb"] / 1048576)


def test_help_explains_recursion_replace_reasons_and_exit_codes():
    code, out = orch("import", "--help")
    assert code == 0
    text = " ".join(out.split())
    for words in ("Subfolders are read too", "warmup/gemma_k6.csv and gemma_k6.csv two runs",
                  "--replace re-imports everything", "not a regular file (FIFO, socket, device",
                  "impossible values", "Exit status: 0", "1 when nothing could be imported"):
        assert words in text, words
