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
    if case == "huge":
        # dropped (NULL) in the column and in `extra`, named once for each
        assert any(r[0] == "odd" and r[2] is None and (r[3] or {}).get("tz0_mC") is None
                   for r in samples)
        assert all(r[2] is None or r[2] < 2 ** 31 for r in samples)
        assert len([w for w in warnings if f"sample.cpu_temp_mC={HUGE}" in w]) == 1, warnings
        assert len([w for w in warnings if f"tz0_mC={HUGE}" in w]) == 1, warnings
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
