"""Low memory (docs/reliability.md, "Low memory"): under an address-space limit (`ulimit -v`)
orch never hangs loading its numeric libraries (their thread pools bounded to one thread),
refuses with one line naming the limit what does not fit (exit 1, no traceback, no SIGSEGV),
and `orch run` either runs to its end with its rows stored or refuses before anything is
written. The limits are computed from what a bare python + orch import maps on this machine
and from orch's own floors (address_space.FLOORS), so the tests hold on another machine.
"""
from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from cli_helpers import SMALL_PROBE_MATRIX, orch
from sqlalchemy import select
from waiting import wait_until

from orchestrator import address_space
from orchestrator.db import schema
from orchestrator.db.store import Store
from orchestrator.address_space import FLOORS, WORK_KB, LowMemory
from orchestrator.cli.handler import handle_errors

ORCH = Path(sys.executable).parent / "orch"
FOLDER = Path(__file__).resolve().parent / "fixtures" / "bigmoe" / "2026-07-21-pinned-dense-ab"
MB = 1024   # kB


def _bare_kb() -> int:
    """What python + orch's command line maps before any numeric library (VmSize, kB)."""
    code = ("import orchestrator.entry, orchestrator.cli, orchestrator.address_space as a; "
            "print(a.mapped_kb())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60)
    return int(out.stdout.strip())


def _floors(*names: str) -> int:
    return sum(FLOORS[n] for n in names)


def _env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORCH_")
           and k not in address_space.BOUNDED}   # orch bounds the threads itself
    env.update(HOME=str(tmp), COLUMNS="120")
    return env


def _gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


def _orch_limited(limit_kb: int, argv: list[str], cwd: Path) -> tuple[int, str, str]:
    """`orch ARGV` under `ulimit -v limit_kb`: (exit code, stdout, stderr). A hang is ended by
    the bound of communicate (the test fails on the kill's exit code); nothing may survive."""
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit_kb * 1024, limit_kb * 1024))

    proc = subprocess.Popen([str(ORCH), *argv], cwd=cwd, env=_env(cwd), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True, preexec_fn=limit)
    try:
        out, err = proc.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
    assert wait_until(lambda: _gone(proc.pid), 30), f"orch {argv} left a process running"
    return proc.returncode, out.decode(), err.decode()


def _one_line_naming_the_limit(code: int, err: str, limit_kb: int) -> None:
    assert code == 1, (code, err)   # not a hang (-9), not a SIGSEGV (-11)
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert f"ulimit -v {limit_kb} kB" in err, err


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("lowmem") / "orch.db")
    code, out = orch("import", str(FOLDER), "--db", path)
    assert code == 0, out
    return path


@pytest.mark.slow
def test_table_under_a_limit_between_pandas_and_scipy_is_one_line(db: str, tmp_path: Path) -> None:
    """Room for numpy and pandas, not for scipy: the limit where OpenBLAS's thread buffers
    used to retry for ever (the command never ended) is one line and exit 1."""
    limit = _bare_kb() + _floors("numpy", "pandas", "pyarrow") + 64 * MB
    code, _out, err = _orch_limited(limit, ["table", "--db", db], tmp_path)
    _one_line_naming_the_limit(code, err, limit)
    assert "scipy" in err or "pandas" in err


@pytest.mark.slow
@pytest.mark.parametrize("command", [["table"], ["report", "-o", "r.md"]])
def test_a_view_under_a_too_low_limit_is_one_line(db: str, tmp_path: Path,
                                                  command: list[str]) -> None:
    limit = _bare_kb() + 48 * MB
    code, _out, err = _orch_limited(limit, [*command, "--db", db], tmp_path)
    _one_line_naming_the_limit(code, err, limit)
    assert not (tmp_path / "r.md").exists()


@pytest.mark.slow
def test_run_under_a_limit_too_low_for_its_figures_starts_nothing(workspace: Path) -> None:
    """A run whose figures could not be computed is refused before a session starts (it
    used to stop after its first cell with the run left `running`)."""
    (workspace / "m.yaml").write_text(textwrap.dedent(SMALL_PROBE_MATRIX))
    limit = _bare_kb() + _floors("numpy", "pandas", "pyarrow") + 64 * MB
    code, _out, err = _orch_limited(limit, ["run", "m.yaml"], workspace)
    _one_line_naming_the_limit(code, err, limit)
    store = Store.open(str(workspace / "orch.db"))
    assert not store.fetch(select(schema.session.c.id)) and not store.fetch(select(schema.run.c.id))
    assert not (workspace / "dev-local").exists()   # no device was touched


@pytest.mark.slow
def test_run_under_a_limit_ends_with_its_rows_stored(workspace: Path) -> None:
    """Room for what a run loads and little more: it runs to its end (it used to die with a
    MemoryError, or hang in OpenBLAS on a machine of many cores), rows stored, exit 0."""
    (workspace / "m.yaml").write_text(textwrap.dedent(SMALL_PROBE_MATRIX))
    limit = _bare_kb() + sum(FLOORS.values()) + WORK_KB + 64 * MB
    code, out, err = _orch_limited(limit, ["run", "m.yaml"], workspace)
    assert code == 0, err[-2000:]
    assert "Traceback" not in err and "c0" in out and "c1" in out, out
    store = Store.open(str(workspace / "orch.db"))
    runs = store.fetch(select(schema.run.c.status))
    assert sorted(r.status for r in runs) == ["ok", "ok"]
    assert store.fetch(select(schema.token.c.run_id).limit(1))


# --- unit: the rules without a process ---

def test_room_is_checked_against_the_limit(monkeypatch) -> None:
    monkeypatch.setattr(address_space, "limit_kb", lambda: 100_000)
    monkeypatch.setattr(address_space, "mapped_kb", lambda: 60_000)
    monkeypatch.delitem(sys.modules, "numpy", raising=False)
    with pytest.raises(LowMemory, match=r"numpy: it needs about \d+ MB more, 39 MB are left "
                                        r"under the address-space limit \(ulimit -v 100000 kB\)"):
        address_space.check_room("numpy")
    monkeypatch.setattr(address_space, "limit_kb", lambda: None)
    address_space.check_room("numpy")   # no limit: no check


def test_a_dependency_loaded_already_is_not_counted(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "numpy", sys.modules.get("numpy") or object())
    monkeypatch.delitem(sys.modules, "scipy", raising=False)
    monkeypatch.delitem(sys.modules, "matplotlib", raising=False)
    assert address_space.needed_kb("scipy") == FLOORS["scipy"] + WORK_KB
    # several at once: a shared dependency counted once
    assert address_space.needed_kb("scipy", "matplotlib") == \
        FLOORS["scipy"] + FLOORS["matplotlib"] + WORK_KB


def test_the_bounds_are_orchs_alone(monkeypatch) -> None:
    """prepare sets what the user did not; the engines orch starts on the local device get
    the user's environment (a measurement is not changed by orch's own bounds)."""
    from orchestrator.transports.local import LocalTransport

    for name in [*address_space.BOUNDED, address_space.MARKER]:   # all restored after
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    monkeypatch.setenv("OMP_NUM_THREADS", "6")
    monkeypatch.setattr(address_space, "_set_by_orch", set())
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    address_space.prepare()
    assert os.environ["OPENBLAS_NUM_THREADS"] == "1" and os.environ["OMP_NUM_THREADS"] == "6"
    env = LocalTransport("local", "/nonexistent", env={"X": "y"})._env()
    assert "OPENBLAS_NUM_THREADS" not in env and env["OMP_NUM_THREADS"] == "6"
    assert env["X"] == "y"
    # an orch started by this one (a lab worker's consumer) knows what orch set, not the user
    inherited = os.environ[address_space.MARKER].split(",")
    assert sorted(inherited) == sorted(set(address_space.BOUNDED) - {"OMP_NUM_THREADS"})
    monkeypatch.setattr(address_space, "_set_by_orch", set())   # a consumer: no prepare
    env = LocalTransport("local", "/nonexistent")._env()
    assert "OPENBLAS_NUM_THREADS" not in env and address_space.MARKER not in env
    assert env["OMP_NUM_THREADS"] == "6"


def test_the_analysis_after_a_run_is_skipped_with_a_line_when_it_does_not_fit(
        monkeypatch, capsys) -> None:
    """The end-of-run tables out of room: one line saying the runs are stored and how to see
    them; nothing raised (the exit code stays the cells')."""
    from orchestrator.cli import run as run_cli

    def no_room(store, sessions):
        raise LowMemory("not enough memory to load scipy: ... (ulimit -v 500000 kB) ...")
    monkeypatch.setattr("orchestrator.results.run_end.run_end", no_room)
    run_cli._analysis(None, {"local": 3, "other": 4}, per_run=False)   # type: ignore[arg-type]
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the analysis was skipped (not enough memory" in err
    assert "`orch table 3`, `orch table 4`" in err


@pytest.mark.parametrize("error", [MemoryError(), ImportError(
    "/x/_special.so: failed to map segment from shared object")])
def test_out_of_memory_anywhere_is_one_line_naming_the_limit(monkeypatch, capsys, error) -> None:
    monkeypatch.setattr(address_space, "limit_kb", lambda: 400_000)

    def fail() -> None:
        raise error
    with pytest.raises(SystemExit) as exited:
        handle_errors(fail)
    assert exited.value.code == 1
    err = capsys.readouterr().err
    assert err == ("error: out of memory under the address-space limit (ulimit -v 400000 kB); "
                   "raise it (ulimit -v) or unset it\n")
