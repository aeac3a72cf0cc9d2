"""`orch show`'s light path (stats/run_figures.py) gives what the full one gives.

`read_fields` reads a stored record without pydantic: for every record the fixtures give
(each bigmoe study imported, and every adapter's record of tests/fixtures/records/v0.json's
cases, as stored today) it gives `fields_of(load_record(...))`, value and type; for any other
format, and for any value pydantic would coerce or refuse, it gives None and RunRow reads the
RunRecord. `one_run_stats` is statistics.runs_table's row to the bit, over records that take
each branch of `_scalars`. Byte-identical `orch show` output is checked by
tests/test_big_runs.py (the figures) and here (the whole output of every fixture run).
"""
from __future__ import annotations

import itertools
import types
import typing
from pathlib import Path

import pandas as pd
import pytest
from cli_helpers import orch
from test_record import V0, replay

from orchestrator import record as record_module
from orchestrator.db.store import Store
from orchestrator.ingest.importer import import_dir
from orchestrator.record import EntryState, Pressure, RunRecord, load_record
from orchestrator.stats import run_figures, statistics
from orchestrator.stats.run_figures import fields_of, one_run_stats, read_fields
from orchestrator.stats.values import plain

BIGMOE = Path(__file__).resolve().parent / "fixtures" / "bigmoe"
STUDIES = sorted(p for p in BIGMOE.iterdir() if p.is_dir())


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    """Every bigmoe study of the fixtures, imported."""
    store = Store.open(str(tmp_path_factory.mktemp("figures") / "orch.db"))
    for study in STUDIES:
        import_dir(store, study)
    return store


def _same(got: object, want: object) -> None:
    assert got == want
    assert repr(got) == repr(want)      # and every type: 3.0 is not 3


# -- the record's fields without pydantic ----------------------------------------------------
def _kind(annotation: object) -> str:
    args = [a for a in typing.get_args(annotation) if a is not type(None)] \
        if isinstance(annotation, types.UnionType) else [annotation]
    assert len(args) == 1, annotation
    kinds = {float: run_figures.FLOAT, int: run_figures.INT, bool: run_figures.BOOL,
             str: run_figures.STR, list[str]: run_figures.STRS,
             dict[str, typing.Any]: run_figures.DICT, Pressure: run_figures.PRESSURE,
             EntryState: run_figures.ENTRY}
    return kinds[args[0]]


def test_the_light_reader_knows_every_field_of_the_record() -> None:
    fields = RunRecord.model_fields
    assert {name: _kind(f.annotation) for name, f in fields.items()} == run_figures._KINDS
    factories = {name for name, f in fields.items() if f.default_factory is not None}
    assert factories == set(run_figures._EMPTY)
    assert all(fields[name].default_factory() == run_figures._EMPTY[name]()
               for name in factories)
    assert all(f.default is None for name, f in fields.items()
               if name not in factories and name != "schema_version")
    assert all(_kind(f.annotation) == run_figures.FLOAT for f in Pressure.model_fields.values())
    assert {n: _kind(f.annotation) for n, f in EntryState.model_fields.items()} == \
        {"driver": run_figures.DICT, "state": run_figures.DICT}
    assert run_figures.SCHEMA_VERSION == record_module.SCHEMA_VERSION
    assert run_figures.KIB_PER_GIB == record_module.KIB_PER_GIB
    assert run_figures.PRESSURE_FIELDS == record_module.PRESSURE_FIELDS
    assert statistics.STAT_COLUMNS is run_figures.STAT_COLUMNS


def test_every_fixture_record_reads_as_load_record_reads_it(store: Store) -> None:
    rows = store.runs()
    assert len(rows) > 50
    seen = set()
    for row in rows:
        fields = read_fields(row.summary)
        assert fields is not None, row.id         # every import of today: the light path
        _same(fields, fields_of(load_record(row.summary)))
        _same(row.record_fields, fields)
        seen |= {k for k in ("pressure", "entry_state", "token_stats", "route_trace",
                             "validity") if fields[k] is not None}
    assert seen == {"pressure", "entry_state", "token_stats", "route_trace"}


@pytest.mark.parametrize("name", sorted(n for n in V0 if V0[n]["engine"]))
def test_every_adapters_record_reads_as_load_record_reads_it(name: str) -> None:
    stored = replay(V0[name])[1].stored()
    _same(read_fields(stored), fields_of(load_record(stored)))


def _stored(store: Store) -> dict:
    return next(r.summary for r in store.runs() if r.record.entry_state is not None)


def test_other_formats_are_read_by_load_record(store: Store) -> None:
    """v0 (the adapters' old dicts), v1 (orch's facts in `extra`), a newer version, none."""
    row = store.runs()[0]
    v2 = _stored(store)
    v1 = {**v2, "schema_version": 1,
          "extra": {**v2["extra"], "driver": {"cpu_khz": 1}, "state": {"file": "a.state"}}}
    del v1["entry_state"]
    summaries = [case["summary"] for case in V0.values()] + [
        v1, {**v2, "schema_version": 3}, {**v2, "schema_version": True}, None, {}]
    for summary in summaries:
        assert read_fields(summary) is None
        _same(row.replace(summary=summary).record_fields, fields_of(load_record(summary)))
    assert row.replace(summary=v1).record_fields["entry_state"] == \
        {"driver": {"cpu_khz": 1}, "state": {"file": "a.state"}}


CURRENT_FORMAT = [   # what stored() writes, or leaves out: read without pydantic
    {"decode_tps": 3}, {"cache_resizes": 2}, {"pressure": {"peak_rss_gib": 1}},
    {"pressure": {"peak_rss_gib": 1.5, "unknown": "x"}}, {"entry_state": {"driver": None}},
    {"field_of_the_future": 1}, {"decode_tps": float("inf")},
]
COERCED = [          # what pydantic would coerce or refuse: read by pydantic
    {"complete": 1}, {"streaming": "yes"}, {"decode_tps": "2.5"}, {"decode_tps": True},
    {"decode_tps": 2 ** 60}, {"tokens": 3.0}, {"tokens": True}, {"text": 3},
    {"errors": None}, {"errors": ("a",)}, {"stderr_tail": [1]}, {"settings": None},
    {"energy": []}, {"pressure": {"peak_rss_gib": "1"}}, {"pressure": []},
    {"entry_state": "x"}, {"entry_state": {"state": 1}},
]


@pytest.mark.parametrize("change", CURRENT_FORMAT + COERCED, ids=repr)
def test_a_value_pydantic_would_coerce_is_read_by_pydantic(store: Store, change: dict) -> None:
    summary = {**_stored(store), **change}
    fields = read_fields(summary)
    assert (fields is None) == (change in COERCED)
    row = store.runs()[0].replace(summary=summary)
    try:
        want = fields_of(load_record(summary))
    except ValueError:      # pydantic's ValidationError: the full path fails as it did
        assert fields is None
        with pytest.raises(ValueError):
            row.record_fields
        return
    _same(row.record_fields, want)


def test_a_missing_field_takes_the_models_default(store: Store) -> None:
    summary = {"schema_version": 2, "decode_tps": 2.5}
    _same(read_fields(summary), fields_of(load_record(summary)))


# -- one run's statistics without numpy -------------------------------------------------------
def _tokens(kind: str) -> pd.DataFrame:
    if kind == "none":      # an engine without token rows (stat_tokens' empty frame)
        return pd.DataFrame({"run_id": pd.Series([], dtype="int64"),
                             "wall_ms": pd.Series([], dtype=float)})
    n = 60
    frame = pd.DataFrame({"run_id": [7] * n,
                          "wall_ms": [180.0 + (i * 37) % 91 + i / 7 for i in range(n)],
                          "stall_ms": [None if i % 9 == 2 else 40.0 + i % 5 for i in range(n)],
                          "majflt": [float(i % 4) for i in range(n)],
                          "cache_hit_pct": [30.0 + i / 3 for i in range(n)]})
    if kind != "no read_bytes":
        frame["read_bytes"] = [0.0 if kind == "mmap" else 2.5e8 + i for i in range(n)]
    return frame


RECORDS = [
    RunRecord(),
    RunRecord(complete=True, decode_tps=3.25, prefill_tps=12.5, ttft_s=4.5, streaming=True,
              read_mib=9000.5, cache_hit_pct=71.5, compute_s_per_token=0.4,
              io_s_per_token=0.3, stall_s_per_token=0.05, majflt_per_token=12.5,
              cache_budget_mib=3000.0, cache_resident_mib=2999.5, cache_resizes=2,
              spec_read_mib=123.25, spec_experts=40, spec_useful=17, spec_recall_pct=61.5,
              spec_auto_off=False,
              pressure=Pressure(peak_rss_gib=4.5, mem_floor_gib=0.75, cpu_temp_max_c=71.0),
              energy={"energy_j": 12.5, "power_w": 3.25, "j_per_token": 0.2,
                      "tokens_per_j": 5.0, "net_j_per_token": None, "flags": ["stale"]}),
    RunRecord(complete=False, streaming=False, cache_hit_pct=-1.0, spec_recall_pct=-1.0,
              spec_experts=0, spec_useful=0, spec_auto_off=True, read_mib=12.0,
              energy={"not_measured": "charging: plugged in"}),
    RunRecord(streaming=None, spec_recall_pct=12.5, spec_auto_off=None, spec_experts=3,
              decode_tps=7.5, stall_s_per_token=0.02, energy={"gauge_every_s": 10}),
    RunRecord(streaming=True, spec_recall_pct=0.0, spec_auto_off=True),
]
PRESSURES = [None, {"peak_rss_gib": 5.25, "mem_floor_gib": None, "cpu_temp_start_c": 40.5,
                    "cpu_temp_max_c": 66.0, "batt_temp_max_c": 33.5}]
TOKEN_KINDS = ["none", "stream", "mmap", "no read_bytes"]


@pytest.mark.parametrize("kind,record,pressure",
                         list(itertools.product(TOKEN_KINDS, RECORDS, PRESSURES)))
def test_one_run_stats_is_runs_tables_row_to_the_bit(kind, record, pressure) -> None:
    tokens = _tokens(kind)
    table = statistics.runs_table(tokens, {7: record}, {7: pressure} if pressure else None)
    want = {k: plain(v) for k, v in table.to_dict("index")[7].items()}
    figures = statistics.token_figures(tokens)
    for fields in (fields_of(record), read_fields(record.stored())):
        got = one_run_stats(figures, fields, pressure)
        assert list(got) == list(want)
        assert repr(got) == repr(want)


# -- `orch show` prints what it printed ------------------------------------------------------
def test_show_prints_the_same_on_both_paths(store: Store, monkeypatch) -> None:
    """Every fixture run through the light path (kept figures, read_fields), then with the
    RunRecord and the computed figures: the same text."""
    from orchestrator.db import runs as runs_module

    db = str(store.engine.url.database)
    light = {row.id: orch("show", str(row.id), "--db", db) for row in store.runs()}
    monkeypatch.setattr(runs_module.RunRow, "record_fields",
                        property(lambda row: fields_of(row.record)))
    monkeypatch.setattr(runs_module.Runs, "show_stats",
                        lambda self, row: self.stats_dicts([row])[row.id])
    for rid, (code, text) in light.items():
        assert code == 0, text
        assert orch("show", str(rid), "--db", db) == (code, text), rid
