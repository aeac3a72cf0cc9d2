"""orch's own deadline for a job whose supervisor stopped (docs/reliability.md, "A stopped
supervisor"). The cell timeout is the agent's to enforce; a SIGSTOPped supervisor enforces
nothing and writes nothing, so orch gives up by itself: with a timeout once timeout + grace has
passed without the X line, without one once the spool has been silent for the stall period
while the supervisor is stopped. It kills the engine, stops the supervisor, says why on the
run, and goes on with the next cell. Real processes on the local device; the grace's link
slack and the stall period's floor are shortened (module constants) so a test takes seconds.
"""
from __future__ import annotations

import os
import signal
import textwrap
import threading
from pathlib import Path

import pytest
from agent_helpers import alive, stop_jobs_under, tagged_pids
from cli_helpers import orch
from sqlalchemy import select
from waiting import wait_for

from orchestrator.db import schema
from orchestrator.db.store import Store

pytestmark = pytest.mark.timeout(180)

MATRIX = """\
name: deadlines
engine: generic
binary: /bin/sh
engine_options:
  argv: ["{binary}", "-c", 'if [ "$1" = slow ]; then sleep 300; else echo quick; fi', "sh",
         "{flags}"]
prompt: p
cooldown: 0
sample_interval: 0.1s
timeout: TIMEOUT
configs:
  a: slow
  b: quick
"""


def _runs_dir(workspace: Path) -> Path:
    return workspace / "dev-local" / "runs"


def _stop_all(runs: Path) -> None:
    """Every job under `runs` stopped; the test fails if a process of one of them survived."""
    left = stop_jobs_under(runs)
    assert not left, f"processes of the test's runs survived: {left}"


@pytest.fixture
def nothing_left(workspace):
    yield workspace
    _stop_all(_runs_dir(workspace))


@pytest.fixture(params=["local", "ssh", "adb"])
def device(request, workspace):
    """(device name, its runs directory) in the workspace's inventory: the local device, the
    test sshd, the emulated phone behind the real adb server. Each is this machine, so the
    test can SIGSTOP the supervisor by its pid file."""
    from cli_helpers import adb_device, ssh_device

    if request.param == "local":
        name, runs = "local", _runs_dir(workspace)
    elif request.param == "ssh":
        sshd = request.getfixturevalue("sshd")
        workdir = workspace / "ssh-wd"
        with (workspace / "devices.yaml").open("a") as inventory:
            inventory.write(ssh_device("box", sshd, workdir))
        name, runs = "box", workdir / "runs"
    else:
        phone = request.getfixturevalue("phone")
        with (workspace / "devices.yaml").open("a") as inventory:
            inventory.write(adb_device("phone", phone))
        name, runs = "phone", Path(phone.data_dir) / "orch" / "runs"
    yield name, runs
    _stop_all(runs)


class Stopper(threading.Thread):
    """SIGSTOPs the first job's supervisor once its engine runs (the in-process `orch run`
    holds the main thread); `supervisor` and `engine` are their pids."""

    def __init__(self, runs: Path, which=lambda job: True) -> None:
        super().__init__(daemon=True)
        self.runs, self.which = runs, which
        self.supervisor: int | None = None
        self.engine: int | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            job = wait_for(lambda: next((p.parent for p in self.runs.glob("*/engine.pid")
                                         if p.read_text().strip() and self.which(p.parent)),
                                        None),
                           timeout=60, what="the job's engine")
            self.engine = int((job / "engine.pid").read_text())
            self.supervisor = int((job / "pid").read_text())
            # stopped once it has sampled: the spool has its first lines
            wait_for(lambda: "\nS\t" in (job / "spool").read_text(), timeout=30,
                     what="the first sample")
            os.kill(self.supervisor, signal.SIGSTOP)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            self.error = exc


def _run_with_stopped_supervisor(workspace: Path, monkeypatch, timeout: str,
                                 stall_min_s: float | None = None,
                                 device: tuple[str, Path] | None = None):
    from orchestrator.run import deadline

    monkeypatch.setattr(deadline, "DEADLINE_SLACK_S", 1.0)   # 30 s in earnest
    if stall_min_s is not None:
        monkeypatch.setattr(deadline, "STALL_MIN_S", stall_min_s)   # 60 s in earnest
    (workspace / "m.yaml").write_text(textwrap.dedent(MATRIX).replace("TIMEOUT", timeout))
    name, runs_dir = device or ("local", _runs_dir(workspace))
    stopper = Stopper(runs_dir)
    stopper.start()
    code, output = orch("run", "m.yaml", "--device", name)
    stopper.join(timeout=10)
    assert stopper.error is None, stopper.error
    assert stopper.supervisor is not None, output
    store = Store.open(str(workspace / "orch.db"))
    runs = store.fetch(select(schema.run).order_by(schema.run.c.id))
    return code, output, runs, stopper


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


def test_a_stopped_supervisor_hits_orchs_own_deadline(workspace, device, monkeypatch):
    """timeout 3 s, the supervisor SIGSTOPped: orch ends the cell as `timeout` with the
    cause once 3 s + its grace have passed, has killed the engine and the supervisor, and
    runs the next cell (before: orch waited for ever). Over every transport: the follower's
    stream blocks, and ends once the supervisor is gone."""
    code, output, runs, stopper = _run_with_stopped_supervisor(workspace, monkeypatch, "3s",
                                                               device=device)
    assert code == 1, output
    assert [(r.config, r.status) for r in runs] == [("a", "timeout"), ("b", "ok")], \
        [(r.config, r.status, r.cause) for r in runs]
    first = runs[0]
    assert first.cause.startswith("the agent did not end the run within its timeout (3 s) + ")
    assert first.cause.endswith("(supervisor stopped?); killed by orch"), first.cause
    warnings = " ".join(first.warnings or [])
    assert f"{stopper.engine}(" in warnings and f"supervisor {stopper.supervisor}" in warnings, \
        warnings
    assert not alive(stopper.engine), _state(stopper.engine)
    assert not alive(stopper.supervisor), _state(stopper.supervisor)
    assert not tagged_pids(f"{device[1]}/", prefix=True)


def test_without_a_timeout_a_silent_stopped_supervisor_is_given_up(nothing_left, monkeypatch):
    """timeout 0 (none): the spool silent for the stall period while the supervisor is
    stopped (state T) ends the cell `failed` with that cause; the next cell runs."""
    code, output, runs, stopper = _run_with_stopped_supervisor(nothing_left, monkeypatch, "0",
                                                                stall_min_s=1.0)
    assert code == 1, output
    assert [(r.config, r.status) for r in runs] == [("a", "failed"), ("b", "ok")], \
        [(r.config, r.status, r.cause) for r in runs]
    cause = runs[0].cause
    assert cause == (f"the agent's supervisor (pid {stopper.supervisor}) is stopped (state T) "
                     f"and its spool sent nothing for 3 s; killed by orch"), cause
    assert not alive(stopper.engine) and not alive(stopper.supervisor)
    assert not tagged_pids(f"{_runs_dir(nothing_left)}/", prefix=True)


def test_a_slow_engine_with_a_live_supervisor_is_left_to_the_agent(nothing_left, monkeypatch):
    """No stop: the agent's own timeout ends the cell (`timeout`, its X line's cause), and
    orch's deadline never fires (its grace is past the agent's KILL)."""
    from orchestrator.run import deadline

    monkeypatch.setattr(deadline, "DEADLINE_SLACK_S", 1.0)
    monkeypatch.setattr(deadline, "STALL_MIN_S", 1.0)
    (nothing_left / "m.yaml").write_text(textwrap.dedent(MATRIX).replace("TIMEOUT", "1s"))
    code, output = orch("run", "m.yaml", "--device", "local")
    assert code == 1, output
    store = Store.open(str(nothing_left / "orch.db"))
    runs = store.fetch(select(schema.run).order_by(schema.run.c.id))
    assert [(r.config, r.status, r.cause) for r in runs] == [
        ("a", "timeout", "exceeded the cell timeout"), ("b", "ok", None)]


QUALITY_MATRIX = """\
name: deadlines-quality
engine: generic
binary: /bin/sh
engine_options:
  argv: ["{binary}", "-c", 'case "$1" in Q1*) sleep 300 ;; *) echo quick ;; esac', "sh",
         "{prompt}"]
prompt: speed
cooldown: 0
sample_interval: 0.1s
timeout: 3s
configs:
  a: ""
quality:
  prompts: probes.jsonl
  grader: gsm8k
  tokens: 4
"""


def test_a_quality_probe_with_a_stopped_supervisor_hits_the_deadline(nothing_left, monkeypatch):
    """The quality probes are followed apart from the speed cells: the same deadline holds
    there (the probe is `timeout` with the cause, its engine and supervisor are gone)."""
    from orchestrator.run import deadline

    monkeypatch.setattr(deadline, "DEADLINE_SLACK_S", 1.0)
    workspace = nothing_left
    (workspace / "m.yaml").write_text(QUALITY_MATRIX)
    (workspace / "probes.jsonl").write_text('{"id": "q1", "prompt": "Q1: x", "expected": "1"}\n')
    stopper = Stopper(_runs_dir(workspace),
                      lambda job: (job / "args" / "004").read_bytes() == b"Q1: x")  # the prompt
    stopper.start()
    code, output = orch("run", "m.yaml", "--device", "local")
    stopper.join(timeout=10)
    assert stopper.error is None, stopper.error
    assert stopper.supervisor is not None, output
    assert code == 0, output   # a probe failing does not fail the speed session
    store = Store.open(str(workspace / "orch.db"))
    (probe,) = store.fetch(select(schema.quality))
    assert probe.status == "timeout", (probe.status, probe.cause)
    assert probe.cause.endswith("(supervisor stopped?); killed by orch"), probe.cause
    assert not alive(stopper.engine) and not alive(stopper.supervisor)
    assert not tagged_pids(f"{_runs_dir(workspace)}/", prefix=True)
