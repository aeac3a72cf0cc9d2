"""One writer per session: two `orch run --resume` of one session must not both run its cells
(they would create the same runs twice). The lock dies with its holder, so a killed orch never
leaves a session locked: an fcntl byte-range lock (one byte per session id) on a file next to a
SQLite database, a session-scoped advisory lock on PostgreSQL; other databases get the lock
within this process only. The same technique keeps one `orch import` per source folder
(`import_lock`) and one lab consumer per device (`device_lock`)."""
from __future__ import annotations

import fcntl
import hashlib
import os
import struct
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.db.reconnect import RETAKE
from orchestrator.errors import Busy

if TYPE_CHECKING:
    from orchestrator.db.store import Store

_HELD: set[tuple[str, str, int]] = set()  # (database, namespace, id) held by this process
_GUARD = threading.Lock()
PG_CLASS = 0x6F72               # advisory lock namespace ("or"): sessions
PG_DEVICE_CLASS = 0x6F64        # ("od"): lab devices, one consumer each (orchestrator/lab)
PG_IMPORT_CLASS = 0x6F69        # ("oi"): `orch import` source folders, one import each


class SessionBusy(Busy):
    """The session is being run by another orch process right now (exit 4)."""


def _busy(session_id: int) -> SessionBusy:
    return SessionBusy(f"session {session_id} is being run by another orch process right now; "
                       f"wait for it to end (or stop it), then --resume again")


class DeviceTaken(Busy):
    """Another lab consumer serves this device right now."""


@contextmanager
def session_lock(store: Store, session_id: int) -> Iterator[None]:
    """Hold session `session_id` of the store for the duration; SessionBusy when someone else
    holds it."""
    with _hold(store.engine, "sessions", PG_CLASS, session_id, lambda: _busy(session_id)):
        yield


@contextmanager
def device_lock(store: Store, device_id: int, name: str) -> Iterator[None]:
    """Hold lab device `device_id` for a consumer's life: two consumers of one device (two
    workers given the same device by mistake) would run two engines on it at once."""
    def taken() -> DeviceTaken:
        return DeviceTaken(f"device {name} is already served by another lab worker process "
                           f"(`orch lab status` shows which)")
    with _hold(store.engine, "devices", PG_DEVICE_CLASS, device_id, taken):
        yield


class ImportBusy(Busy):
    """Another `orch import` of the same folder into the same store is running (exit 4)."""


def _folder_ident(source_dir: str) -> int:
    """A folder's lock id: 31 bits of its path's sha256 (a PostgreSQL int4, a lock-file
    byte offset)."""
    return int.from_bytes(hashlib.sha256(source_dir.encode()).digest()[:4], "big") & 0x7FFFFFFF


@contextmanager
def import_lock(store: Store, source_dir: str) -> Iterator[None]:
    """Hold the import of folder `source_dir` (its resolved path) into this store: taken before
    the folder's session is looked up or created, so two concurrent imports of one folder can
    never both create a session or write its runs. ImportBusy, naming the holder's pid when
    the lock file tells it, when another import holds it."""
    ident = _folder_ident(source_dir)

    def busy() -> ImportBusy:
        pid = _holder_pid(store.engine, "imports", ident)
        return ImportBusy(f"another orch import of {source_dir} is running"
                          + (f" (pid {pid})" if pid else "")
                          + "; wait for it to end, then import again")
    with _hold(store.engine, "imports", PG_IMPORT_CLASS, ident, busy):
        yield


def _holder_pid(engine: Any, namespace: str, ident: int) -> int | None:
    """The pid holding byte `ident` of a SQLite database's lock file, else this process's own
    when one of its threads holds the lock, else None (PostgreSQL's advisory locks name a
    backend, not an orch process; F_GETLK's struct is Linux's here). Called by _hold with
    _GUARD held (not reentrant): reads _HELD and _FDS without it."""
    other = _file_holder(engine, namespace, ident)
    if other is not None:
        return other
    key = (engine.url.render_as_string(hide_password=True), namespace, ident)
    return os.getpid() if key in _HELD else None


def _file_holder(engine: Any, namespace: str, ident: int) -> int | None:
    """Another process's pid holding byte `ident` of the lock file (F_GETLK), else None."""
    if engine.dialect.name != "sqlite" or not sys.platform.startswith("linux"):
        return None
    path = Path(engine.url.database or "").expanduser()
    fd = _FDS.get(path.with_name(f"{path.name}.{namespace}.lock"))
    if fd is None:
        return None
    # struct flock {short l_type, l_whence; off_t l_start, l_len; pid_t l_pid;}
    query = struct.pack("@hhqqi4x", fcntl.F_WRLCK, os.SEEK_SET, ident, 1, 0)
    try:
        answer = fcntl.fcntl(fd, fcntl.F_GETLK, query)
    except OSError:
        return None
    kind, _, _, _, pid = struct.unpack("@hhqqi4x", answer)
    return pid if kind != fcntl.F_UNLCK and pid > 0 else None


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


class _PgHeld:
    """An advisory lock this process holds on PostgreSQL, on its own connection."""

    def __init__(self, conn: Any, pg_class: int, ident: int, busy: Any) -> None:
        self.conn, self.pg_class, self.ident, self.busy = conn, pg_class, ident, busy


_PG_HELD: dict[str, list[_PgHeld]] = {}   # database URL -> its locks held by this process


def _try_lock(conn: Any, pg_class: int, ident: int) -> bool:
    from sqlalchemy import text

    got = conn.execute(text("SELECT pg_try_advisory_lock(:c, :s)"),
                       {"c": pg_class, "s": ident}).scalar()
    conn.commit()
    return bool(got)


@contextmanager
def _pg_lock(engine: Any, pg_class: int, ident: int, busy: Any) -> Iterator[None]:
    from sqlalchemy import text

    url = engine.url.render_as_string(hide_password=True)
    held = _PgHeld(engine.connect(), pg_class, ident, busy)
    try:
        if not _try_lock(held.conn, pg_class, ident):
            raise busy()
        with _GUARD:
            _PG_HELD.setdefault(url, []).append(held)
        try:
            yield
        finally:
            with _GUARD:
                _PG_HELD[url].remove(held)
            try:   # a lock whose connection a restart cut is gone with it already
                held.conn.execute(text("SELECT pg_advisory_unlock(:c, :s)"),
                                  {"c": pg_class, "s": ident})
                held.conn.commit()
            except Exception:  # noqa: BLE001 - any failure of a dead connection
                pass
    finally:
        try:
            held.conn.close()
        except Exception:  # noqa: BLE001 - closing a cut connection
            pass


def retake(engine: Any) -> None:
    """After the store's server was lost (db/reconnect.py): every advisory lock this process
    holds on it whose connection died (a restart drops the lock with it) is taken again on a
    new connection. One that another orch took meanwhile raises LockLost (db/faults.py): the
    run must stop, two writers of one session would create its runs twice. A lost server
    raises its own error (the caller waits it out and calls again)."""
    from sqlalchemy import text
    from sqlalchemy.exc import DBAPIError

    from orchestrator.db.faults import LockLost

    with _GUARD:
        held = list(_PG_HELD.get(engine.url.render_as_string(hide_password=True), []))
    for lock in held:
        try:
            lock.conn.execute(text("SELECT 1"))
            lock.conn.commit()
            continue
        except DBAPIError:
            pass
        try:
            lock.conn.close()
        except Exception:  # noqa: BLE001 - closing a cut connection
            pass
        lock.conn = engine.connect()
        if not _try_lock(lock.conn, lock.pg_class, lock.ident):
            raise LockLost(f"{lock.busy()} (it was taken while the store was away)")


RETAKE.append(retake)
