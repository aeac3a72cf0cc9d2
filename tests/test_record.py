"""The run record: every adapter returns one, the store keeps it with its schema version, and
runs stored before it (version 0: the adapters' old summary dicts) still load and give the
statistics they gave then (tests/fixtures/records/v0.json, made by make_v0.py next to it)."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
from test_adapters import CELERON_OPTIONS
from test_analysis_oracle import run_stats

from orchestrator.db.runs import Runs
from orchestrator.db.store import Store
from orchestrator.plugins import get_adapter
from orchestrator.engines.bmoe_format import parse_metrics_sidecar
from orchestrator.record import SCHEMA_VERSION, Pressure, RunRecord, load_record
from orchestrator.ingest.importer import import_dir
from orchestrator.run.recorder import RunRecorder
from orchestrator.run.runner import DeviceRunner

FIX = Path(__file__).resolve().parent / "fixtures"
V0 = json.loads((FIX / "records" / "v0.json").read_text())


def replay(case: dict) -> tuple[pd.DataFrame, RunRecord]:
    """Feed a v0 case's files through today's adapter: its token rows and record."""
    options = CELERON_OPTIONS if case["engine"] == "generic" else None
    parser = get_adapter(case["engine"], options).new_parser()
    rows = []
    for tag, rel in case["feeds"]:
        lines = (FIX / rel).read_text(encoding="utf-8").splitlines()
        if tag == "C" and case["drop_tail"]:
            lines = lines[:-case["drop_tail"]]
        for line in lines:
            rows += parser.feed(tag, line)
    tokens = pd.DataFrame([{k: v for k, v in dataclasses.asdict(r).items() if k != "extra"}
                           for r in rows])
    return tokens, parser.record()


NOT_MEASURED_ON_MMAP = ("read_mib_per_token", "stall_ms_per_token")


def assert_same_stats(got: dict, want: dict) -> None:
    # every statistic of the v0 snapshot, unchanged; columns added since may come on top
    assert set(want) <= set(got), set(want) - set(got)
    for key, value in want.items():
        if key in NOT_MEASURED_ON_MMAP and got.get("streaming") is False and value == 0.0:
            # v0 printed 0 for what a plain mmap run does not measure (docs/formats.md §1:
            # the engine cannot count page-cache reads); orch now reads it as "not measured"
            assert got[key] is None, key
            continue
        if isinstance(value, float):
            assert got[key] == pytest.approx(value, rel=1e-12), key
        else:
            assert got[key] == value, key


@pytest.mark.parametrize("name", sorted(V0))
def test_v0_records_load_and_give_the_same_statistics(name):
    case = V0[name]
    record = load_record(case["summary"])
    assert record.schema_version == SCHEMA_VERSION
    tokens = replay(case)[0] if case["engine"] else pd.DataFrame()
    assert_same_stats(run_stats(tokens, record), case["stats"])


@pytest.mark.parametrize("name", sorted(n for n in V0 if V0[n]["engine"]))
def test_todays_records_give_the_v0_statistics(name):
    case = V0[name]
    tokens, record = replay(case)
    if "sidecar" in case["summary"]:          # the importer's part
        record.pressure = Pressure.from_sidecar(case["summary"]["sidecar"])
    assert_same_stats(run_stats(tokens, record), case["stats"])
    # what the store keeps reads back as the same record
    assert load_record(json.loads(json.dumps(record.stored()))) == record


def test_v0_fields_are_typed():
    bmoe = load_record(V0["bmoe_import_jul13_qwen_sg_ov"]["summary"])
    assert bmoe.tokens == 256 and bmoe.decode_tps == bmoe.extra["trailer"]["tok/s"] > 0
    assert bmoe.pressure is not None and bmoe.pressure.peak_rss_gib == pytest.approx(
        V0["bmoe_import_jul13_qwen_sg_ov"]["stats"]["peak_rss_gib"])
    assert bmoe.extra["sidecar"]["peak_rss_kb"] > 0 and bmoe.extra["trailer"]["tokens"] == 256
    assert bmoe.streaming is True and bmoe.spec_auto_off is False
    bench = load_record(V0["llama_bench"]["summary"])
    assert bench.engine_build == "3cb7ffb1a (10453)" and bench.decode_tps == pytest.approx(2.063539)
    assert bench.extra["repetition_spread"]["n"] == 5 and bench.streaming is False
    crashed = load_record(V0["llama_crashed"]["summary"])
    assert crashed.complete is False and crashed.stderr_tail and crashed.errors
    bare = load_record({"tokens": 12, "tok/s": 4.5})
    assert (bare.complete, bare.tokens, bare.decode_tps) == (True, 12, 4.5)
    empty = load_record(None)
    assert empty.complete is None and empty == load_record({})


def test_stored_json_carries_the_schema_version_and_no_nan():
    record = RunRecord(complete=True, decode_tps=float("nan"), extra={"x": [float("inf"), 1.0],
                                                                      "path": Path("/a")})
    stored = record.stored()
    assert stored["schema_version"] == SCHEMA_VERSION == 2
    assert stored["decode_tps"] is None and stored["extra"] == {"x": [None, 1.0], "path": "/a"}
    json.dumps(stored, allow_nan=False)
    newer = dict(stored, schema_version=3, field_of_the_future=1)
    assert load_record(newer).complete is True          # unknown fields are dropped


def test_a_version_1_record_reads_its_orch_facts_into_their_fields():
    """Version 1 kept validity, the route trace and an import's entry state in `extra`."""
    v1 = {"schema_version": 1, "complete": True, "decode_tps": 2.5,
          "extra": {"validity": {"load": "calm"}, "route_trace": {"preamble": {"model": "m"}},
                    "driver": {"cpu_khz": 1555200}, "state": {"file": "a.state"},
                    "trailer": {"tok/s": 2.5}}}
    record = load_record(v1)
    assert record.schema_version == SCHEMA_VERSION
    assert record.validity == {"load": "calm"}
    assert record.route_trace == {"preamble": {"model": "m"}}
    assert record.entry_state.driver == {"cpu_khz": 1555200}
    assert record.entry_state.state == {"file": "a.state"}
    assert record.extra == {"trailer": {"tok/s": 2.5}}     # the engine's own, free form
    assert load_record(record.stored()) == record           # and it round-trips as v2


def test_garbled_trailer_values_cost_the_value_not_the_record():
    p = get_adapter("bmoe").new_parser()
    for line in ["step,wall_ms", "1,100.0",
                 "# summary tokens=1.5 tok/s=fast cache_hit_pct=nan spec_auto_off=x read_MiB=2"]:
        p.feed("C", line)
    r = p.record()
    assert r.tokens is None and r.decode_tps is None and r.cache_hit_pct is None
    assert r.spec_auto_off is None and r.read_mib == 2.0 and r.complete is True


# ---- engine_build reaches the run row ------------------------------------------------------

def test_llama_records_carry_the_engine_build():
    bench = get_adapter("llama-bench").new_parser()
    for line in (FIX / "llama" / "llama-bench.jsonl").read_text().splitlines():
        bench.feed("O", line)
    cli = get_adapter("llama-cli").new_parser()
    for line in (FIX / "llama" / "completion.stderr").read_text().splitlines():
        cli.feed("E", line)
    assert bench.record().engine_build == cli.record().engine_build == "3cb7ffb1a (10453)"


def test_runner_stores_record_and_engine_build(tmp_path):
    store = Store.open(str(tmp_path / "orch.db"))
    device = store.upsert_device("d", "local")
    session = store.create_session(kind="run", name="s")
    for engine, tag, fixture in (("llama-bench", "O", "llama-bench.jsonl"),
                                 ("llama-cli", "E", "completion.stderr")):
        run_id = store.create_run(uid=engine, session_id=session, device_id=device,
                                  cell_key=f"m|{engine}|0", status="running", engine=engine,
                                  superseded=False)
        recorder = RunRecorder(store, run_id, get_adapter(engine).new_parser())
        for line in (FIX / "llama" / fixture).read_text().splitlines():
            recorder.handle(f"{tag}\t{line}")
        recorder.handle("X\t0\t0\t1000")

        class Progress:
            def cell_done(self, *args):
                pass

        runner = DeviceRunner.__new__(DeviceRunner)
        runner.store, runner.progress, runner.facts = store, Progress(), {}
        runner.loaded = SimpleNamespace(matrix=SimpleNamespace(sample_interval=1.0))
        runner._finish(run_id, recorder, "ok", None)
        row = Runs(store).get(run_id)
        assert row.engine_build == "3cb7ffb1a (10453)"
        assert row.summary["schema_version"] == SCHEMA_VERSION
        assert load_record(row.summary).engine_build == row.engine_build


def test_import_stores_records_with_pressure(tmp_path):
    store = Store.open(str(tmp_path / "orch.db"))
    src = FIX / "bigmoe" / "2026-07-17"
    folder = tmp_path / "in"
    folder.mkdir()
    for suffix in (".csv", ".metrics", ".out"):
        (folder / f"gpt_k2{suffix}").write_bytes((src / f"gpt_k2{suffix}").read_bytes())
    import_dir(store, folder)
    (run,) = Runs(store).current()
    assert run.summary["schema_version"] == SCHEMA_VERSION
    record = load_record(run.summary)
    sidecar = parse_metrics_sidecar((src / "gpt_k2.metrics").read_text())
    assert record.pressure == Pressure.from_sidecar(sidecar)
    assert record.extra["sidecar"] == sidecar
