"""No process started for a run outlives it, whatever dies first (docs/reliability.md).

The agent gives the engine the environment tag ORCH_JOB=JOBDIR/, which every descendant
inherits and which /proc/PID/environ shows to the same uid: a daemon that left the engine's
process group (`setsid`), the engine of a supervisor killed with SIGKILL, and the processes of
a job whose directory was removed are all found by it, stopped, and named. The busy check sees
them too (`stray` lines of `jobs`), and `reap` stops them. Agent-level tests run under mksh with
a toybox-only PATH, dash and bash; the controller-level ones run `orch` (the local device).
A store that refuses writes mid-run stops the engine and leaves the cell to `--resume`.
"""
from __future__ import annotations

import os
import signal
import textwrap
from pathlib import Path

import pytest
from agent_helpers import (
    alive,
    cleanup_job,
    spool_lines,
    start_job,
    stop_jobs_under,
    tagged_pids,
    write_job,
)
from cli_helpers import orch
from sqlalchemy import event, select
from waiting import wait_for, wait_until

from orchestrator.db import schema
from orchestrator.db.store import Store

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def runs(tmp_path):
    """A runs directory; whatever a job under it started is SIGKILLed at teardown, and the
    test fails if anything tagged with one of its jobs outlived the test's own checks."""
    path = tmp_path / "runs"
    path.mkdir()
    yield path
    for job in path.iterdir():
        cleanup_job(job)
    for pid in tagged_pids(f"{path}/", prefix=True):
        os.kill(pid, signal.SIGKILL)


def _job(runs: Path, name: str, script: str, interval_ms: int = 100) -> Path:
    job = runs / name
    job.mkdir()
    write_job(job, ["sh", "-c", script], {"interval_ms": interval_ms, "run": name})
    return job


def _daemon_pid(path: Path) -> int:
    return int(wait_for(lambda: path.exists() and path.read_text().strip(), timeout=30,
                        what="the engine's daemon writing its pid"))


def test_a_setsid_daemon_is_stopped_and_named(shell, runs, tmp_path):
    """An engine that starts a `setsid` daemon and exits: the daemon left its process group,
    so the group cleanup missed it; the tag finds it, a W line names it. The engine exits
    only once the daemon has left (it writes its pid from its new session): exiting before,
    the daemon would die with the group and there would be nothing to name."""
    pid_file = tmp_path / "daemon.pid"
    job = _job(runs, "a", f'setsid sh -c \'echo $$ > "{pid_file}"; exec sleep 302\' & '
                          f'i=0; while [ ! -s "{pid_file}" ] && [ $i -lt 3000 ]; do '
                          f'sleep 0.01; i=$((i + 1)); done; echo started')
    start_job(shell, job)
    assert shell.run("attach", job, "0", timeout=60).returncode == 0
    daemon = _daemon_pid(pid_file)
    warnings = [line[1] for line in spool_lines(job) if line[0] == "W"]
    # (named by its pid: it may be killed before it has become `sleep`, while still `sh`)
    assert any("outside its process group" in w and f" {daemon}(" in w
               for w in warnings), warnings
    assert not alive(daemon)
    assert tagged_pids(f"{job}/") == []


def test_a_killed_supervisor_leaves_nothing_once_killed(shell, runs, tmp_path):
    """kill -9 of the supervisor: `jobs` says orphan, `kill` stops the engine, its group and
    its setsid child, and names all of them."""
    pid_file = tmp_path / "daemon.pid"
    job = _job(runs, "a", f'setsid sleep 303 & echo $! > "{pid_file}"; sleep 300')
    spid = start_job(shell, job)
    daemon = _daemon_pid(pid_file)
    epid = int(wait_for(lambda: (job / "engine.pid").exists()
                        and (job / "engine.pid").read_text().strip(), timeout=30))
    os.kill(spid, signal.SIGKILL)
    wait_until(lambda: not alive(spid), 10)
    listed = shell.run("jobs", runs).stdout.decode().splitlines()
    assert listed == [f"orphan\t{job}\t{epid}", "end"]
    res = shell.run("kill", job, timeout=30)
    assert res.returncode == 0, res.stderr
    killed = res.stdout.decode().strip()
    # toybox's setsid stays a process of its own beside its child: named by pid
    assert killed.startswith("killed\t") and f"{epid}(sh)" in killed and \
        f" {daemon}(" in killed, killed
    assert wait_until(lambda: not tagged_pids(f"{job}/"), 10), tagged_pids(f"{job}/")
    assert not alive(daemon) and not alive(epid)


def test_a_removed_job_directory_stops_its_engine(shell, runs, tmp_path):
    """The job directory removed mid-run: the supervisor sees it at its next sample and
    stops the engine and its daemon (nobody could collect the run or find its processes
    by the directory)."""
    pid_file = tmp_path / "daemon.pid"
    job = _job(runs, "a", f'setsid sleep 304 & echo $! > "{pid_file}"; sleep 300')
    spid = start_job(shell, job)
    daemon = _daemon_pid(pid_file)
    wait_for(lambda: any(line[0] == "S" for line in spool_lines(job)), timeout=30)
    job.rename(tmp_path / "moved")     # gone from where the supervisor looks
    try:
        assert wait_until(lambda: not alive(spid), 30), "the supervisor went on"
        assert wait_until(lambda: not tagged_pids(f"{job}/"), 10), tagged_pids(f"{job}/")
        assert not alive(daemon)
    finally:
        cleanup_job(tmp_path / "moved")


def test_strays_of_a_lost_job_are_busy_until_reaped(shell, runs, tmp_path):
    """Supervisor killed and directory removed: only the tag is left. `jobs` lists the
    processes as strays, `start` of another job refuses (one engine per device), `reap`
    stops them and names them, and then the device is free."""
    pid_file = tmp_path / "daemon.pid"
    job = _job(runs, "a", f'setsid sleep 305 & echo $! > "{pid_file}"; sleep 300')
    spid = start_job(shell, job)
    daemon = _daemon_pid(pid_file)
    epid = int(wait_for(lambda: (job / "engine.pid").exists()
                        and (job / "engine.pid").read_text().strip(), timeout=30))
    os.kill(spid, signal.SIGKILL)
    wait_until(lambda: not alive(spid), 10)
    job.rename(tmp_path / "lost")
    listed = shell.run("jobs", runs).stdout.decode().splitlines()
    assert listed[-1] == "end"
    strays = {line.split("\t")[2]: line.split("\t")[1] for line in listed[:-1]}
    assert all(line.startswith("stray\t") for line in listed[:-1]), listed
    assert strays.get(str(epid)) == "sh" and str(daemon) in strays, listed
    other = _job(runs, "b", "true")
    refused = shell.run("start", other)
    assert refused.returncode == 4 and refused.stdout.startswith(b"busy"), refused
    res = shell.run("reap", runs, timeout=30)
    assert res.returncode == 0, res.stderr
    out = res.stdout.decode().splitlines()
    assert out[-1] == "end" and out[0].startswith("killed\t"), out
    assert f"{daemon}(" in out[0] and f"{epid}(sh)" in out[0], out
    assert wait_until(lambda: not tagged_pids(f"{runs}/", prefix=True), 10)
    assert shell.run("jobs", runs).stdout.decode().splitlines() == ["end"]
    start_job(shell, other)


def test_reap_leaves_live_jobs_alone(shell, runs):
    job = _job(runs, "a", "sleep 300")
    spid = start_job(shell, job)
    wait_for(lambda: tagged_pids(f"{job}/"), timeout=30, what="the engine")
    res = shell.run("reap", runs, timeout=30)
    assert res.stdout.decode().splitlines() == ["end"]
    assert alive(spid) and tagged_pids(f"{job}/")
    assert shell.run("kill", job, timeout=30).returncode == 0


# -- orch itself -------------------------------------------------------------------------------

ENGINE = """\
name: leftovers
engine: generic
binary: /bin/sh
engine_options:
  argv: ["{{binary}}", "-c", "{script}", "sh"]
prompt: p
cooldown: 0
sample_interval: 0.1s
configs:
  a: ""
"""


def _matrix(tmp_path: Path, script: str) -> Path:
    path = tmp_path / "m.yaml"
    path.write_text(textwrap.dedent(ENGINE.format(script=script)))
    return path


def _runs_dir(workspace: Path) -> Path:
    return workspace / "dev-local" / "runs"


@pytest.fixture
def nothing_left(workspace):
    yield workspace
    left = stop_jobs_under(_runs_dir(workspace))
    assert not left, f"processes of the test's runs survived: {left}"


def test_orch_run_names_the_daemon_it_stopped(nothing_left):
    workspace = nothing_left
    _matrix(workspace, "setsid sleep 306 & echo done")
    code, output = orch("run", "m.yaml", "--device", "local")
    assert code == 0, output
    store = Store.open(str(workspace / "orch.db"))
    (run,) = store.fetch(select(schema.run))
    assert run.status == "ok"
    assert any("outside its process group" in w and "(sleep)" in w for w in run.warnings or [])
    assert not tagged_pids(f"{_runs_dir(workspace)}/", prefix=True)


def test_orch_run_stops_strays_before_the_first_cell(nothing_left, tmp_path):
    """A lost job's processes (its supervisor and directory gone) on the device: `orch run`
    stops them before it starts, and says so."""
    workspace = nothing_left
    runs = _runs_dir(workspace)
    runs.mkdir(parents=True)
    lost = runs / "lost"
    lost.mkdir()
    write_job(lost, ["sleep", "307"], {"interval_ms": 100, "run": "lost"})
    from agent_helpers import make_shell
    shell = make_shell("dash", tmp_path)
    spid = start_job(shell, lost)
    epid = int(wait_for(lambda: (lost / "engine.pid").exists()
                        and (lost / "engine.pid").read_text().strip(), timeout=30))
    os.kill(spid, signal.SIGKILL)
    wait_until(lambda: not alive(spid), 10)
    lost.rename(tmp_path / "gone")
    _matrix(workspace, "echo done")
    code, output = orch("run", "m.yaml", "--device", "local")
    assert code == 0, output
    assert "stray processes" in output and f"{epid}(sleep)" in output, output
    assert not alive(epid)


def test_a_store_that_fills_stops_the_engine(nothing_left, monkeypatch):
    """The store refuses writes mid-run (SQLite's page limit stands in for a full disk): one
    line, exit 1, the engine stopped at once, nothing `running` left behind for good; after
    the store has room again, `--resume` runs the cell again."""
    from orchestrator.run import runner as runner_module

    workspace = nothing_left
    _matrix(workspace, "i=0; while [ $i -lt 3000 ]; do echo line $i; i=$((i+1)); "
                       "sleep 0.01; done")
    real_follow = runner_module.DeviceRunner.follow

    def follow_into_a_full_store(self, run_id, jobdir, stored_lines, cell):
        # from now on the store's connections may not grow the file: SQLITE_FULL
        def limit(dbapi_connection, _record):
            pages = dbapi_connection.execute("PRAGMA page_count").fetchone()[0]
            dbapi_connection.execute(f"PRAGMA max_page_count = {pages}")
        event.listen(self.store.engine, "connect", limit)
        self.store.engine.dispose()
        return real_follow(self, run_id, jobdir, stored_lines, cell)

    monkeypatch.setattr(runner_module.DeviceRunner, "follow", follow_into_a_full_store)
    code, output = orch("run", "m.yaml", "--device", "local")
    lines = [line for line in output.splitlines() if "could not be written" in line]
    assert code == 1, output
    # the hint is the command that works: every option given, --device included
    assert len(lines) == 1 and "`orch run m.yaml --resume --device local`" in lines[0], output
    assert "Traceback" not in output
    runs = _runs_dir(workspace)
    assert wait_until(lambda: not tagged_pids(f"{runs}/", prefix=True), 10), "the engine ran on"
    monkeypatch.setattr(runner_module.DeviceRunner, "follow", real_follow)
    code, output = orch("run", "m.yaml", "--device", "local", "--resume")
    assert code == 0, output
    store = Store.open(str(workspace / "orch.db"))
    statuses = [r.status for r in store.fetch(select(schema.run).order_by(schema.run.c.id))]
    assert statuses[-1] == "ok" and "running" not in statuses, statuses


def test_orch_stops_the_engine_of_a_killed_supervisor(nothing_left):
    """`kill -9` of the agent's supervisor mid-run: orch finds the job `orphan`, stops the
    engine and its daemon, names them in the run's warnings, and marks the run interrupted
    (before: the engine ran on until a later --resume)."""
    import subprocess
    import sys

    workspace = nothing_left
    _matrix(workspace, "setsid sleep 308 & sleep 300")
    env = {k: v for k, v in os.environ.items() if k != "ORCH_DB"}
    proc = subprocess.Popen([str(Path(sys.executable).parent / "orch"), "run", "m.yaml",
                             "--device", "local"], cwd=workspace, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        runs = _runs_dir(workspace)
        pid_file = wait_for(lambda: next((p for p in runs.glob("*/pid")
                                          if p.read_text().endswith("\n")), None),
                            timeout=60, what="the job's supervisor")
        wait_for(lambda: len(tagged_pids(f"{pid_file.parent}/")) >= 2, timeout=30,
                 what="the engine and its daemon")
        os.kill(int(pid_file.read_text()), signal.SIGKILL)
        output, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert not tagged_pids(f"{runs}/", prefix=True), output
    store = Store.open(str(workspace / "orch.db"))
    (run,) = store.fetch(select(schema.run))
    assert run.status == "interrupted", (run.status, run.cause, output)
    warnings = " ".join(run.warnings or [])
    assert "supervisor ended before the engine" in warnings and "(sleep)" in warnings, warnings
