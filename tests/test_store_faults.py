"""Store faults during `orch run` (docs/reliability.md, "Store faults during a run"), with real
parts: a real PostgreSQL server restarted or stopped mid-run, a real SQLite file deleted or
locked by another process, the local device running the fake bmoe engine. Each test checks the
stored runs, the one line orch printed and that nothing of the run is left running."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from agent_helpers import stop_jobs_under, tagged_pids
from conftest import TESTS
from sqlalchemy import text
from waiting import wait_for, wait_until

from orchestrator.db.store import Store

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
ORCH = Path(sys.executable).with_name("orch")


def _matrix(ws: Path, tokens: int = 60, delay: float = 0.1) -> Path:
    path = ws / "m.yaml"
    path.write_text(textwrap.dedent(f"""\
        name: storefault
        engine: bmoe
        binary: {{local: {TESTS / 'engines' / 'fake_bmoe.sh'}}}
        models: {{m: /m.gguf}}
        prompt: p
        tokens: {tokens}
        repeat: 1
        order: as-written
        sample_interval: 0.2s
        cooldown: 0
        configs:
          first: --delay {delay}
          second: --delay {delay}
        """))
    return path


def _runs(store: Store) -> list:
    return store.fetch(text("SELECT r.id, r.status, r.cause, r.superseded, "
                            "(SELECT count(*) FROM token t WHERE t.run_id = r.id) AS tokens "
                            "FROM run r ORDER BY r.id"))


def _streaming(store: Store, rows: int = 5):
    def check() -> bool:
        try:
            runs = _runs(store)
        except Exception:  # noqa: BLE001 - the store may not have its schema yet
            return False
        return bool(runs) and runs[-1].status == "running" and runs[-1].tokens >= rows
    return check


def _session_locked(store: Store) -> bool:
    """The session lock (db/session_lock.py: an advisory lock of class 0x6F72) is held in the
    store's database."""
    return bool(store.fetch(text(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = 28530 "
        "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"))[0][0])


class Orch:
    """`orch run` in its own process (the test restarts the store's server meanwhile)."""

    def __init__(self, ws: Path, *args: str) -> None:
        env = {k: v for k, v in os.environ.items() if k != "ORCH_DB"}
        self.proc = subprocess.Popen([str(ORCH), "run", "m.yaml", "-d", "local", *args],
                                     cwd=ws, env=env, text=True, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True)
        self.output = ""

    def wait(self) -> int:
        try:
            self.output, _ = self.proc.communicate(timeout=240)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


@pytest.fixture
def nothing_left(workspace):
    yield workspace
    left = stop_jobs_under(workspace / "dev-local" / "runs")
    assert not left, f"processes of the test's runs survived: {left}"


def _no_engine(ws: Path) -> bool:
    return wait_until(lambda: not tagged_pids(f"{ws / 'dev-local' / 'runs'}/", prefix=True), 10)


def _pg_store(pg_url: str, name: str) -> tuple[str, Store]:
    from pg_fixture import fresh_pg_database

    url = fresh_pg_database(pg_url, name)
    return url, Store.open(url)


def test_a_postgresql_restart_mid_run_loses_nothing(nothing_left, pg_url):
    """A real 3 s restart of the store's server while a cell streams: orch waits it out
    (within --link-grace), redoes the write that was cut, keeps its session lock, and the
    run ends `ok` with every row; exit 0, nothing left running."""
    from pg_fixture import restart_pg_server

    ws = nothing_left
    url, store = _pg_store(pg_url, "sf_restart")
    _matrix(ws, tokens=100)
    orch = Orch(ws, "--db", url, "--link-grace", "120")
    wait_for(_streaming(store), timeout=120, what="the first cell to stream")
    assert _session_locked(store)
    restart_pg_server(pg_url, down_s=3.0)    # every connection cut: the lock went with its own
    store.engine.dispose()                   # the test's own connections were cut too
    # the session lock is taken again (while the run goes on, or it has ended meanwhile)
    relocked = wait_for(lambda: "locked" if _session_locked(store) else
                        "ended" if orch.proc.poll() is not None else None,
                        timeout=120, what="the session lock taken again")
    assert orch.wait() == 0, orch.output
    assert relocked == "locked", f"the run ended without its session lock\n{orch.output}"
    runs = _runs(store)
    assert [(r.status, r.tokens, r.superseded) for r in runs] == [("ok", 100, False)] * 2, runs
    assert "is back" in orch.output, orch.output
    assert "Traceback" not in orch.output
    assert _no_engine(ws)


def test_a_store_down_past_the_grace_stops_with_its_cause_and_resume_reruns(nothing_left,
                                                                             pg_url):
    """The server stays down longer than a short --link-grace: one line naming the lost store,
    exit 1, the engine stopped. The run could not be marked (the store was away): once the
    server is back, `--resume` finds orch's stop marker in the job folder, stores the run
    `interrupted` with that cause (never `killed (signal 15)`) and runs the cell again."""
    from pg_fixture import pg_server_down

    ws = nothing_left
    url, store = _pg_store(pg_url, "sf_down")
    _matrix(ws)
    orch = Orch(ws, "--db", url, "--link-grace", "2")
    wait_for(_streaming(store), timeout=120, what="the first cell to stream")
    with pg_server_down(pg_url):
        code = orch.wait()
        assert _no_engine(ws), "the engine ran on"
    store.engine.dispose()
    assert code == 1, orch.output
    lines = [line for line in orch.output.splitlines() if "was lost" in line]
    assert len(lines) == 1 and "--resume" in lines[0], orch.output
    assert "Traceback" not in orch.output and "[SQL" not in orch.output
    resumed = Orch(ws, "--db", url, "--resume")
    assert resumed.wait() == 0, resumed.output
    runs = _runs(store)
    stopped = runs[0]
    assert stopped.status == "interrupted" and stopped.superseded, runs
    assert stopped.cause.startswith("stopped: the store could not be written") and \
        "lost" in stopped.cause, stopped.cause
    assert not [r for r in runs if r.status == "killed" or "signal" in (r.cause or "")], runs
    current = [(r.status, r.tokens) for r in runs if not r.superseded]
    assert current == [("ok", 60)] * 2, runs
    assert _no_engine(ws)


def test_a_postgresql_server_silent_mid_statement_is_one_line_and_exit_1(nothing_left, pg_url):
    """The whole server stopped (SIGSTOP) mid-run: its kernel still acknowledges, so no libpq
    timeout fires and the next write would wait for ever. The statement watch asks the server
    on a connection of its own, hears nothing, cuts the waiting connection: the store is lost,
    the grace runs out, one line, exit 1, the engine stopped."""
    from pg_fixture import pg_server_frozen

    ws = nothing_left
    url, store = _pg_store(pg_url, "sf_frozen")
    _matrix(ws, tokens=400)
    orch = Orch(ws, "--db", url, "--link-grace", "2")
    wait_for(_streaming(store), timeout=120, what="the first cell to stream")
    with pg_server_frozen(pg_url):
        code = orch.wait()
        assert _no_engine(ws), "the engine ran on"
    store.engine.dispose()
    assert code == 1, orch.output
    assert [line for line in orch.output.splitlines() if "was lost" in line], orch.output
    assert "Traceback" not in orch.output and "[SQL" not in orch.output


def test_a_sqlite_store_deleted_mid_run_stops_the_run(nothing_left):
    """The store's file deleted while a cell streams: orch does not write on into the unlinked
    file and exit 0; one line names the file, exit 1, the engine is stopped."""
    ws = nothing_left
    db = ws / "s.db"
    _matrix(ws)
    orch = Orch(ws, "--db", str(db))
    wait_for(lambda: db.exists(), timeout=60, what="the store")
    store = Store.open(str(db))
    wait_for(_streaming(store), timeout=120, what="the first cell to stream")
    store.engine.dispose()
    db.unlink()
    assert orch.wait() == 1, orch.output
    lines = [line for line in orch.output.splitlines() if "was deleted (or replaced)" in line]
    assert len(lines) == 1 and str(db) in lines[0] and "are lost" in lines[0], orch.output
    assert "Traceback" not in orch.output
    assert _no_engine(ws), "the engine ran on"
    assert not db.exists() or db.stat().st_size == 0 or "storefault" not in db.read_bytes().decode(
        errors="replace")


HOLD = textwrap.dedent("""\
    import sqlite3, sys
    conn = sqlite3.connect(sys.argv[1], isolation_level=None)
    conn.execute("BEGIN EXCLUSIVE")
    print("locked", flush=True)
    sys.stdin.readline()
    conn.execute("ROLLBACK")
    """)


class Holder:
    """Another process holding the SQLite store's write lock until released."""

    def __init__(self, db: Path) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", HOLD, str(db)], text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert self.proc.stdout is not None and self.proc.stdout.readline() == "locked\n"

    def release(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.write("\n")
            self.proc.stdin.flush()
            self.proc.wait(timeout=30)


@pytest.fixture
def short_busy_timeout(monkeypatch):
    """SQLite's busy timeout of 1 s instead of 30 (the in-process orch's), so a lock held
    past it shows in seconds."""
    from orchestrator.db import store as store_module

    real = store_module._sqlite_pragmas

    def pragmas(dbapi_conn, record):
        real(dbapi_conn, record)
        dbapi_conn.execute("PRAGMA busy_timeout=1000")
    monkeypatch.setattr(store_module, "_sqlite_pragmas", pragmas)


def test_a_locked_sqlite_store_is_one_line_naming_the_holder(nothing_left, short_busy_timeout):
    """Another process holds the store's write lock: at the start, one line naming it (its
    pid), exit 4, no traceback; mid-run, one line naming it, exit 1, the engine stopped, and
    never "Free the space". Once released, `--resume` runs the cell again."""
    from cli_helpers import orch

    ws = nothing_left
    db = ws / "s.db"
    _matrix(ws, tokens=40, delay=0.05)
    Store.open(str(db)).engine.dispose()
    holder = Holder(db)
    try:
        code, output = orch("run", "m.yaml", "-d", "local", "--db", str(db))
    finally:
        holder.release()
    assert code == 4, output
    lines = [line for line in output.splitlines() if "locked" in line]
    assert len(lines) == 1 and f"process {holder.proc.pid}" in lines[0], output
    assert "Traceback" not in output and "Free the space" not in output and "[SQL" not in output

    store = Store.open(str(db))
    holders: list[Holder] = []

    def lock_mid_run() -> None:
        wait_for(_streaming(store), timeout=120, what="the first cell to stream")
        holders.append(Holder(db))
    thread = threading.Thread(target=lock_mid_run, daemon=True)
    thread.start()
    try:
        code, output = orch("run", "m.yaml", "-d", "local", "--db", str(db))
        thread.join(timeout=60)
    finally:
        for held in holders:
            held.release()
    assert code == 1, output
    lines = [line for line in output.splitlines() if "locked" in line]
    assert len(lines) == 1 and f"process {holders[0].proc.pid}" in lines[0], output
    assert "Free the space" not in output and "Traceback" not in output
    assert _no_engine(ws), "the engine ran on"
    code, output = orch("run", "m.yaml", "-d", "local", "--db", str(db), "--resume")
    assert code == 0, output
    runs = _runs(store)
    assert [(r.status, r.tokens) for r in runs if not r.superseded] == [("ok", 40)] * 2, runs
    assert not [r for r in runs if r.status in ("killed", "running")], runs


def test_a_session_lock_another_orch_took_while_the_store_was_away_stops_the_writer(pg_url):
    """The session's advisory lock dies with its connection in a restart; another orch takes
    it before this one is back: the next write says so (LockLost, one line naming the
    session) instead of two orch processes writing one session's runs."""
    from pg_fixture import fresh_pg_database, restart_pg_server
    from sqlalchemy import create_engine

    from orchestrator.db.faults import LockLost, classify
    from orchestrator.db.session_lock import PG_CLASS, session_lock

    url = fresh_pg_database(pg_url, "sf_lock")
    store = Store.open(url)
    store.guard.grace_s = 60
    session = store.create_session(kind="run", name="locked")
    other = create_engine(url)
    try:
        with session_lock(store, session):
            restart_pg_server(pg_url, down_s=0.5)
            with other.connect() as conn:
                assert conn.execute(text("SELECT pg_try_advisory_lock(:c, :s)"),
                                    {"c": PG_CLASS, "s": session}).scalar()
                conn.commit()
                with pytest.raises(LockLost) as raised:
                    store.update_session(session, name="still mine?")
                assert f"session {session}" in str(raised.value)
                fault = classify(raised.value, url)
                assert fault.kind == "locked" and "\n" not in fault.cause
    finally:
        other.dispose()
        store.engine.dispose()
