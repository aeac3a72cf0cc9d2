"""Where an imported run's start time came from (run.time_source) and which file it was read
from (run.source_file): stored by migration 0009, and shown without calling a study's local
time UTC by `orch runs` (table and json), `orch show`, `orch export` and the report."""
from __future__ import annotations

import datetime as dt
import json

import pandas as pd
import pytest
from cli_helpers import orch_ok as orch
from sqlalchemy import create_engine, text

from orchestrator.db import schema
from orchestrator.db.rows import parse_settings
from orchestrator.db.runs import Runs
from orchestrator.db.store import MIGRATIONS, Store, current_revision, revisions
from orchestrator.report.document import header, provenance
from orchestrator.results import report_data as context

LOCAL_START = dt.datetime(2026, 7, 21, 9, 4, 6)            # as the study wrote it, no zone
MTIME_START = dt.datetime(2026, 7, 22, 18, 30, 0, tzinfo=dt.UTC)
LIVE_START = dt.datetime(2026, 12, 1, 8, 0, 0, tzinfo=dt.UTC)


def add_run(store: Store, sid: int, device: int, config: str, *, started: dt.datetime | None,
            time_source: str | None = None, source_file: str | None = None,
            flags: str | None = None, tps: float = 4.0) -> int:
    """A stored ok run of 8 tokens at exactly `tps` tok/s; time_source and source_file set
    afterwards with update_run, as the importer does once it has read the files."""
    rid = store.create_run(uid=f"u-{sid}-{config}", session_id=sid, device_id=device,
                           cell_key=f"-|{config}|0", model="-", config=config, flags=flags,
                           repeat_index=0, order_index=0, status="running", engine="bmoe",
                           superseded=False)
    with store.engine.begin() as conn:
        conn.execute(schema.token.insert(), [{"run_id": rid, "seq": k, "step": k + 1,
                                              "wall_ms": 1000.0 / tps} for k in range(8)])
    ended = started + dt.timedelta(seconds=2) if started else None
    store.update_run(rid, status="ok", started_at=started, ended_at=ended,
                     time_source=time_source, source_file=source_file)
    return rid


def import_session(store: Store, runs: list[tuple[str, str | None, dt.datetime | None]]) -> int:
    """An import session of runs (config, time_source, started)."""
    device = store.upsert_device("phone", "local")
    sid = store.create_session(kind="import", name="study", matrix_name="study",
                               source_dir="/studies/x", ended_at=LIVE_START)
    for config, source, started in runs:
        add_run(store, sid, device, config, started=started, time_source=source,
                source_file=f"{config}.csv", flags="threads=4 cache_mb=4000")
    return sid


@pytest.fixture
def db(tmp_path):
    """A store with a live session (run 1) and an import (run 2 timed by its file name, run 3
    by its file's mtime)."""
    path = str(tmp_path / "orch.db")
    store = Store.open(path)
    device = store.upsert_device("local", "local")
    live = store.create_session(kind="run", name="live", matrix_name="m")
    add_run(store, live, device, "live_a", started=LIVE_START, flags="-t 4 --ctx 512", tps=5.0)
    sid = store.create_session(kind="import", name="study", matrix_name="study")
    add_run(store, sid, device, "bmoe_k6", started=LOCAL_START, time_source="file name",
            source_file="bmoe-20260721-090406.csv", flags="threads=4 model=a b.gguf")
    add_run(store, sid, device, "gemma_k6", started=MTIME_START, time_source="mtime",
            source_file="warmup/gemma_k6.csv", flags="threads=4")
    return path


def test_a_fresh_store_is_at_the_newest_revision_with_the_columns(tmp_path):
    store = Store.open(str(tmp_path / "fresh.db"))
    assert revisions()[-1] >= "0009" and current_revision(store.engine) == revisions()[-1]
    assert {"time_source", "source_file"} <= set(schema.run.c.keys())


def test_an_0008_store_migrates_and_keeps_its_runs(tmp_path):
    from alembic import command
    from alembic.config import Config

    path = tmp_path / "old.db"
    engine = create_engine(f"sqlite:///{path}")
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    with engine.begin() as conn:
        config.attributes["connection"] = conn
        command.upgrade(config, "0008")
        conn.execute(text("INSERT INTO device (id, name, kind) VALUES (1, 'd', 'local')"))
        conn.execute(text("INSERT INTO session (id, kind, name) VALUES (1, 'import', 's')"))
        conn.execute(text("INSERT INTO run (id, uid, session_id, device_id, cell_key, config, "
                          "status, superseded) VALUES (1, 'u', 1, 1, '-|a|0', 'a', 'ok', 0)"))
    assert current_revision(engine) == "0008"
    engine.dispose()
    store = Store.open(str(path))
    assert current_revision(store.engine) == revisions()[-1]
    row = Runs(store).get(1)
    assert row.stored_figures is not None       # computed by the migration (db/figures.py)
    assert row.time_source is None and row.source_file is None
    assert row.clock == "file"      # an import stored before time_source took the mtime
    store.update_run(1, time_source="preamble", source_file="a.csv")
    assert (Runs(store).get(1).time_source, Runs(store).get(1).source_file) == ("preamble", "a.csv")


def test_settings_parse_the_importers_key_value_flags():
    assert parse_settings("threads=4 model=a b.gguf cache_mb=4000") == {
        "threads": "4", "model": "a b.gguf", "cache_mb": "4000"}
    assert parse_settings(None) == {} and parse_settings("-t 4") == {}


def test_runs_json(db):
    rows = {r["config"]: r for r in json.loads(orch("runs", "--db", db, "--format", "json"))}
    live, local, mtime = rows["live_a"], rows["bmoe_k6"], rows["gemma_k6"]
    assert live["time_source"] is None and live["source_file"] is None
    assert live["settings"] is None and live["flags"] == "-t 4 --ctx 512"
    assert live["started_at"] == "2026-12-01T08:00:00"      # stored as is, no offset added
    assert live["tokens"] == 8 and live["mean_tok_s"] == pytest.approx(5.0)
    assert live["repeat_index"] == 0 and live["session"] == 1 and live["device"] == "local"
    assert local["time_source"] == "file name"
    assert local["source_file"] == "bmoe-20260721-090406.csv"
    assert local["started_at"] == "2026-07-21T09:04:06"
    assert local["settings"] == {"threads": "4", "model": "a b.gguf"}
    assert mtime["time_source"] == "mtime" and mtime["source_file"] == "warmup/gemma_k6.csv"
    assert [r["id"] for r in rows.values()] == [3, 2, 1]     # newest first, as the table


def test_runs_table_marks_file_times_only(db):
    out = orch("runs", "--db", db)
    assert "2026-07-22 18:30 (file time)" in out
    assert "2026-07-21 09:04" in out and "09:04 (file" not in out
    assert "UTC" not in out


def test_show_says_where_the_start_came_from(db):
    live = orch("show", "1", "--db", db)
    assert "started 2026-12-01 08:00:00 UTC" in live and "source:" not in live
    local = orch("show", "2", "--db", db)
    assert "started 2026-07-21 09:04:06 (from the file name, local time)" in local
    assert "source: bmoe-20260721-090406.csv" in local and "UTC" not in local
    mtime = orch("show", "3", "--db", db)
    assert ("started 2026-07-22 18:30:00 (from the file's mtime: the files did not record "
            "when it ran)") in mtime
    assert "source: warmup/gemma_k6.csv" in mtime


@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_export_carries_time_source_source_file_and_settings(db, tmp_path, fmt):
    out = tmp_path / "exp"
    orch("export", "2", "--db", db, "--format", fmt, "-o", str(out))
    frame = pd.read_csv(out / "runs.csv") if fmt == "csv" else pd.read_json(out / "runs.json")
    by = {r["config"]: r for r in frame.to_dict("records")}
    assert by["bmoe_k6"]["time_source"] == "file name"
    assert by["gemma_k6"]["source_file"] == "warmup/gemma_k6.csv"
    assert json.loads(by["bmoe_k6"]["settings"]) == {"threads": "4", "model": "a b.gguf"}


def period(store: Store, sid: int) -> str:
    return header.header(context.build(store, Runs(store).current(sid)))["period"]


def test_report_header_local_times(tmp_path):
    store = Store.open(str(tmp_path / "r.db"))
    sid = import_session(store, [("a", "file name", LOCAL_START),
                                 ("b", "preamble", LOCAL_START + dt.timedelta(hours=1))])
    assert period(store, sid) == ("measured 2026-07-21 09:04:06 → 2026-07-21 10:04:08 "
                                  "(local time, from the files); imported 2026-12-01 08:00:00 UTC")


def test_report_header_file_times_only(tmp_path):
    store = Store.open(str(tmp_path / "r.db"))
    sid = import_session(store, [("a", "mtime", MTIME_START), ("b", None, MTIME_START)])
    assert period(store, sid) == ("times unknown (file times); order from the file order; "
                                  "imported 2026-12-01 08:00:00 UTC")


def test_report_header_mixed(tmp_path):
    store = Store.open(str(tmp_path / "r.db"))
    sid = import_session(store, [("a", "log", LOCAL_START), ("b", "mtime", MTIME_START)])
    got = period(store, sid)
    assert got.startswith("measured 2026-07-21 09:04:06 → 2026-07-21 09:04:08 (local time, "
                          "from the files); 1 run(s) with file times only")
    assert "18:30" not in got


def test_provenance_runs_table_marks_file_times(tmp_path):
    store = Store.open(str(tmp_path / "r.db"))
    sid = import_session(store, [("a", "log", LOCAL_START), ("b", "mtime", MTIME_START)])
    table = provenance.runs_table(context.build(store, Runs(store).current(sid)))
    started = {row[4]: row[8] for row in table.rows}
    assert started == {"a": "2026-07-21 09:04:06", "b": "2026-07-22 18:30:00 (file time)"}
    assert not any("UTC" in h for h in table.headers)
