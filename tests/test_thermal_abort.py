"""A thermal ceiling in flight (`abort: {above: 85C, sensor: cpu}`): the agent stops an engine
that heats its sensor past the ceiling at the first sample that reads it, the run is `aborted`
with the reading as its cause (†, out of every aggregate), nothing of the engine survives, the
next cell waits for the cooldown and runs; a lab device that aborts three times in a row is
quarantined; the matrix key is validated like the others."""
from __future__ import annotations

import os
import textwrap
import threading
from pathlib import Path

import pytest
from agent_helpers import _pgrp_members, cleanup_job, run_job, tagged_pids
from cli_helpers import fake_thermal_zone, orch
from waiting import wait_until

from orchestrator.db.runs import Runs
from orchestrator.db.store import Store

ENGINES = Path(__file__).resolve().parent / "engines"
INTERVAL_MS = 300

# --heat FILE: one token at a normal temperature, a child in the engine's process group (its
# pid written first: the sample that reads 90 °C may stop the engine at once), then the sensor
# at 90 °C, and a hang; otherwise the fake bmoe engine as it is
HEATER = r"""heat=""; csv=/dev/null; prev=""
for a in "$@"; do
  [ "$prev" = --heat ] && heat=$a
  [ "$prev" = --csv ] && csv=$a
  prev=$a
done
if [ -n "$heat" ]; then
  echo "step,steps,wall_ms,io_ms,compute_ms,read_bytes,cache_hit_pct,stall_ms,mgmt_ms" > "$csv"
  echo "1,8,100.5,40.000,50.5,1048576,-1.00,40.000,0.000" >> "$csv"
  sleep 120 &
  echo $! > "$heat.child"
  echo 90000 > "$heat.new" && mv "$heat.new" "$heat"
  sleep 120
  exit 0
fi
"""


@pytest.fixture
def hot_ws(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ORCH_DB", raising=False)
    zone = fake_thermal_zone(tmp_path / "sys", 40.0)
    monkeypatch.setenv("ORCH_THERMAL_DIR", str(zone.parent))
    for key, sub in (("ORCH_POWERCAP_DIR", "powercap"), ("ORCH_HWMON_DIR", "hwmon"),
                     ("ORCH_POWER_SUPPLY_DIR", "ps"), ("ORCH_BATTERY_DIR", "ps/battery")):
        (tmp_path / "sys" / sub).mkdir(parents=True)
        monkeypatch.setenv(key, str(tmp_path / "sys" / sub))
    (tmp_path / "devices.yaml").write_text(f"devices:\n  local:\n    kind: local\n"
                                           f"    workdir: {tmp_path}/dev\n")
    body = (ENGINES / "fake_bmoe.sh").read_text().split("\n", 1)[1]
    (tmp_path / "heater.sh").write_text("#!/bin/sh\n" + HEATER + body)
    (tmp_path / "m.gguf").write_bytes(b"GGUF" + bytes(4092))
    return tmp_path, zone


def matrix(ws: Path, zone: Path, abort: str = "{above: 85C, sensor: cpu}") -> Path:
    path = ws / "hot.yaml"
    path.write_text(textwrap.dedent(f"""\
        name: hot
        engine: bmoe
        binary: {{local: heater.sh}}
        models: {{m: {ws}/m.gguf}}
        prompt: p
        tokens: 4
        sample_interval: {INTERVAL_MS}ms
        timeout: 60s
        abort: {abort}
        cooldown: {{until: 50C, sensor: cpu, min: 0s, max: 60s, interval: 0.1s}}
        configs:
          hot: --heat {zone}/temp
          cool: --delay 0.01
        """))
    return path


def spool_of(ws: Path, run_uid: str) -> list[list[str]]:
    return [line.split("\t") for line in
            (ws / "dev" / "runs" / run_uid / "spool").read_text().splitlines()]


def assert_stopped_by_the_first_hot_sample(lines: list[list[str]], key: str, scale: int,
                                           ceiling: int) -> None:
    """The first sample at or above the ceiling is the one that stopped the engine: the agent's
    `thermal ceiling` W line comes right after that S line and names its t_ms. Order and the
    agent's own t_ms, not a time bound: a loaded machine may stretch the intervals."""
    def reading(line: list[str]) -> int:
        return int(dict(f.split("=", 1) for f in line[2:]).get(key, 0)) * scale
    first = next(i for i, line in enumerate(lines) if line[0] == "S" and reading(line) >= ceiling)
    warning = lines[first + 1]
    assert warning[0] == "W" and warning[1].startswith("thermal ceiling: "), lines[first:first + 2]
    assert f" at t_ms={lines[first][1]};" in warning[1], lines[first:first + 2]


def test_an_engine_that_heats_past_the_ceiling_is_stopped(hot_ws):
    ws, zone = hot_ws
    # The test's cooling: once the agent has stopped the hot engine (its X line), the zone
    # cools, so that the next cell's cooldown can be met; a bounded wait, never a sleep.
    def cool() -> None:
        def aborted() -> bool:
            return any("cause=aborted" in p.read_text() for p in (ws / "dev" / "runs").glob("*/spool"))
        if wait_until(aborted, 60):
            # replaced in one step, as sysfs answers: never an empty file to a reader
            (zone / "temp.new").write_text("40000\n")
            (zone / "temp.new").replace(zone / "temp")
    cooler = threading.Thread(target=cool, daemon=True)
    cooler.start()
    code, out = orch("run", str(matrix(ws, zone)))
    cooler.join(60)
    assert code == 1, out            # a run that did not end ok: orch run exits 1
    hot, nxt = sorted(Runs(Store.open("orch.db")).current(), key=lambda r: r.id)
    assert (hot.config, hot.status) == ("hot", "aborted")
    assert hot.cause == "thermal ceiling: cpu read 90.0 °C >= 85.0 °C"
    # the matrix went on: the next cell waited for the cooldown (met), then ran
    assert (nxt.config, nxt.status) == ("cool", "ok") and nxt.cooldown_met is True
    lines = spool_of(ws, hot.uid)
    x = next(line for line in lines if line[0] == "X")
    assert "cause=aborted" in x and "value_mC=90000" in x and "above_mC=85000" in x
    assert any(line[0] == "W" and line[1].startswith("thermal ceiling: cpu read 90000 mC")
               for line in lines)
    assert_stopped_by_the_first_hot_sample(lines, "cpu_temp_mC", 1, 85000)
    # nothing of the engine survives: its group and its child
    jobdir = ws / "dev" / "runs" / hot.uid
    engine_pid = int((jobdir / "engine.pid").read_text())
    child = int((zone / "temp.child").read_text())
    assert wait_until(lambda: not _pgrp_members(engine_pid), 10), _pgrp_members(engine_pid)
    assert not Path(f"/proc/{child}/cmdline").exists() or not _alive(child)
    assert tagged_pids(f"{jobdir}/") == []
    # † with the reading, and out of the aggregates
    code, md = orch("table", "-t", "throughput")
    assert code == 0
    assert "† hot: aborted (thermal ceiling: cpu read 90.0 °C >= 85.0 °C)" in md, md


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


@pytest.mark.parametrize("abort,message", [
    ("{above: hot}", "abort.above: expected a temperature such as 85C, got 'hot'"),
    ("{above: 85C, sensor: 'a b'}", "abort.sensor: expected cpu, battery or a zone"),
    ("{above: 85C, when: now}", "abort.when: is not a known key"),
    ("{sensor: cpu}", "abort.above: is required"),
])
def test_the_abort_key_is_validated(hot_ws, abort, message):
    ws, zone = hot_ws
    path = matrix(ws, zone, abort)
    code, out = orch("run", str(path))
    assert code == 2, out
    line = next(i for i, text in enumerate(path.read_text().splitlines(), 1)
                if text.startswith("abort:"))
    assert f"{path}:{line}: {message}" in out, out


def test_three_aborts_in_a_row_quarantine_a_lab_device(tmp_path):
    from orchestrator.db import lab as lab_db
    from orchestrator.lab.health import HealthGate, HealthLimits

    store = Store.open(str(tmp_path / "orch.db"))
    lab_db.register_device(store, "phone", "adb", "w1", "host")
    gate = HealthGate(store, "phone", HealthLimits(), threading.Event())
    cause = "thermal ceiling: cpu read 90.0 °C >= 85.0 °C"
    for status in ("aborted", "aborted", "ok", "aborted", "aborted"):
        gate.ran(status, cause)
    assert lab_db.lab_device(store, "phone").state == lab_db.ACTIVE   # not three in a row
    gate.ran("aborted", cause)
    row = lab_db.lab_device(store, "phone")
    assert row.state == lab_db.QUARANTINED
    assert row.reason == f"aborted at the thermal ceiling 3 times in a row (last: {cause})"


def test_the_ceiling_in_the_agent_meta(tmp_path):
    """The controller passes the ceiling in the job's meta file."""
    from orchestrator.run.agent_client import AgentClient, Job
    from orchestrator.transports.local import LocalTransport

    transport = LocalTransport("local", str(tmp_path / "dev"))
    client = AgentClient(transport)
    jobdir = client.push_job(Job("r1", ["true"], {}, abort_above_mC=85000, abort_sensor="battery"))
    meta = Path(jobdir, "meta").read_text().splitlines()
    assert "abort_above_mC=85000" in meta and "abort_sensor=battery" in meta
    assert os.path.isdir(jobdir)


@pytest.mark.parametrize("sensor,write,value", [("cpu", "temp", "90000"),
                                                 ("battery", "battery/temp", "460")])
def test_the_agent_stops_the_group_at_the_ceiling(shell, tmp_path, sensor, write, value):
    """Under mksh + toybox, dash and bash: the first sample that reads the sensor at or above
    abort_above_mC stops the engine's group (a child too); X says cause=aborted with the
    reading, and nothing of the job is left."""
    zone = fake_thermal_zone(tmp_path / "sys", 40.0)
    battery = tmp_path / "sys" / "battery"
    battery.mkdir()
    (battery / "temp").write_text("300\n")
    target = zone / "temp" if write == "temp" else battery / "temp"
    jobdir = tmp_path / "job"
    jobdir.mkdir()
    script = (f"sleep 60 & echo $! > {tmp_path}/child; sleep 0.3; "
              f"echo {value} > {target}.new && mv {target}.new {target}; sleep 60")
    ceiling = {"cpu": 85000, "battery": 45000}[sensor]
    try:
        res = run_job(shell, jobdir, ["sh", "-c", script],
                      meta={"interval_ms": INTERVAL_MS, "abort_above_mC": ceiling,
                            "abort_sensor": sensor},
                      extra_env={"ORCH_THERMAL_DIR": str(zone.parent),
                                 "ORCH_BATTERY_DIR": str(battery)}, timeout=60)
        # nothing of the job outlives it: its group, the child in it, its tagged processes
        # (looked at before cleanup_job, which would kill them itself)
        engine = int((jobdir / "engine.pid").read_text())
        child = int((tmp_path / "child").read_text())

        def left() -> list[int]:
            return (_pgrp_members(engine) + ([child] if _alive(child) else [])
                    + tagged_pids(f"{jobdir}/"))
        assert wait_until(lambda: not left(), 10), left()
    finally:
        cleanup_job(jobdir)
    x = res.x
    reading = {"cpu": 90000, "battery": 46000}[sensor]
    assert "cause=aborted" in x, x
    # ended by a signal: TERM, or the KILL 3 s later when the group outlived the TERM on a
    # loaded machine; which of the two won is the machine's, not the agent's
    assert x[1] in ("15", "9"), x
    assert f"sensor={sensor}" in x and f"value_mC={reading}" in x and f"above_mC={ceiling}" in x
    key, scale = ("cpu_temp_mC", 1) if sensor == "cpu" else ("batt_temp_dC", 100)
    assert_stopped_by_the_first_hot_sample(res.lines, key, scale, ceiling)
