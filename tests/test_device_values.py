"""Device values the store cannot hold (docs/reliability.md, "Every device value fits the
store"): a local device whose thermal zone reads a number beyond 64 bits, one that reads
3,000,000,000 m°C (beyond PostgreSQL's 32-bit Integer) and a clock that jumps past 2^31 ms.
On SQLite and on PostgreSQL the run completes `ok`, the next cell runs, the value that cannot
be held is dropped and named once in the run's warnings, nothing is left running, and both
stores hold the same rows."""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from agent_helpers import tagged_pids
from cli_helpers import fake_thermal_zone, orch
from pg_fixture import fresh_pg_database
from sqlalchemy import select

from orchestrator.db import schema
from orchestrator.db.runs import Runs
from orchestrator.db.store import Store

ENGINES = Path(__file__).resolve().parent / "engines"
HUGE = 2 ** 70                     # beyond any integer column and JSON's 64 bits
WIDE = 3_000_000_000               # beyond a 32-bit Integer, within a BigInteger
DIGITS = int("9" * 400)            # beyond even a float: the progress line's °C overflowed
JUMP_S = 3_000_000                 # the uptime the clock jumps to: t_ms past 2^31

# --put FILE VALUE --await PATTERN [--restore]: write VALUE into FILE (as sysfs answers, in one
# step), wait (bounded) until the agent's spool holds a line matching PATTERN, i.e. the agent
# sampled it, and put the old content back when --restore; then the fake bmoe engine as it is
PUTTER = r"""put=""; value=""; pattern=""; restore=""; prev=""
for a in "$@"; do
  [ "$prev" = --put ] && put=$a
  [ "$prev" = --value ] && value=$a
  [ "$prev" = --await ] && pattern=$a
  [ "$a" = --restore ] && restore=1
  prev=$a
done
if [ -n "$put" ]; then
  old=$(cat "$put")
  echo "$value" > "$put.new" && mv "$put.new" "$put"
  i=0
  until grep -q -e "$pattern" "${ORCH_JOB}spool" 2>/dev/null || [ $i -ge 600 ]; do
    sleep 0.05; i=$((i + 1))
  done
  if [ -n "$restore" ]; then echo "$old" > "$put.new" && mv "$put.new" "$put"; fi
fi
"""


@pytest.fixture
def values_ws(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ORCH_DB", raising=False)
    zone = fake_thermal_zone(tmp_path / "sys", 40.0)
    monkeypatch.setenv("ORCH_THERMAL_DIR", str(zone.parent))
    for key, sub in (("ORCH_POWERCAP_DIR", "powercap"), ("ORCH_HWMON_DIR", "hwmon"),
                     ("ORCH_POWER_SUPPLY_DIR", "ps"), ("ORCH_BATTERY_DIR", "ps/battery")):
        (tmp_path / "sys" / sub).mkdir(parents=True)
        monkeypatch.setenv(key, str(tmp_path / "sys" / sub))
    uptime = tmp_path / "sys" / "uptime"
    uptime.write_text("100.00 50.00\n")
    monkeypatch.setenv("ORCH_UPTIME", str(uptime))
    (tmp_path / "devices.yaml").write_text(f"devices:\n  local:\n    kind: local\n"
                                           f"    workdir: {tmp_path}/dev\n")
    body = (ENGINES / "fake_bmoe.sh").read_text().split("\n", 1)[1]
    (tmp_path / "engine.sh").write_text("#!/bin/sh\n" + PUTTER + body)
    (tmp_path / "m.gguf").write_bytes(b"GGUF" + bytes(4092))
    return tmp_path, zone, uptime


CASES = {
    "huge": lambda zone, up: (f"--put {zone}/temp --value {HUGE} "
                              f"--await cpu_temp_mC={HUGE} --restore"),
    "digits": lambda zone, up: (f"--put {zone}/temp --value {DIGITS} "
                                f"--await cpu_temp_mC={DIGITS} --restore"),
    "wide": lambda zone, up: (f"--put {zone}/temp --value {WIDE} "
                              f"--await cpu_temp_mC={WIDE} --restore"),
    "clock": lambda zone, up: (f"--put {up} --value '{JUMP_S}.00 50.00' "
                               f"--await '^S.2999'"),
}


def run_matrix(ws: Path, zone: Path, uptime: Path, case: str, db: str) -> tuple[int, str]:
    path = ws / f"{case}.yaml"
    path.write_text(textwrap.dedent(f"""\
        name: values-{case}
        engine: bmoe
        binary: {{local: engine.sh}}
        models: {{m: {ws}/m.gguf}}
        prompt: p
        tokens: 4
        sample_interval: 100ms
        timeout: 0
        configs:
          odd: {CASES[case](zone, uptime)}
          next: --delay 0.01
        """))
    # no cell timeout: the agent times a cell by the device's clock, and a jump past 2^31 ms
    # (24.8 days) is beyond any timeout a matrix may set (7 days)
    return orch("run", str(path), "--db", db)


def stored(db: str) -> tuple[list, list]:
    """(the runs, oldest first; every sample row as (run's config, t_ms, cpu_temp_mC))."""
    store = Store.open(db)
    runs = sorted(Runs(store).current(), key=lambda r: r.id)
    config = {r.id: r.config for r in runs}
    s = schema.sample
    rows = store.fetch(select(s.c.run_id, s.c.t_ms, s.c.cpu_temp_mC, s.c.extra)
                       .order_by(s.c.run_id, s.c.seq))
    return runs, [(config[r.run_id], r.t_ms, r.cpu_temp_mC, r.extra) for r in rows]


def check_case(ws: Path, zone: Path, uptime: Path, case: str, db: str) -> list:
    code, out = run_matrix(ws, zone, uptime, case, db)
    assert code == 0, out
    assert "Traceback" not in out and "Free the space" not in out, out
    runs, samples = stored(db)
    assert [(r.config, r.status) for r in runs] == [("odd", "ok"), ("next", "ok")], out
    assert tagged_pids(f"{ws}/dev/runs/", prefix=True) == []
    odd = runs[0]
    warnings = [w for w in odd.warnings or [] if "cannot hold" in w]
    if case in ("huge", "digits"):
        # dropped (NULL) in the column and in `extra`, named once for each
        assert any(r[0] == "odd" and r[2] is None and (r[3] or {}).get("tz0_mC") is None
                   for r in samples)
        assert all(r[2] is None or r[2] < 2 ** 31 for r in samples)
        shown = str(HUGE if case == "huge" else DIGITS)[:20]
        assert len([w for w in warnings if f"sample.cpu_temp_mC={shown}" in w]) == 1, warnings
        assert len([w for w in warnings if f"tz0_mC={shown}" in w]) == 1, warnings
    elif case == "wide":
        assert ("odd", WIDE) in [(r[0], r[2]) for r in samples]
        assert warnings == []
    else:
        assert max(r[1] for r in samples if r[0] == "odd") > 2 ** 31
        assert warnings == []
    assert not [w for w in runs[1].warnings or [] if "cannot hold" in w]
    return [(r[0], r[2]) for r in samples if r[0] == "odd" and r[2] is not None and r[2] > 50000]


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_device_value_the_store_cannot_hold_on_sqlite(values_ws, case):
    ws, zone, uptime = values_ws
    check_case(ws, zone, uptime, case, str(ws / "orch.db"))


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_device_value_the_store_cannot_hold_on_postgres(values_ws, pg_url, case):
    ws, zone, uptime = values_ws
    on_pg = check_case(ws, zone, uptime, case, fresh_pg_database(pg_url, f"values_{case}"))
    (zone / "temp").write_text("40000\n")
    uptime.write_text("100.00 50.00\n")
    assert check_case(ws, zone, uptime, case, str(ws / "orch.db")) == on_pg


# ---- the import path ----------------------------------------------------------------------

PROTOCOL = [
    'BMOE_READY {"load_s":12.5,"arch":"qwen3moe","n_ctx":4096,"n_expert_used":8}',
    'BMOE_BEGIN {"id":1}',
    'BMOE_PROGRESS {"step":1,"steps":10,"wall_ms":400.0}',
    'BMOE_DONE {"id":1,"cancelled":false,"tokens":10,"tok_s":2.5,"prefill_s":3.0,'
    '"prefill_tps":6.67,"n_prompt":20,"n_past":30,"read_mib":100.0,"text":"hi"}',
]
# a `.mem` series (ingest/series.py) read as the run's samples: an RSS beyond 64 bits, a swap
# size of 400 digits (Inf as a float), a time beyond 64 bits (the row means nothing: skipped)
MEM = f"""t=0 VmSwap: 0 kB VmRSS: {HUGE} kB
t=10 VmSwap: {'9' * 400} kB VmRSS: 3400000 kB
t={HUGE} VmSwap: 100 kB VmRSS: 3300000 kB
t=20 VmSwap: 200 kB VmRSS: {WIDE} kB
"""


def _import_samples(tmp_path: Path, db: str) -> tuple[list, list]:
    folder = tmp_path / "study"
    folder.mkdir(exist_ok=True)
    (folder / "s1.txt").write_text("\n".join(PROTOCOL) + "\n")
    (folder / "s1.mem").write_text(MEM)
    code, out = orch("import", str(folder), "--db", db)
    assert code == 0, out
    assert "Traceback" not in out, out
    store = Store.open(db)
    (run,) = Runs(store).current()
    assert run.status != "running"
    s = schema.sample
    rows = store.fetch(select(s.c.t_ms, s.c.rss_kb, s.c.extra).where(s.c.run_id == run.id)
                       .order_by(s.c.seq))
    dropped = [w for w in run.warnings or [] if "cannot hold" in w]
    return [tuple(r) for r in rows], dropped


IMPORTED = [(0, None, {"swap_kb": 0}), (10000, 3400000, {"swap_kb": None}),
            (20000, WIDE, {"swap_kb": 200})]


def test_an_import_drops_the_values_the_store_cannot_hold_on_sqlite(tmp_path):
    rows, dropped = _import_samples(tmp_path, str(tmp_path / "orch.db"))
    assert rows == IMPORTED
    assert [w.split(": ", 1)[1] for w in dropped] == [
        f"sample.rss_kb={HUGE} (beyond what a 64-bit integer holds)",
        "sample.extra: swap_kb=inf (not a finite number)",
        f"sample.t_ms={HUGE * 1000} (beyond what a 64-bit integer holds)"]


def test_an_import_drops_the_values_the_store_cannot_hold_on_postgres(tmp_path, pg_url):
    on_pg = _import_samples(tmp_path, fresh_pg_database(pg_url, "values_import"))
    assert on_pg == _import_samples(tmp_path, str(tmp_path / "orch.db"))


# ---- the one owner: limits from the schema's column types ---------------------------------

def test_the_limits_are_the_schema_column_types_narrowest_backend():
    from sqlalchemy import BigInteger, Integer, SmallInteger

    from orchestrator.db.storable import int_range

    for table in schema.metadata.tables.values():
        for column in table.columns:
            kind = column.type
            want = (None if not isinstance(kind, Integer) else 64 if isinstance(kind, BigInteger)
                    else 16 if isinstance(kind, SmallInteger) else 32)
            got = int_range(column)
            assert got == (None if want is None else (-2 ** (want - 1), 2 ** (want - 1) - 1))
    assert int_range(schema.sample.c.t_ms)[1] == 2 ** 63 - 1      # widened (0016)
    assert int_range(schema.sample.c.cpu_temp_mC)[1] == 2 ** 63 - 1
    assert int_range(schema.token.c.step)[1] == 2 ** 31 - 1        # a token number: 32 bits


def test_a_row_keeps_what_it_can_and_is_skipped_without_a_required_value():
    from orchestrator.db.storable import storable_row

    row = {"run_id": 1, "seq": 0, "t_ms": 5, "cpu_temp_mC": HUGE, "majflt": 3,
           "extra": {"tz": [1, float("nan"), {"deep": HUGE}], "ok": 1.5}}
    kept, dropped = storable_row(schema.sample, row, required=("t_ms",))
    assert kept == {**row, "cpu_temp_mC": None,
                    "extra": {"tz": [1, None, {"deep": None}], "ok": 1.5}}
    assert [w.split(": ", 1)[1] for w in dropped] == [
        f"sample.cpu_temp_mC={HUGE} (beyond what a 64-bit integer holds)",
        "sample.extra: tz[1]=nan (not a finite number)",
        f"sample.extra: tz[2].deep={HUGE} (beyond what a 64-bit integer holds)"]
    assert row["cpu_temp_mC"] == HUGE                       # the caller's row is not changed
    assert storable_row(schema.sample, {**row, "t_ms": HUGE}, required=("t_ms",))[0] is None
    assert storable_row(schema.route, {"run_id": 1, "seq": 0, "step": WIDE})[0] is None
    kept, dropped = storable_row(schema.run, {"rc": WIDE, "cooldown_s": float("inf")})
    assert kept == {"rc": None, "cooldown_s": None} and len(dropped) == 2


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_a_runs_own_values_are_dropped_and_named_once(tmp_path, request, backend):
    """Summary, figures and start readings (update_run): a number the store cannot hold is
    dropped, named once in the run's warnings, and those names survive the runner's own
    warnings replacing the list at the run's end."""
    db = str(tmp_path / "orch.db") if backend == "sqlite" else \
        fresh_pg_database(request.getfixturevalue("pg_url"), "values_run")
    store = Store.open(db)
    device = store.upsert_device("d", "local")
    session = store.create_session(kind="run")
    run_id = store.create_run(uid="u1", session_id=session, device_id=device, cell_key="k",
                              status="running", temp_start={"cpu_temp_mC": HUGE}, rc=WIDE)
    store.update_run(run_id, temp_start={"cpu_temp_mC": HUGE + 1})   # the same subject again
    store.update_run(run_id, summary={"tokens": 4, "tok_s": float("inf")},
                     mem_avail_start_kb=HUGE, warnings=["engine: a warning"])
    store.update_run(run_id, status="ok", warnings=["the runner's list at the end"])
    (run,) = Runs(store).current()
    assert (run.status, run.rc, run.mem_avail_start_kb) == ("ok", None, None)
    assert run.temp_start == {"cpu_temp_mC": None} and run.summary["tok_s"] is None
    assert run.warnings[0] == "the runner's list at the end"
    assert [w.split(": ", 1)[1] for w in run.warnings[1:]] == [
        f"run.temp_start: cpu_temp_mC={HUGE} (beyond what a 64-bit integer holds)",
        f"run.rc={WIDE} (beyond what a 32-bit integer holds)",
        "run.summary: tok_s=inf (not a finite number)",
        f"run.mem_avail_start_kb={HUGE} (beyond what a 64-bit integer holds)"]


# ---- a value error is not a full disk -----------------------------------------------------

@pytest.mark.slow
def test_a_value_the_store_refuses_is_not_called_a_full_disk(values_ws, pg_url):
    """Should a value get through (here: a store whose column another tool narrowed to a
    smallint, which 40,000 m°C overflows), the line names the refused value and gives no
    "Free the space" advice; the engine is stopped, the run interrupted, nothing left
    running."""
    ws, zone, uptime = values_ws
    db = fresh_pg_database(pg_url, "values_narrowed")
    store = Store.open(db)
    with store.engine.begin() as conn:
        conn.exec_driver_sql('ALTER TABLE sample ALTER COLUMN "cpu_temp_mC" TYPE smallint')
    code, out = run_matrix(ws, zone, uptime, "huge", db)
    assert code == 1, out
    assert "the store refused a value during run #1 (smallint out of range)" in out, out
    assert "Free the space" not in out and "Traceback" not in out, out
    (run,) = Runs(Store.open(db)).current()
    assert run.status == "interrupted", run
    assert tagged_pids(f"{ws}/dev/runs/", prefix=True) == []


# ---- token rows of the engines without their own checks (the generic adapter) ---------------

GENERIC = {"argv": ["{binary}", "{csv}"], "csv_columns": {"step": "n", "wall_ms": "ms",
                                                          "read_bytes": "bytes"}}


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_a_generic_engines_token_values_are_dropped_and_named(tmp_path, request, backend):
    """Through the recorder into a real store: a read_bytes beyond 64 bits is dropped (NULL),
    a step beyond the step column skips its row, an `extra` NaN... named once each."""
    from orchestrator.plugins import get_adapter
    from orchestrator.run.recorder import RunRecorder

    db = str(tmp_path / "orch.db") if backend == "sqlite" else \
        fresh_pg_database(request.getfixturevalue("pg_url"), "values_generic")
    store = Store.open(db)
    run_id = store.create_run(uid="g1", session_id=store.create_session(kind="run"),
                              device_id=store.upsert_device("d", "local"), cell_key="k",
                              status="running")
    recorder = RunRecorder(store, run_id, get_adapter("generic", GENERIC).new_parser())
    for line in ["n,ms,bytes,note", "1,100,10,1", f"2,100,{HUGE},1", f"{WIDE},100,10,1",
                 f"4,100,{HUGE},{HUGE}", "5,100,10,2"]:
        recorder.handle("C\t" + line)
    recorder.flush()
    t = schema.token
    rows = store.fetch(select(t.c.step, t.c.read_bytes, t.c.extra).where(t.c.run_id == run_id)
                       .order_by(t.c.seq))
    assert [tuple(r) for r in rows] == [(1, 10, {"note": 1}), (2, None, {"note": 1}),
                                        (4, None, {"note": None}), (5, 10, {"note": 2})]
    assert [w.split(": ", 1)[1] for w in recorder.warnings] == [
        f"token.read_bytes={HUGE} (beyond what a 64-bit integer holds)",
        f"token.step={WIDE} (beyond what a 32-bit integer holds)",
        f"token.extra: note={HUGE} (beyond what a 64-bit integer holds)"]


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_a_ceiling_figure_the_store_cannot_hold_is_named_in_its_notes(tmp_path, request,
                                                                      backend):
    import datetime as dt

    from orchestrator.db.ceilings import ceiling_rows, replace_day

    db = str(tmp_path / "orch.db") if backend == "sqlite" else \
        fresh_pg_database(request.getfixturevalue("pg_url"), "values_ceiling")
    store = Store.open(db)
    device = store.upsert_device("d", "local")
    replace_day(store, {"device_id": device, "day": "2026-12-05",
                        "measured_at": dt.datetime.now(dt.timezone.utc), "knee_lanes": WIDE,
                        "knee_read_kib": WIDE, "best_mibps": float("inf"),
                        "seq_samples": [{"mibps": float("nan")}], "notes": ["buffered"]})
    (row,) = ceiling_rows(store)
    assert (row.knee_lanes, row.knee_read_kib, row.best_mibps) == (None, WIDE, None)
    assert row.seq_samples == [{"mibps": None}]
    assert row.notes[0] == "buffered" and [n.split(": ", 1)[1] for n in row.notes[1:]] == [
        f"ceiling.knee_lanes={WIDE} (beyond what a 32-bit integer holds)",
        "ceiling.best_mibps=inf (not a finite number)",
        "ceiling.seq_samples: [0].mibps=nan (not a finite number)"]


def test_a_resumed_run_replays_an_unstorable_sample_and_names_it_again(tmp_path):
    """`--resume` replays the spool's stored lines through the recorder (storing nothing
    again): a value that cannot be held is checked there too, and named, never raised."""
    from orchestrator.engines.bmoe import BmoeRunParser
    from orchestrator.run.recorder import RunRecorder

    store = Store.open(str(tmp_path / "orch.db"))
    run_id = store.create_run(uid="r1", session_id=store.create_session(kind="run"),
                              device_id=store.upsert_device("d", "local"), cell_key="k",
                              status="running")
    lines = [f"S\t100\tcpu_temp_mC={HUGE}\tmem_avail_kb=1000", f"S\t{HUGE}\tmem_avail_kb=900",
             "S\t300\tcpu_temp_mC=41000\tmem_avail_kb=800"]
    recorder = RunRecorder(store, run_id, BmoeRunParser(), stored_lines=2)
    for line in lines:
        recorder.handle(line)
    recorder.flush()
    assert recorder.first_sample == {"mem_avail_kb": 1000}    # the start reading, held
    assert [w.split(": ", 1)[1] for w in recorder.warnings] == [
        f"sample.cpu_temp_mC={HUGE} (beyond what a 64-bit integer holds)",
        f"sample.t_ms={HUGE} (beyond what a 64-bit integer holds)"]
    s = schema.sample
    rows = store.fetch(select(s.c.seq, s.c.t_ms, s.c.cpu_temp_mC).where(s.c.run_id == run_id))
    assert [tuple(r) for r in rows] == [(1, 300, 41000)]     # only the line not stored before


def test_calibrate_names_a_reading_the_store_cannot_hold_instead_of_printing_it(tmp_path):
    """`orch calibrate` on a zone reading 2^70 m°C: the baseline the store keeps is what the
    user is shown; the reading it dropped is named as not stored, never printed as °C, and
    the device's stored baseline holds no such number."""
    zone = fake_thermal_zone(tmp_path)
    (zone / "temp").write_text(f"{HUGE}\n")
    (tmp_path / "devices.yaml").write_text(textwrap.dedent(f"""\
        devices:
          d: {{kind: local, workdir: {tmp_path}/wd, env: {{ORCH_THERMAL_DIR: {zone.parent}}}}}
        """))
    db = str(tmp_path / "orch.db")
    code, out = orch("calibrate", "-d", "d", "-i", str(tmp_path / "devices.yaml"),
                     "--seconds", "1", "--interval", "0.5", "--db", db)
    assert code == 0, out
    assert "cpu: not stored (the reading is beyond what the store holds)" in out, out
    assert "°C" not in out.replace("m°C", ""), out
    device = Store.open(db, create=False).device_by_name("d")
    assert not (device.idle_baseline or {}).get("cpu")
    assert not tagged_pids(str(tmp_path / "wd"))
