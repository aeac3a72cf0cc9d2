"""Closed and broken standard streams (docs/reliability.md, "Closed and broken standard
streams"): for every command, a closed stdin, stdout or stderr and a stdout whose reader went
away give one line on what is left (or silence), the documented exit code (README, "Exit
codes": 141 for a broken pipe), no traceback, and nothing left running. A broken pipe during
`orch run` still stops the engine, marks the run interrupted and ends the session.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import click
import pytest
from agent_helpers import alive, cleanup_job
from cli_helpers import orch
from sqlalchemy import select
from waiting import wait_for, wait_until

from orchestrator.cli import main as group
from orchestrator.db import schema
from orchestrator.db.runs import Sessions
from orchestrator.db.store import Store

pytestmark = pytest.mark.timeout(300)
ORCH = Path(sys.executable).parent / "orch"
FOLDER = Path(__file__).resolve().parent / "fixtures" / "bigmoe" / "2026-07-21-pinned-dense-ab"
EXIT_PIPE = 141


def _env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORCH_")}
    env.update(HOME=str(tmp), COLUMNS="120")
    return env


def _commands() -> list[list[str]]:
    """Every command of the `orch` group, a group's own subcommands too."""
    ctx = click.Context(group)
    argvs = []
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        argvs.append([name])
        if isinstance(command, click.Group):
            argvs += [[name, sub] for sub in command.list_commands(ctx)]
    return argvs


def _gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


def _orch(mode: str, argv: list[str], cwd: Path) -> tuple[int, str, str]:
    """`orch ARGV` with one stream closed (`stdin`, `stdout`, `stderr`) or stdout a pipe
    whose reader has gone (`pipe`): (exit code, stdout, stderr) of what is left; the process
    group must be gone when it exits."""
    kwargs: dict = dict(cwd=cwd, env=_env(cwd), start_new_session=True)
    if mode == "pipe":
        read, write = os.pipe()
        os.close(read)
        proc = subprocess.Popen([str(ORCH), *argv], stdin=subprocess.DEVNULL, stdout=write,
                                stderr=subprocess.PIPE, **kwargs)
        os.close(write)
    else:
        fd = {"stdin": 0, "stdout": 1, "stderr": 2}[mode]
        # the shell closes the descriptor, then becomes orch: it starts without it
        proc = subprocess.Popen(["/bin/sh", "-c", f'exec "$0" "$@" {fd}>&-', str(ORCH), *argv],
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, **kwargs)
    try:
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert wait_until(lambda: _gone(proc.pid), 10), f"orch {argv} left a process running"
    return proc.returncode, (out or b"").decode(), (err or b"").decode()


MODES = ("stdin", "stdout", "stderr", "pipe")


@pytest.mark.slow
def test_every_command_with_a_closed_or_broken_stream(tmp_path: Path) -> None:
    """`orch CMD --help` for every command: exit 0 with a closed stream, 141 and silence when
    the reader of stdout went away; never a traceback, never more than the help."""
    cases = [(mode, [*argv, "--help"]) for argv in _commands() for mode in MODES]
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda case: _orch(*case, tmp_path), cases))
    bad = []
    for (mode, argv), (code, out, err) in zip(cases, results):
        want = EXIT_PIPE if mode == "pipe" else 0
        if code != want or "Traceback" in out + err or "Error" in err or \
                (mode == "pipe" and err) or (mode == "stdout" and err):
            bad.append(f"{mode} orch {' '.join(argv)}: exit {code}, stderr {err[-300:]!r}")
    assert not bad, "\n".join(bad)


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("streams") / "orch.db")
    code, out = orch("import", str(FOLDER), "--db", path)
    assert code == 0, out
    return path


@pytest.mark.parametrize("argv", [["runs"], ["show", "1"], ["table"], ["notes"],
                                  ["devices"], ["runs", "--format", "json"]])
def test_a_store_command_with_each_stream_closed_or_broken(db: str, tmp_path: Path,
                                                           argv: list[str]) -> None:
    """A command that opens the store: the closed stdout is not the store's descriptor (the
    store reads as before), exit 0 with a closed stream (its output discarded), 141 on a broken
    pipe, one line at most and no traceback."""
    code, before = orch("runs", "--format", "json", "--db", db)
    assert code == 0, before
    for mode in MODES:
        code, out, err = _orch(mode, [*argv, "--db", db], tmp_path)
        assert code == (EXIT_PIPE if mode == "pipe" else 0), (mode, code, err)
        assert "Traceback" not in out + err and len(err.splitlines()) <= 1, (mode, err)
        if mode == "pipe":
            assert err == ""
    assert orch("runs", "--format", "json", "--db", db) == (0, before)


def test_an_error_with_stdout_closed_is_its_one_line(tmp_path: Path) -> None:
    code, out, err = _orch("stdout", ["runs", "--db", str(tmp_path / "none.db")], tmp_path)
    assert code == 2 and err.startswith("error: no database") and len(err.splitlines()) == 1


SLOW = """\
    name: slow
    engine: bmoe
    binary: {local: fake_bmoe.sh}
    models: {m: /m.gguf}
    prompt: p
    tokens: 100
    sample_interval: 0.2s
    configs:
      first: --delay 0.05
      second: --delay 0
    """


@pytest.mark.slow
@pytest.mark.parametrize("stream", ["stderr", "stdout"])
def test_a_broken_pipe_during_a_run_stops_it_cleanly(workspace: Path, stream: str) -> None:
    """`orch run M 2>&1 | head -3` (progress lines are stderr's when not a terminal), and
    `orch run M | head -1` (the end-of-run tables are stdout's): the reader leaves while a cell
    runs; at orch's next write the engine is stopped, its run stored `interrupted` with its
    cause, the session
    ended, exit 141, and no process of orch's survives."""
    matrix = workspace / "slow.yaml"
    matrix.write_text(textwrap.dedent(SLOW))
    read, write = os.pipe()
    proc = subprocess.Popen([str(ORCH), "run", str(matrix)], cwd=workspace, env=_env(workspace),
                            stdin=subprocess.DEVNULL, stdout=write,
                            stderr=write if stream == "stderr" else subprocess.DEVNULL,
                            start_new_session=True)
    os.close(write)
    try:
        epid = wait_for(lambda: _engine(workspace), timeout=60, what="the first cell's engine")
        os.close(read)          # the reader goes away mid-cell
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        for job in (workspace / "dev-local").glob("runs/*"):
            cleanup_job(job)
    assert proc.returncode == EXIT_PIPE
    assert wait_until(lambda: not alive(epid), 10), "the engine outlived orch"
    assert wait_until(lambda: _gone(proc.pid), 10)
    store = Store.open(str(workspace / "orch.db"))
    runs = store.fetch(select(schema.run).order_by(schema.run.c.id))
    assert runs and all(r.status != "running" for r in runs), [(r.status, r.cause) for r in runs]
    if stream == "stderr":
        # stopped at orch's next write (the cell's end line): the next cell is interrupted
        assert runs[-1].status == "interrupted" and "SIGPIPE" in runs[-1].cause
    assert Sessions(store).get(runs[0].session_id).ended_at is not None


def _engine(workspace: Path) -> int | None:
    for pid_file in (workspace / "dev-local").glob("runs/*/engine.pid"):
        text = pid_file.read_text()
        csv = pid_file.parent / "tokens.csv"
        if text.endswith("\n") and csv.exists() and csv.read_text().count("\n") >= 3:
            return int(text)
    return None
