"""One writer per session: two `orch run --resume` of one session must not both run its cells
(they would create the same runs twice). The lock dies with its holder, so a killed orch never
leaves a session locked: an fcntl byte-range lock (one byte per session id) on a file next to a
SQLite database, a session-scoped advisory lock on PostgreSQL; other databases get the lock
within this process only."""
from __future__ import annotations

import fcntl
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

_HELD: set[tuple[str, int]] = set()     # (database, session id) held by this process
_GUARD = threading.Lock()
PG_CLASS = 0x6F72               # advisory lock namespace ("or")


class SessionBusy(RuntimeError):
    """The session is being run by another orch process right now."""


def _busy(session_id: int) -> SessionBusy:
    return SessionBusy(f"session {session_id} is being run by another orch process right now; "
                       f"wait for it to end (or stop it), then --resume again")


@contextmanager
def session_lock(engine: Any, session_id: int) -> Iterator[None]:
    """Hold session `session_id` for the duration; SessionBusy when someone else holds it."""
    key = (engine.url.render_as_string(hide_password=True), session_id)
    with _GUARD:
        if key in _HELD:
            raise _busy(session_id)
        _HELD.add(key)
    try:
        if engine.dialect.name == "sqlite" and engine.url.database not in (None, "", ":memory:"):
            with _file_lock(Path(engine.url.database).expanduser(), session_id):
                yield
        elif engine.dialect.name == "postgresql":
            with _pg_lock(engine, session_id):
                yield
        else:
            yield
    finally:
        with _GUARD:
            _HELD.discard(key)


_FDS: dict[Path, int] = {}     # one open lock file per database, for the process's life


@contextmanager
def _file_lock(db_path: Path, session_id: int) -> Iterator[None]:
    # POSIX record locks: closing ANY descriptor of the file drops every lock the process
    # holds on it, so the file stays open once opened, and a lock is released by unlocking
    # its byte (called with _GUARD's key held, so no other thread locks this byte meanwhile).
    path = db_path.with_name(db_path.name + ".sessions.lock")
    with _GUARD:
        if path not in _FDS:
            _FDS[path] = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        fd = _FDS[path]
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, session_id)
    except OSError:
        raise _busy(session_id) from None
    try:
        yield
    finally:
        fcntl.lockf(fd, fcntl.LOCK_UN, 1, session_id)


@contextmanager
def _pg_lock(engine: Any, session_id: int) -> Iterator[None]:
    from sqlalchemy import text

    conn = engine.connect()
    try:
        got = conn.execute(text("SELECT pg_try_advisory_lock(:c, :s)"),
                           {"c": PG_CLASS, "s": session_id}).scalar()
        conn.commit()
        if not got:
            raise _busy(session_id)
        try:
            yield
        finally:
            conn.execute(text("SELECT pg_advisory_unlock(:c, :s)"),
                         {"c": PG_CLASS, "s": session_id})
            conn.commit()
    finally:
        conn.close()
