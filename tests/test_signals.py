"""Signals reach `orch` as one line and an exit code, at any moment.

Ctrl-C while Python still imports orch's modules (the first few tenths of a second) used to
print a full traceback: orchestrator/entry.py, the console script, installs its SIGINT handler
before it imports the commands. A hang-up (terminal or ssh session closed) used to kill
`orch run` at once with its run left `running`: SIGHUP now stops a run like SIGTERM (the engine
stopped, the run `interrupted`, the session ended), exit 129 (128 + SIGHUP).
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from agent_helpers import alive, cleanup_job
from sqlalchemy import select
from waiting import wait_for, wait_until

from orchestrator.db import schema
from orchestrator.db.runs import Sessions
from orchestrator.db.store import Store

pytestmark = pytest.mark.timeout(180)
ORCH = Path(sys.executable).parent / "orch"

# Extension modules that only orchestrator.cli's imports load (not Python's startup, not the
# console script, not orchestrator/entry.py): one of them mapped = orch is importing.
IMPORTING = ("_datetime", "_uuid", "_pickle", "_json", "_socket", "_random")


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "ORCH_DB"}


def _default_hangup() -> None:
    # orch as a terminal starts it: SIGHUP at its default, even when the test suite itself
    # runs under `nohup` (which would hand the ignored SIGHUP down to orch, and orch keeps
    # an ignored SIGHUP ignored on purpose: test_an_ignored_sighup_stays_ignored)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    # and SIGINT too: a suite started in the background (`cmd &` in a script) hands its
    # children an ignored SIGINT, which orch would keep ignored as any program does
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start(cwd: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen([str(ORCH), *args], cwd=cwd, env=_env(), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, start_new_session=True,
                            preexec_fn=_default_hangup)


def _finish(proc: subprocess.Popen, timeout: float = 120) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, out, err


def _importing(pid: int) -> bool:
    try:
        maps = Path(f"/proc/{pid}/maps").read_text()
    except OSError:   # it has ended already
        return True
    return any(name in maps for name in IMPORTING)


def test_the_console_script_is_the_entry_module() -> None:
    """The script imports orchestrator.entry (standard library only), not orchestrator.cli:
    after a change to [project.scripts], `pip install -e .` re-writes it."""
    assert "orchestrator.entry" in ORCH.read_text()
    code = ("import sys, orchestrator.entry; "
            "print(sorted(m for m in sys.modules if m.startswith(('orchestrator.', 'click', "
            "'rich'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "['orchestrator.entry']"


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="needs /proc")
@pytest.mark.parametrize("args", [("--help",), ("runs",)])
def test_sigint_while_importing_is_one_line_and_130(tmp_path: Path, args: tuple[str, ...]) -> None:
    """SIGINT while orch imports its modules: `interrupted`, 130, no traceback. The signal is
    sent once the process is mid-import; a run that finished before it arrived is retried.
    `orch runs` has a store to list (without one it ends at once with exit 2, which would be
    no finish to retry)."""
    Store.open(str(tmp_path / "orch.db")).engine.dispose()
    for _attempt in range(20):
        proc = _start(tmp_path, *args)
        pid = proc.pid
        # (an orch that already ended is a zombie with empty maps until reaped: no wait then)
        wait_for(lambda pid=pid, proc=proc: proc.poll() is not None or _importing(pid),
                 timeout=30, what="orch importing its modules")
        proc.send_signal(signal.SIGINT)
        rc, out, err = _finish(proc)
        # Done before the signal came (exit 0), or the signal landed while Python was
        # finalising after the command had printed everything (killed by SIGINT, as any
        # process is): try again. Never a traceback.
        assert "Traceback" not in err, err
        if rc == 0 or (rc == -signal.SIGINT and not err):
            continue
        assert (rc, err.strip()) == (130, "interrupted"), (rc, out, err)
        return
    pytest.skip("orch always finished before the signal arrived")


def test_sigint_before_a_command_and_after_python_handles_it(tmp_path: Path) -> None:
    """The same with the signal sent as soon as the process exists: either Python had not
    started handling signals yet (killed by SIGINT, nothing printed) or orch prints its line;
    never a traceback."""
    for _attempt in range(5):
        proc = _start(tmp_path, "--help")
        proc.send_signal(signal.SIGINT)
        rc, _out, err = _finish(proc)
        assert "Traceback" not in err, err
        assert rc in (0, 130, -signal.SIGINT), (rc, err)
        if rc == 130:
            assert err.strip() == "interrupted"


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


@pytest.fixture
def slow_matrix(workspace: Path):
    path = workspace / "slow.yaml"
    path.write_text(textwrap.dedent(SLOW))
    yield path
    for job in (workspace / "dev-local").glob("runs/*"):
        cleanup_job(job)


def _running_engine(workspace: Path) -> int:
    def found() -> int | None:
        for pid_file in (workspace / "dev-local").glob("runs/*/engine.pid"):
            text = pid_file.read_text()
            csv = pid_file.parent / "tokens.csv"
            if text.endswith("\n") and csv.exists() and csv.read_text().count("\n") >= 3:
                return int(text)
        return None
    return wait_for(found, timeout=60, what="the first cell's engine writing tokens")


def test_sighup_stops_a_run_like_sigterm(workspace: Path, slow_matrix: Path) -> None:
    """SIGHUP mid-cell: one `stopped by SIGHUP` line, exit 129, the engine gone, the run
    `interrupted` (not `running`), the session ended."""
    proc = _start(workspace, "run", str(slow_matrix))
    epid = _running_engine(workspace)
    proc.send_signal(signal.SIGHUP)
    rc, out, err = _finish(proc)
    assert rc == 128 + signal.SIGHUP, out + err
    lines = [line for line in err.splitlines() if "stopped by" in line]
    assert len(lines) == 1 and "SIGHUP" in lines[0] and "--resume" in lines[0], err
    assert "Traceback" not in err
    assert wait_until(lambda: not alive(epid), 10), "the engine outlived orch"
    store = Store.open(str(workspace / "orch.db"))
    runs = store.fetch(select(schema.run).order_by(schema.run.c.id))
    assert [(r.config, r.status) for r in runs] == [("first", "interrupted")]
    assert runs[0].cause.startswith("stopped by the user")
    assert Sessions(store).get(runs[0].session_id).ended_at is not None


def test_an_ignored_sighup_stays_ignored(workspace: Path, slow_matrix: Path) -> None:
    """`nohup orch run ...`: the hang-up is ignored and the run goes on (here: stopped after
    the SIGHUP by a SIGTERM, 143, to show it was still running)."""
    ignore_hup = ("import os, signal, sys; signal.signal(signal.SIGHUP, signal.SIG_IGN);"
                  f" os.execv({str(ORCH)!r}, sys.argv[1:])")
    proc = subprocess.Popen([sys.executable, "-c", ignore_hup, str(ORCH), "run",
                             str(slow_matrix)],
                            cwd=workspace, env=_env(), text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            start_new_session=True)
    epid = _running_engine(workspace)
    proc.send_signal(signal.SIGHUP)
    assert alive(epid) and proc.poll() is None
    proc.send_signal(signal.SIGTERM)
    rc, out, err = _finish(proc)
    assert rc == 143, out + err
    assert "stopped by SIGTERM" in err
