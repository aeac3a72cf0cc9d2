"""`orch import` of a study as it was measured: real times and order, models from the files,
configs and repeats, driver-log sections matched by content, not-measured zeros, a design file,
on the three real folders that got them wrong (tests/fixtures/bigmoe/)."""
from __future__ import annotations

import datetime as dt
import json
import shutil
from pathlib import Path

import pytest
from cli_helpers import orch

from orchestrator.db.runs import Runs
from orchestrator.db.store import Store
from orchestrator.ingest.grouping import Member, name_configs
from orchestrator.ingest.naming import model_from_path, name_time, repeat_index
from orchestrator.ingest.when import parse_time
from orchestrator.cli.documents import report_text as render_report
from orchestrator.results.ab import ab_groups

FIX = Path(__file__).parent / "fixtures" / "bigmoe"
DESIGN = Path(__file__).parent / "fixtures" / "designs" / "2026-07-21-pinned-dense-ab.yaml"
PINNED, WARMUP, REPLAY = (FIX / n for n in ("2026-07-21-pinned-dense-ab", "2026-07-14-warmup",
                                            "2026-07-20-cache-replay"))


@pytest.fixture
def db(tmp_path: Path) -> str:
    return str(tmp_path / "orch.db")


def imported(db: str, folder: Path, *options: str) -> list:
    code, out = orch("import", str(folder), "--db", db, *options)
    assert code == 0, out
    return sorted(Runs(Store.open(db)).current(), key=lambda r: r.order_index)


def by_file(runs: list) -> dict:
    return {r.source_file: r for r in runs}


# ---- item 1: times and order ---------------------------------------------------------------

def test_started_at_is_the_file_names_time_and_orders_the_runs(db):
    runs = imported(db, PINNED)
    for r in runs:
        assert r.started_at.replace(tzinfo=None) == name_time(Path(r.source_file).stem)
        assert r.time_source == "file name"
        assert r.ended_at > r.started_at
    assert [r.source_file for r in runs] == sorted(p.name for p in PINNED.glob("*.csv"))
    assert [r.order_index for r in runs] == list(range(9))
    code, out = orch("runs", "--db", db, "--format", "json")
    assert code == 0, out
    row = next(r for r in json.loads(out) if r["source_file"] == "bmoe-20260721-090406.csv")
    assert row["started_at"].startswith("2026-07-21T09:04:06") and row["time_source"] == "file name"


def test_files_without_times_take_the_folders_date_and_the_driver_logs_order(db):
    runs = imported(db, REPLAY)
    assert {r.time_source for r in runs} == {"folder name"}
    assert {r.started_at.replace(tzinfo=None) for r in runs} == {dt.datetime(2026, 7, 20)}
    order = [r.source_file for r in runs]
    # driver2.log's sections, then qwen-ab-run1's and run2's (lfu first: counterbalanced),
    # then the files no log names, by name
    assert order == ["lanes8_k2.csv", "cliff_k4_c1500.csv", "qwen-lru_a.csv", "qwen-lfu_a.csv",
                     "qwen-lfu_b.csv", "qwen-lru_b.csv", "lanes4_k2.csv", "pf1_k2.csv"]
    store = Store.open(db)
    text = render_report(store, Runs(store).current(), plots=False)
    assert "measured 2026-07-20 (the folder name's date; the files do not record the times " \
           "of day)" in text
    code, out = orch("runs", "--db", db)
    assert code == 0 and "2026-07-20 (folder date)" in out and "00:00" not in out


def test_without_any_recorded_time_the_file_time_is_marked_a_guess(db, tmp_path):
    folder = tmp_path / "lfu-study"
    shutil.copytree(REPLAY, folder)
    runs = imported(db, folder)
    assert {r.time_source for r in runs} == {"mtime"}
    store = Store.open(db)
    text = render_report(store, Runs(store).current(), plots=False)
    assert "times unknown (file times)" in text and "measured 20" not in text
    code, out = orch("runs", "--db", db)
    assert code == 0 and "(file time)" in out


def test_measured_option_dates_the_runs_whose_files_do_not(db):
    runs = imported(db, WARMUP, "--measured", "2026-07-14T10:30")
    assert {r.time_source for r in runs} == {"option"}
    assert {r.started_at.replace(tzinfo=None) for r in runs} == {dt.datetime(2026, 7, 14, 10, 30)}
    code, out = orch("import", str(WARMUP), "--db", db + "2", "--measured", "14 July")
    assert code == 2 and out.count("\n") == 1 and "--measured" in out


# ---- item 2: models ------------------------------------------------------------------------

def test_models_come_from_the_files_never_from_a_role_word(db):
    runs = imported(db, WARMUP)
    models = {r.model for r in runs}
    assert models == {"gemma", "gptoss", "qwen"}
    configs = {(r.model, r.config) for r in runs}
    assert configs == {("gemma", "baseline_gemma_k8"), ("gemma", "warmup_gemma_k8"),
                       ("gemma", "reserve_gemma_k8"), ("gptoss", "baseline_gptoss_k4"),
                       ("gptoss", "warmup_gptoss_k4"), ("qwen", "baseline_qwen_k8"),
                       ("qwen", "warmup_qwen_k8")}
    store = Store.open(db)
    groups = ab_groups(Runs(store).current(), Runs(store).figures(Runs(store).current()), {1: None})
    assert {g.model: g.baseline for g in groups} == {
        "gemma": "baseline_gemma_k8", "gptoss": "baseline_gptoss_k4", "qwen": "baseline_qwen_k8"}
    preamble = {r.model for r in imported(db + "2", REPLAY)}
    assert preamble == {"gpt-oss-120b-Q4_K_M", "Qwen3-30B-A3B-Q4_K_M"}


def test_model_glob_option_matches_the_path(db):
    runs = imported(db, WARMUP, "--model", "*gemma*=gemma-4-26b.gguf")
    assert {r.model for r in runs if "gemma" in r.source_file} == {"gemma-4-26b"}
    assert {r.model for r in runs if "gemma" not in r.source_file} == {"gptoss", "qwen"}


def test_table_ab_never_compares_two_models(db):
    for folder in (PINNED, WARMUP, REPLAY):
        imported(db, folder)
    ran = {(r.model, r.config) for r in Runs(Store.open(db)).current()}
    rows = []
    for session in ("1", "2", "3"):
        code, out = orch("table", session, "--db", db, "-t", "ab", "--format", "json")
        assert code == 0, out
        rows += json.loads(out)
    # every config of a model that has another: 5 + 4 (pinned: anon is three sittings, ahwb
    # two lengths), 3 + 2 + 2 (warm-up), 6 (replay)
    assert len(rows) == 9 + 7 + 6
    for row in rows:      # a row and its baseline are configs of the row's model
        assert (row["model"], row["config"]) in ran and (row["model"], row["baseline"]) in ran


def test_model_words():
    assert model_from_path("baseline_gemma_k8.csv") == "gemma"
    assert model_from_path("warmup/run_qwen5k.csv") == "qwen5k"
    assert model_from_path("baseline_k8.csv") is None
    assert model_from_path("warmup/baseline.csv") is None


# ---- item 3: configs and repeats -----------------------------------------------------------

def test_repeats_by_name_and_configs_by_settings(db):
    replay = by_file(imported(db, REPLAY))
    assert (replay["qwen-lru_a.csv"].config, replay["qwen-lru_a.csv"].repeat_index) == ("qwen-lru", 0)
    assert (replay["qwen-lru_b.csv"].config, replay["qwen-lru_b.csv"].repeat_index) == ("qwen-lru", 1)
    assert replay["qwen-lfu_b.csv"].config == "qwen-lfu"
    pinned = by_file(imported(db + "2", PINNED))
    anon = [pinned[f] for f in ("bmoe-20260720-212009.csv", "bmoe-20260721-090406.csv",
                                "bmoe-20260721-103724.csv")]
    # one setting, three sittings (issue 35 item 7): another day with 1,581 tokens, 67 and
    # 1,354 tokens on the 21st are three configs, never three repeats of one
    assert [r.config for r in anon] == ["dense_weights=anon-2026-07-20-1581tok",
                                        "dense_weights=anon-67tok", "dense_weights=anon-1354tok"]
    assert [r.repeat_index for r in anon] == [0, 0, 0]
    gpt = pinned["bmoe-20260721-091455.csv"]
    assert gpt.config == "cache_mb=1000,force_cache=1,dense_weights=ahwb"
    code, out = orch("table", "--db", db + "2", "-t", "ab")
    assert code == 0, out
    assert "dense_weights=ahwb-67tok" in out and "n=3/2" not in out


def test_grouping_rules():
    def names(*members: Member) -> dict:
        return {k: (v.config, v.repeat_index) for k, v in name_configs(members).items()}

    same = {"cache_mb": 3000}
    assert names(Member("qw-a1", "q", same), Member("qw-a2", "q", same)) == {
        "qw-a1": ("qw-a", 0), "qw-a2": ("qw-a", 1)}
    # settings that differ, or no settings and no separator: not repeats
    assert names(Member("gemma_k6", "g", {"k": 6}), Member("gemma_k8", "g", {"k": 8})) == {
        "gemma_k6": ("gemma_k6", 0), "gemma_k8": ("gemma_k8", 0)}
    assert names(Member("qwen_pf1", "q"), Member("qwen_pf2", "q")) == {
        "qwen_pf1": ("qwen_pf1", 0), "qwen_pf2": ("qwen_pf2", 0)}
    assert names(Member("run_1", "q"), Member("run_2", "q"))["run_2"] == ("run", 1)
    # two models are never one config
    assert names(Member("a1", "x", same), Member("a2", "y", same)) == {
        "a1": ("a1", 0), "a2": ("a2", 0)}
    assert repeat_index("cliff_k4_c1500") is None


def test_a_config_whose_runs_disagree_gets_a_warning(db, tmp_path):
    folder = tmp_path / "study"
    folder.mkdir()
    for name, target in (("qwen-lru_a.csv", "x1.csv"), ("qwen-lru_b.csv", "x2.csv")):
        shutil.copy(REPLAY / name, folder / target)
    text = (folder / "x2.csv").read_text().replace("cache_budget_MiB=3000.0", "cache_budget_MiB=2500.0")
    (folder / "x2.csv").write_text(text)
    imported(db, folder)
    code, out = orch("table", "--db", db)
    assert code == 0, out
    assert "the runs of x were not all set up alike (cache budget 3000 MiB vs 2500 MiB)" in out


# ---- item 5: driver-log sections -----------------------------------------------------------

def test_log_sections_join_their_csv_by_content(db):
    runs = by_file(imported(db, REPLAY))
    assert len(runs) == 8                     # no extra summary-only run per section
    lru = runs["qwen-lru_a.csv"]
    driver = lru.record.entry_state.driver
    assert driver["log"] == "qwen-ab-run1.log"
    assert (driver["batt_temp_dC"], driver["cpu_temp_mC"], driver["mem_avail_kb"],
            driver["cpu_khz"]) == (354, 42000, 6044032, 2265600)
    assert driver["exit"]["cpu_temp_mC"] == 56700
    assert "ENTRY" not in (lru.text or "") and "EXIT" not in (lru.text or "")
    assert lru.temp_start == {"batt_temp_dC": 354, "cpu_temp_mC": 42000}
    code, out = orch("show", str(lru.id), "--db", db)
    assert code == 0, out
    assert "driver entry (qwen-ab-run1.log): CPU 2265600 kHz, CPU 42 °C" in out
    assert "driver exit (qwen-ab-run1.log)" in out
    store = Store.open(db)
    assert "departs" not in render_report(store, Runs(store).current(), plots=False)


# ---- item 6: not measured is not zero ------------------------------------------------------

def test_a_column_that_is_zero_on_every_token_is_not_measured(db, tmp_path):
    folder = tmp_path / "win"
    folder.mkdir()
    lines = (REPLAY / "lanes4_k2.csv").read_text().splitlines()
    header = next(i for i, l in enumerate(lines) if l.startswith("step,"))
    col = lines[header].split(",").index("rss_mib")
    for i in range(header + 1, len(lines)):
        if lines[i][:1].isdigit():
            fields = lines[i].split(",")
            fields[col] = "0.0"
            lines[i] = ",".join(fields)
    (folder / "win_k2.csv").write_text("\n".join(lines) + "\n")
    run = imported(db, folder)[0]
    assert any("rss_mib is 0 on every token: not measured" in w for w in run.warnings)
    stats = Runs(Store.open(db)).figures([run])[run.id].as_dict()
    assert stats["peak_rss_gib"] is None or stats["peak_rss_gib"] != stats["peak_rss_gib"]
    assert stats["mem_floor_gib"] == pytest.approx(min(
        float(l.split(",")[lines[header].split(",").index("mem_available_mib")])
        for l in lines[header + 1:] if l[:1].isdigit()) / 1024)
    code, out = orch("table", "--db", db, "-t", "pressure")
    assert code == 0, out
    assert "0.00" not in out


# ---- item 4: a design file -----------------------------------------------------------------

def test_design_file_gives_labels_facts_baselines_and_notes(db):
    runs = by_file(imported(db, PINNED, "--design", str(DESIGN)))
    assert runs["bmoe-20260721-103724.csv"].config == "anon-long"
    assert runs["bmoe-20260721-103724.csv"].flags == "--dense-weights anon"
    assert {r.device for r in runs.values()} == {"OnePlus 15R"}
    store = Store.open(db)
    text = render_report(store, Runs(store).current(), plots=False)
    assert "Snapdragon 8 Elite" in text and "UFS 4.0" in text
    assert "anon, long generation (10:37)" in text            # a config's label
    assert "run order" in text.lower()                         # the design's note
    # its baseline per model, named by its label as the rows are
    assert "Qwen3.6-35B-A3B Q4_K_M: anon, long generation (10:37)" in text


def test_bad_design_is_one_line_and_writes_nothing(db, tmp_path):
    bad = tmp_path / "study.yaml"
    bad.write_text("device:\n  name: phone\n  ram: 12\n")
    code, out = orch("import", str(PINNED), "--db", db, "--design", str(bad))
    assert code == 2 and out.strip().count("\n") == 0 and f"{bad}:3:" in out
    assert not Runs(Store.open(db)).current()


# ---- item 8: what reproduced before still does ----------------------------------------------

def test_an_import_from_before_is_regrouped_by_replace(db):
    runs = imported(db, REPLAY)
    store = Store.open(db)
    for r in runs:                              # as the importer stored them before
        summary = dict(r.summary)
        summary["extra"] = {k: v for k, v in summary.get("extra", {}).items() if k != "import_key"}
        store.update_run(r.id, config=Path(r.source_file).stem, repeat_index=0,
                         time_source=None, source_file=None, summary=summary)
    again = by_file(imported(db, REPLAY, "--replace"))
    assert len(again) == 8 and again["qwen-lru_b.csv"].config == "qwen-lru"
    assert again["qwen-lru_b.csv"].repeat_index == 1


def test_times_in_texts():
    assert parse_time("date: Wed Jul 15 09:07:51 CEST 2026") == dt.datetime(2026, 7, 15, 9, 7, 51)
    assert parse_time("started=2026-07-21T09:04:06") == dt.datetime(2026, 7, 21, 9, 4, 6)
    assert parse_time("tokens=256") is None


def test_route_traces_of_three_models_are_three_models(db, tmp_path):
    """Each trace's own `model=` names its run's model (the per-token .metrics names none)."""
    src = FIX / "2026-07-15-route-trace"
    folder = tmp_path / "traces"
    folder.mkdir()
    trace = (src / "gemma.route.csv").read_text()
    for tag, model in (("bmoe-a", "Qwen3-30B-A3B-Q4_K_M"), ("bmoe-b", "gpt-oss-120b-Q4_K_M"),
                       ("bmoe-c", "google_gemma-4-26B-A4B-it-Q4_K_M")):
        (folder / f"{tag}.route.csv").write_text(trace.replace(
            "/data/local/tmp/shardllm/google_gemma-4-26B-A4B-it-Q4_K_M.gguf", f"/m/{model}.gguf"))
        shutil.copy(src / "gemma.metrics", folder / f"{tag}.metrics")
    runs = by_file(imported(db, folder))
    assert {f: r.model for f, r in runs.items()} == {
        "bmoe-a.metrics": "Qwen3-30B-A3B-Q4_K_M", "bmoe-b.metrics": "gpt-oss-120b-Q4_K_M",
        "bmoe-c.metrics": "google_gemma-4-26B-A4B-it-Q4_K_M"}


def test_export_and_runs_json_carry_the_settings_even_with_design_flags(db, tmp_path):
    imported(db, PINNED, "--design", str(DESIGN))
    code, out = orch("runs", "--db", db, "--format", "json")
    assert code == 0, out
    row = next(r for r in json.loads(out) if r["source_file"] == "bmoe-20260721-103724.csv")
    assert row["config"] == "anon-long" and row["repeat_index"] == 0
    assert row["settings"]["dense_weights"] == "anon" and row["settings"]["cache_mb"] == 3000
    code, out = orch("export", "--db", db, "-o", str(tmp_path / "x"), "--format", "json")
    assert code == 0, out
    runs = json.loads((tmp_path / "x" / "runs.json").read_text())
    one = next(r for r in runs if r["source_file"] == "bmoe-20260721-103724.csv")
    assert json.loads(one["settings"])["dense_weights"] == "anon"
    assert one["time_source"] == "file name" and one["model"] == "Qwen_Qwen3.6-35B-A3B-Q4_K_M"
