"""The engine's processes never outlive their cell or orch, a device
runs one orch job at a time, signals end a run cleanly, and the agent notices an engine's end
at once (not at its next sample). Every way a process could stray, the garbled X
line, and the idle second have a test here. Agent-level tests run under mksh with a
toybox-only PATH, dash and bash; the CLI-level ones run `orch` as a real process (signals).

Over 400 lines on purpose: every way a process could outlive its run, sharing the
process-watching helpers.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from agent_helpers import (
    alive,
    cleanup_job,
    run_job,
    start_job,
    wait_for,
    write_job,
)
from sqlalchemy import select

from orchestrator.db import schema
from orchestrator.db.runs import Sessions
from orchestrator.db.session_lock import SessionBusy, session_lock
from orchestrator.db.store import Store
from orchestrator.run.recorder import RunRecorder
from orchestrator.run.runner import classify
from orchestrator.run.stream import GarbledExit, ProtocolError, parse_line

pytestmark = pytest.mark.timeout(180)
ORCH = Path(sys.executable).parent / "orch"


@pytest.fixture
def jobs(tmp_path):
    made: list[Path] = []

    def new(name: str = "job", parent: Path | None = None) -> Path:
        path = (parent or tmp_path) / f"{name}{len(made)}"
        path.mkdir(parents=True)
        made.append(path)
        return path

    yield new
    for path in made:
        cleanup_job(path)


def _pid_alive(pid: int) -> bool:
    return alive(pid)


# -- the agent: strays, the idle second, live jobs --------------------------------------------

def test_engine_child_is_killed_with_its_cell(shell, jobs, tmp_path):
    """A `sleep 300` the engine forked and left behind dies with the cell, and the run says so
    (before: it outlived the cell and wrote a file 5 minutes later)."""
    job = jobs()
    child = tmp_path / "child.pid"
    res = run_job(shell, job, ["sh", "-c", f'sleep 300 & echo $! > "{child}"; echo forked'])
    assert res.attach_rc == 0 and res.x[0] == "0"
    pid = int(child.read_text())
    assert not _pid_alive(pid)
    warnings = res.payloads("W")
    # named by its pid; its name is `sleep`, or `sh` when the agent looked between the
    # shell's fork and its exec of sleep (a busy machine): either is the stray
    assert any("stray processes" in w and f"{pid}(" in w for w in warnings), warnings
    # the W line comes before the X line
    tags = [line[0] for line in res.lines]
    assert tags.index("W") < tags.index("X")


@pytest.mark.slow
def test_stray_that_ignores_term_is_killed(shell, jobs, tmp_path):
    job = jobs()
    child = tmp_path / "child.pid"
    res = run_job(shell, job, ["sh", "-c",
                               f'(trap "" TERM; exec sleep 300) & echo $! > "{child}"'])
    pid = int(child.read_text())
    assert not _pid_alive(pid)
    assert any("KILL after 3 s" in w for w in res.payloads("W")), res.payloads("W")


def test_clean_engine_gets_no_stray_warning(shell, jobs):
    res = run_job(shell, jobs(), ["sh", "-c", "sleep 0.1 & wait; echo done"])
    assert res.x[0] == "0" and not res.payloads("W")


def test_supervisor_notices_the_end_at_once(shell, jobs):
    """Sampling every 60 s, an engine of 0.3 s: the supervisor takes its first sample, the
    engine ends, and the next thing in the spool is the end sample and the X line, not a
    minute of waiting (before: the end was seen at the next sample)."""
    job = jobs()
    res = run_job(shell, job, ["sh", "-c", "echo one; sleep 0.3; echo two"],
                  meta={"interval_ms": 60000}, timeout=50)
    tags = [line[0] for line in res.lines]
    assert tags[0] == "H" and tags[-1] == "X"
    # the end sample right before X, and at most the first sample before it: no minute of
    # samples. (On a loaded machine the 0.3 s engine may end before the first sample is
    # taken; then the end sample is the only one.)
    assert tags[-2] == "S" and 1 <= tags.count("S") <= 2, tags
    assert res.payloads("O") == ["one", "two"]
    two = next(i for i, line in enumerate(res.lines) if line[:2] == ["O", "two"])
    assert two < len(tags) - 2                        # "two" came before the end sample
    assert res.x[0] == "0" and (job / "done").exists()


def test_engine_status_survives_the_wakeup(shell, jobs):
    """The watcher hands the engine's exit status over: rc and signal stay right."""
    res = run_job(shell, jobs(), ["sh", "-c", "sleep 0.2; exit 5"], meta={"interval_ms": 5000})
    assert res.x[:2] == ["5", "0"]
    res = run_job(shell, jobs(), ["sh", "-c", "sleep 0.2; kill -KILL $$"],
                  meta={"interval_ms": 5000})
    assert res.x[:2] == ["137", "9"]


def test_start_refuses_beside_a_live_job(shell, jobs, tmp_path):
    runs = tmp_path / "runs"
    first = jobs("a", runs)
    write_job(first, ["sleep", "30"], {"interval_ms": 100, "run": "a"})
    spid = start_job(shell, first)
    listed = shell.run("jobs", runs).stdout.decode().splitlines()
    assert listed == [f"running\t{first}\t{spid}", "end"]
    second = jobs("b", runs)
    write_job(second, ["true"], {"interval_ms": 100, "run": "b"})
    res = shell.run("start", second)
    assert res.returncode == 4
    assert res.stdout.decode().splitlines()[0] == "busy" and str(first).encode() in res.stdout
    assert not (second / "pid").exists()
    res = shell.run("start", second, "force")
    assert res.returncode == 0 and res.stdout.startswith(b"started")
    shell.run("kill", first, timeout=20)


def test_orphan_engine_is_listed_and_not_dead(shell, jobs, tmp_path):
    """Supervisor killed, engine still running: `status` says orphan (not dead: re-running
    beside it would run two engines) and `jobs` lists it."""
    runs = tmp_path / "runs"
    job = jobs("o", runs)
    write_job(job, ["sleep", "30"], {"interval_ms": 100, "run": "o"})
    spid = start_job(shell, job)
    # engine.pid is complete once its line ends (the watcher may be writing it right now)
    wait_for(lambda: (job / "engine.pid").exists() and (job / "spool").stat().st_size > 0
             and (job / "engine.pid").read_text().endswith("\n"))
    epid = int((job / "engine.pid").read_text())
    os.kill(spid, signal.SIGKILL)
    wait_for(lambda: not _pid_alive(spid))
    assert shell.run("status", job).stdout.decode().split() == ["orphan", str(epid)]
    assert shell.run("jobs", runs).stdout.decode().splitlines() == [
        f"orphan\t{job}\t{epid}", "end"]
    shell.run("kill", job, timeout=20)
    wait_for(lambda: not _pid_alive(epid))
    assert shell.run("status", job).stdout.decode().strip() == "dead"
    assert shell.run("jobs", runs).stdout.decode().splitlines() == ["end"]


def test_reused_pid_is_not_a_live_job(shell, jobs, tmp_path):
    """A pid file naming a process that is not the job's (a reboot, a reused pid) is no live
    job: the start time recorded next to it does not match."""
    runs = tmp_path / "runs"
    job = jobs("r", runs)
    res = run_job(shell, job, ["true"])
    assert res.x[0] == "0"
    # (`done`, which holds the X line, stays: without it the end is not proven, see
    # test_forged_end.py)
    (job / "pid").write_text(f"{os.getpid()}\n")      # a live process that is not ours
    (job / "engine.pid").write_text(f"{os.getpid()}\n")
    assert shell.run("jobs", runs).stdout.decode().splitlines() == ["end"]
    assert shell.run("status", job).stdout.decode().strip() == "done"   # its X line is there


# -- the stream: a garbled X line --------------------------------------------------------------

@pytest.mark.parametrize("line", ["X\tgarbage\t0\t12", "X\t0\tnine\t12", "X\t0\t0\t",
                                  "X\t\t\t", "X\t0"])
def test_garbled_x_line_is_never_ok(line, tmp_path):
    with pytest.raises(GarbledExit):
        parse_line(line)
    assert issubclass(GarbledExit, ProtocolError)
    store = Store.open(str(tmp_path / "orch.db"))

    class Parser:
        def feed(self, tag, payload):
            return []

    recorder = RunRecorder(store, 1, Parser())
    recorder.handle("H\tproto=1\tagent=x\trun=r\tt0=0")
    recorder.handle(line)
    assert recorder.ended and recorder.exit is None
    status, cause = classify(recorder)
    assert status == "failed" and "X line" in cause


def test_good_x_line_still_parses():
    event = parse_line("X\t143\t15\t1020\tcause=timeout")
    assert (event.exit.rc, event.exit.signal, event.exit.t_ms, event.exit.cause) == \
        (143, 15, 1020, "timeout")


# -- the session lock --------------------------------------------------------------------------

@pytest.mark.slow
def test_session_lock_refuses_a_second_holder(tmp_path):
    store = Store.open(str(tmp_path / "orch.db"))
    with session_lock(store, 7):
        with pytest.raises(SessionBusy, match="session 7 is being run"), \
                session_lock(store, 7):
            pass
        with session_lock(store, 8):   # another session is free
            pass
        # another process is refused as well (an fcntl lock on a file next to the database)
        code = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(f"""\
                import sys
                from orchestrator.db.store import Store
                from orchestrator.db.session_lock import SessionBusy, session_lock
                store = Store.open({str(tmp_path / "orch.db")!r})
                try:
                    with session_lock(store, 7):
                        sys.exit(0)
                except SessionBusy:
                    sys.exit(3)
                """)], check=False, timeout=60).returncode
        assert code == 3
    with session_lock(store, 7):   # released
        pass


# -- orch run end to end: refusals, --resume, signals ------------------------------------------

SLOW = """\
    name: slow
    engine: bmoe
    binary: {local: fake_bmoe.sh}
    models: {m: /m.gguf}
    prompt: p
    tokens: 100
    sample_interval: 0.2s
    configs:
      first: --delay 0.15
      second: --delay 0
    """


def _default_signals() -> None:
    # orch as a terminal starts it: a suite started in the background (`cmd &` in a script)
    # hands its children an ignored SIGINT, and `nohup` an ignored SIGHUP, which orch keeps
    for signum in (signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)


def _orch(workspace: Path, *args: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "ORCH_DB"}
    return subprocess.Popen([str(ORCH), *args], cwd=workspace, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, start_new_session=True,
                            preexec_fn=_default_signals)


def _finish(proc: subprocess.Popen, timeout: float = 120) -> tuple[int, str]:
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, out + err


def _running_engine(workspace: Path, deadline_s: float = 60) -> tuple[Path, int]:
    """The job dir and engine pid of the first cell, once it has written some tokens."""
    def found():
        for pid_file in (workspace / "dev-local").glob("runs/*/engine.pid"):
            text_ = pid_file.read_text()
            csv = pid_file.parent / "tokens.csv"
            if text_.endswith("\n") and csv.exists() and csv.read_text().count("\n") >= 3:
                return pid_file.parent, int(text_)
        return None
    return wait_for(found, timeout=deadline_s)


@pytest.fixture
def slow_matrix(workspace):
    path = workspace / "slow.yaml"
    path.write_text(textwrap.dedent(SLOW))
    yield path
    for job in (workspace / "dev-local").glob("runs/*"):
        cleanup_job(job)


def _runs(workspace: Path) -> list:
    store = Store.open(str(workspace / "orch.db"))
    return store.fetch(select(schema.run).order_by(schema.run.c.id))


@pytest.mark.parametrize("signum,code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
@pytest.mark.slow
def test_signal_stops_cleanly_and_resume_reruns(workspace, slow_matrix, signum, code):
    """SIGTERM / SIGINT: one line, 143 / 130, the engine stopped, the run `interrupted`, the
    session ended; the next --resume re-runs that cell (before: rc 143 with no message, the run
    left `running`, the engine going on; after Ctrl-C --resume collected it as `killed`)."""
    proc = _orch(workspace, "run", str(slow_matrix))
    _, epid = _running_engine(workspace)
    proc.send_signal(signum)
    rc, out = _finish(proc)
    assert rc == code, out
    lines = [line for line in out.splitlines() if "stopped by" in line]
    assert len(lines) == 1 and signal.Signals(signum).name in lines[0] and "--resume" in lines[0]
    assert "Traceback" not in out
    wait_for(lambda: not _pid_alive(epid), timeout=10)
    runs = _runs(workspace)
    assert [(r.config, r.status) for r in runs] == [("first", "interrupted")]
    assert runs[0].cause.startswith("stopped by the user")
    store = Store.open(str(workspace / "orch.db"))
    assert Sessions(store).get(runs[0].session_id).ended_at is not None
    rc, out = _finish(_orch(workspace, "run", str(slow_matrix), "--resume"))
    assert rc == 0, out
    current = [r for r in _runs(workspace) if not r.superseded]
    assert sorted((r.config, r.status) for r in current) == [("first", "ok"), ("second", "ok")]
    assert all(r.id != runs[0].id for r in current)


@pytest.mark.slow
def test_killed_orch_plain_run_refuses_then_resume_collects(workspace, slow_matrix):
    """orch SIGKILLed mid-cell: the engine goes on. A plain `orch run` refuses (naming --resume
    and --force) and starts nothing; --resume re-attaches and collects it: every cell once."""
    proc = _orch(workspace, "run", str(slow_matrix))
    jobdir, epid = _running_engine(workspace)
    proc.kill()
    proc.wait()
    assert _pid_alive(epid)
    rc, out = _finish(_orch(workspace, "run", str(slow_matrix)))
    assert rc == 4, out   # Busy (orchestrator/errors.py)
    assert "busy" in out and "--resume" in out and "--force" in out and str(jobdir) in out
    assert "Traceback" not in out
    assert len(_runs(workspace)) == 1          # nothing was started beside it
    rc, out = _finish(_orch(workspace, "run", str(slow_matrix), "--resume"))
    assert rc == 0, out
    runs = _runs(workspace)
    assert sorted((r.config, r.status, r.superseded) for r in runs) == [
        ("first", "ok", False), ("second", "ok", False)]
    store = Store.open(str(workspace / "orch.db"))
    first = next(r for r in runs if r.config == "first")
    assert first.remote_dir == str(jobdir)
    assert len(store.frame("token", [first.id])) == 100   # collected, no row twice


@pytest.mark.slow
def test_status_error_is_not_evidence(workspace, slow_matrix, monkeypatch):
    """--resume whose status query fails must not re-run the cell (a second engine beside a
    live one): the device ends with an error, the old run is kept."""
    from orchestrator.config.inventory import load_inventory
    from orchestrator.config.matrix import load_matrix
    from orchestrator.run.progress import Progress
    from orchestrator.run.session import RunOptions, run_matrix
    from orchestrator.transports.base import CommandResult, TransportError
    from orchestrator.transports.local import LocalTransport

    proc = _orch(workspace, "run", str(slow_matrix))
    _running_engine(workspace)
    proc.kill()
    proc.wait()
    real_run = LocalTransport.run

    def flaky(self, argv, *args, **kwargs):
        if "status" in argv:
            return CommandResult(255, b"", b"connection reset")
        return real_run(self, argv, *args, **kwargs)

    monkeypatch.setattr(LocalTransport, "run", flaky)
    store = Store.open(str(workspace / "orch.db"))
    with pytest.raises(TransportError, match="status"):
        run_matrix(store, load_inventory(str(workspace / "devices.yaml")),
                   load_matrix(slow_matrix), "local", Progress(), RunOptions(resume=True))
    assert [(r.config, r.superseded) for r in _runs(workspace)] == [("first", False)]
    assert len(list((workspace / "dev-local").glob("runs/*"))) == 1


@pytest.mark.slow
def test_concurrent_resume_is_refused(workspace, slow_matrix):
    """Two --resume of one session: the second is refused with a message (before: one died
    with IntegrityError)."""
    rc, out = _finish(_orch(workspace, "run", str(slow_matrix)))
    assert rc == 0, out
    store = Store.open(str(workspace / "orch.db"))
    session_id = _runs(workspace)[0].session_id
    with session_lock(store, session_id):
        rc, out = _finish(_orch(workspace, "run", str(slow_matrix), "--resume"))
    assert rc == 4 and f"session {session_id} is being run by another orch" in out, out
    assert "IntegrityError" not in out and "Traceback" not in out


@pytest.mark.slow
def test_force_starts_beside_a_live_job(workspace, slow_matrix):
    proc = _orch(workspace, "run", str(slow_matrix))
    jobdir, _ = _running_engine(workspace)
    proc.kill()
    proc.wait()
    rc, out = _finish(_orch(workspace, "run", str(slow_matrix), "--force"))
    assert rc == 0, out
    assert "--force" in out
    cleanup_job(jobdir)


@pytest.mark.slow
def test_run_left_running_by_a_killed_orch_is_settled(workspace, slow_matrix):
    """orch SIGKILLed, its engine ends on its own, then a plain `orch run`: the old run does
    not stay `running` for ever; it is marked interrupted (its session's --resume collects)."""
    proc = _orch(workspace, "run", str(slow_matrix))
    jobdir, _ = _running_engine(workspace)
    proc.kill()
    proc.wait()
    wait_for(lambda: (jobdir / "done").exists(), timeout=90)
    rc, out = _finish(_orch(workspace, "run", str(slow_matrix)))
    assert rc == 0, out
    old = _runs(workspace)[0]
    assert old.remote_dir == str(jobdir)
    assert old.status == "interrupted" and "--resume" in old.cause
    assert [r.status for r in _runs(workspace)[1:]] == ["ok", "ok"]
