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
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from orchestrator.db.store import Store

_HELD: set[tuple[str, str, int]] = set()  # (database, namespace, id) held by this process
_GUARD = threading.Lock()
PG_CLASS = 0x6F72               # advisory lock namespace ("or"): sessions
PG_DEVICE_CLASS = 0x6F64        # ("od"): lab devices, one consumer each (orchestrator/lab)


class SessionBusy(RuntimeError):
    """The session is being run by another orch process right now."""


def _busy(session_id: int) -> SessionBusy:
    return SessionBusy(f"session {session_id} is being run by another orch process right now; "
                       f"wait for it to end (or stop it), then --resume again")


class DeviceTaken(RuntimeError):
    """Another lab consumer serves this device right now."""


@contextmanager
def session_lock(store: "Store", session_id: int) -> Iterator[None]:
    """Hold session `session_id` of the store for the duration; SessionBusy when someone else
    holds it."""
    with _hold(store.engine, "sessions", PG_CLASS, session_id, lambda: _busy(session_id)):
        yield


@contextmanager
def device_lock(store: "Store", device_id: int, name: str) -> Iterator[None]:
    """Hold lab device `device_id` for a consumer's life: two consumers of one device (two
    workers given the same device by mistake) would run two engines on it at once."""
    def taken() -> DeviceTaken:
        return DeviceTaken(f"device {name} is already served by another lab worker process "
                           f"(`orch lab status` shows which)")
    with _hold(store.engine, "devices", PG_DEVICE_CLASS, device_id, taken):
        yield


@contextmanager
def _hold(engine: Any, namespace: str, pg_class: int, ident: int,
          busy: Any) -> Iterator[None]:
    key = (engine.url.render_as_string(hide_password=True), namespace, ident)
    with _GUARD:
        if key in _HELD:
            raise busy()
        _HELD.add(key)
    try:
        if engine.dialect.name == "sqlite" and engine.url.database not in (None, "", ":memory:"):
            with _file_lock(Path(engine.url.database).expanduser(), namespace, ident, busy):
                yield
        elif engine.dialect.name == "postgresql":
            with _pg_lock(engine, pg_class, ident, busy):
                yield
        else:
            yield
    finally:
        with _GUARD:
            _HELD.discard(key)


_FDS: dict[Path, int] = {}     # one open lock file per database, for the process's life


@contextmanager
def _file_lock(db_path: Path, namespace: str, ident: int, busy: Any) -> Iterator[None]:
    # POSIX record locks: closing ANY descriptor of the file drops every lock the process
    # holds on it, so the file stays open once opened, and a lock is released by unlocking
    # its byte (called with _GUARD's key held, so no other thread locks this byte meanwhile).
    path = db_path.with_name(f"{db_path.name}.{namespace}.lock")
    with _GUARD:
        if path not in _FDS:
            _FDS[path] = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        fd = _FDS[path]
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, ident)
    except OSError:
        raise busy() from None
    try:
        yield
    finally:
        fcntl.lockf(fd, fcntl.LOCK_UN, 1, ident)


@contextmanager
def _pg_lock(engine: Any, pg_class: int, ident: int, busy: Any) -> Iterator[None]:
    from sqlalchemy import text

    conn = engine.connect()
    try:
        got = conn.execute(text("SELECT pg_try_advisory_lock(:c, :s)"),
                           {"c": pg_class, "s": ident}).scalar()
        conn.commit()
        if not got:
            raise busy()
        try:
            yield
        finally:
            conn.execute(text("SELECT pg_advisory_unlock(:c, :s)"),
                         {"c": pg_class, "s": ident})
            conn.commit()
    finally:
        conn.close()
