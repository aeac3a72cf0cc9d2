"""What a store error means, said once: `classify(exc)` turns any exception a store raised
(SQLAlchemy's wrappers, the drivers' own, orch's deletion watch) into a StoreFault whose kind
decides what orch does and what it advises (docs/reliability.md, "Store faults during a run"):

    full     the disk (or the server's) is out of space: "Free the space" (only here)
    locked   another process holds the store's write lock past the busy timeout: who, if known
    lost     the server went away or cannot be reached (a restart, a cut socket, a silent
             peer): waited out within --link-grace (db/reconnect.py), then a stop
    deleted  the SQLite file was deleted or replaced under orch (db/reconnect.py's watch)
    value    a value the store refused (DataError, the SQLite driver's OverflowError)
    other    anything else the store said

Every place that turns a store error into words uses it: the runner's stop mid-run, `orch run`'s
start-up, `Store.open`.
"""
from __future__ import annotations

import fcntl
import os
import struct
import sys
from dataclasses import dataclass
from pathlib import Path

from orchestrator.errors import Busy, Failed

KINDS = ("full", "locked", "lost", "deleted", "value", "other")

# SQLite's primary result codes (sqlite3.h) and PostgreSQL's SQLSTATE classes that say the
# same thing whatever the message's language
_SQLITE = {13: "full", 5: "locked", 6: "locked"}
_PG_FULL = ("53100", "53200", "53000")                   # disk full, out of memory, resources
_PG_LOCKED = ("55P03", "40P01")                          # lock not available, deadlock
_PG_LOST = ("57P01", "57P02", "57P03", "08")             # admin/crash shutdown, cannot connect now
_LOST_WORDS = ("connection refused", "server closed the connection", "connection timeout",
               "timeout expired", "terminating connection", "could not connect",
               "connection failed", "connection is closed", "consuming input failed",
               "sending query failed", "no connection to the server", "the connection is lost",
               "connection reset", "broken pipe", "ssl syscall", "is the server running",
               "could not receive data", "could not send data", "the database system is")


class StoreDeleted(Exception):
    """The SQLite file under a running store was deleted or replaced (db/reconnect.py's watch
    saw its inode change): every write since went to a file nobody can open again."""

    def __init__(self, path: str, since: str) -> None:
        super().__init__(f"the store {path} was deleted (or replaced) during the run; "
                         f"rows since {since} are lost")
        self.path, self.since = path, since


class LockLost(Exception):
    """A lock this process held on a PostgreSQL store died with a lost connection and another
    orch took it before it could be taken again (db/session_lock.py `retake`)."""


class StoreUnreachable(Failed):
    """The store's server cannot be reached at the start (refused, silent, down): exit 1, one
    line; waiting for the server and running again helps, so it is no bad input (exit 2)."""


class StoreLocked(Busy):
    """The store is locked by another process past the busy timeout at the start: exit 4,
    one line naming the holder when it is known."""


@dataclass(frozen=True)
class StoreFault:
    kind: str          # one of KINDS
    reason: str        # the driver's own first line, at most 200 characters
    store: str         # the store as the user named it (a path, a URL without password)
    holder: str = ""   # locked: who holds the lock ("pid 123 (python3)"), when known

    @property
    def cause(self) -> str:
        """One line: the store and what happened to it (no advice)."""
        where = self.store or "the store"
        return {
            "full": f"the store {where} is full ({self.reason})",
            "locked": f"the store {where} is locked by {self.holder or 'another process'} "
                      f"({self.reason})",
            "lost": f"the store {where} was lost ({self.reason})",
            "deleted": self.reason,
            "value": f"the store {where} refused a value ({self.reason})",
        }.get(self.kind, f"the store {where} could not be written ({self.reason})")

    @property
    def advice(self) -> str:
        """What the user does about it before trying again."""
        return {
            "full": "Free the space",
            "locked": "Let the holder finish (or stop it)",
            "lost": "Bring the store's server back (or check the network)",
            "deleted": "Keep the store's file in place while orch runs",
            "value": "orch drops values the store cannot hold: this one got through, a bug "
                     "to report with this line",
        }.get(self.kind, "Check the store")


def first_line(exc: BaseException) -> str:
    """A driver error's message without SQLAlchemy's statement and background-link lines."""
    inner = getattr(exc, "orig", None) or exc
    lines = [line.strip() for line in str(inner).strip().splitlines() if line.strip()]
    return (lines[0] if lines else type(inner).__name__)[:200]


def _chain(exc: BaseException | None) -> list[BaseException]:
    """exc, its driver error (`orig`) and its causes, each once."""
    seen: list[BaseException] = []
    while exc is not None and all(exc is not s for s in seen):
        seen.append(exc)
        orig = getattr(exc, "orig", None)
        if isinstance(orig, BaseException) and all(orig is not s for s in seen):
            seen.append(orig)
        exc = exc.__cause__ or exc.__context__
    return seen


def _kind(exc: BaseException) -> str:
    from sqlalchemy.exc import DataError, DBAPIError

    chain = _chain(exc)
    for item in chain:
        if isinstance(item, StoreDeleted):
            return "deleted"
        if isinstance(item, LockLost):
            return "locked"
        if isinstance(item, (DataError, OverflowError)):
            return "value"
        code = getattr(item, "sqlite_errorcode", None)
        if isinstance(code, int) and (code & 0xFF) in _SQLITE:
            return _SQLITE[code & 0xFF]
        state = getattr(item, "sqlstate", None) or getattr(item, "pgcode", None)
        if isinstance(state, str):
            if state.startswith(_PG_FULL):
                return "full"
            if state.startswith(_PG_LOCKED):
                return "locked"
            if state.startswith(_PG_LOST):
                return "lost"
    for item in chain:
        if isinstance(item, DBAPIError) and item.connection_invalidated:
            return "lost"
    return _kind_by_words(chain)


def _kind_by_words(chain: list[BaseException]) -> str:
    """The kind where no code says it: the drivers' words, then the error's class."""
    text = " ".join(str(item).lower() for item in chain)
    if "database or disk is full" in text or "no space left" in text:
        return "full"
    if "database is locked" in text or "database table is locked" in text:
        return "locked"
    sqlite = any(type(item).__module__.startswith("sqlite3") for item in chain)
    if not sqlite and any(word in text for word in _LOST_WORDS):
        return "lost"
    # a server's OperationalError or InterfaceError that says nothing else (a driver's own
    # wording, another language) is its link: waited out within the grace, never an answer.
    # SQLite's are answers of a local file (locked, I/O, full), matched above.
    from sqlalchemy.exc import InterfaceError, OperationalError
    if not sqlite and any(isinstance(item, (OperationalError, InterfaceError)) for item in chain):
        return "lost"
    return "other"


def classify(exc: BaseException, store: str = "", path: str | None = None) -> StoreFault:
    """The fault `exc` says of the store named `store` (a SQLite store's `path` lets a lock's
    holder be named)."""
    kind = _kind(exc)
    reason = str(next(i for i in _chain(exc) if isinstance(i, StoreDeleted))) \
        if kind == "deleted" else first_line(exc)
    holder = lock_holder(path) if kind == "locked" and path else ""
    if any(isinstance(item, LockLost) for item in _chain(exc)):
        holder = "another orch"
    return StoreFault(kind, reason, store, holder)


# SQLite's own byte locks (os_unix.c): the rollback journal's PENDING, RESERVED and SHARED
# bytes of the database file, and WAL mode's write lock (byte 120) of its -shm file
_DB_LOCKS = (0x40000000, 512 + 2)
_SHM_LOCKS = (120, 1)


def lock_holder(path: str) -> str:
    """'pid N (comm)' of another process holding one of SQLite's locks on the database at
    `path` (F_GETLK; Linux's struct flock), else "". Our own process's locks never show."""
    if not sys.platform.startswith("linux"):
        return ""
    for name, (start, length) in ((path + "-shm", _SHM_LOCKS), (path, _DB_LOCKS)):
        try:
            fd = os.open(name, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            query = struct.pack("@hhqqi4x", fcntl.F_WRLCK, os.SEEK_SET, start, length, 0)
            kind, _, _, _, pid = struct.unpack("@hhqqi4x", fcntl.fcntl(fd, fcntl.F_GETLK, query))
        except OSError:
            continue
        finally:
            os.close(fd)
        if kind != fcntl.F_UNLCK and pid > 0:
            return f"process {pid}{_comm(pid)}"
    return ""


def _comm(pid: int) -> str:
    try:
        return f" ({Path(f'/proc/{pid}/comm').read_text().strip()})"
    except OSError:
        return ""


def opening_error(exc: BaseException, store: str) -> Exception:
    """Store.open's one line: a server that cannot be reached is StoreUnreachable (exit 1), a
    store locked past the busy timeout StoreLocked (4), anything else a StoreError (2)."""
    from orchestrator.errors import StoreError

    fault = classify(exc, store)
    if fault.kind == "lost":
        return StoreUnreachable(f"--db {store}: cannot open the store: its server cannot be "
                                f"reached ({fault.reason}); {fault.advice.lower()}, then run "
                                f"again")
    if fault.kind == "locked":
        return StoreLocked(f"--db {store}: cannot open the store: it is locked by another "
                           f"process ({fault.reason}); let the holder finish, then run again")
    return StoreError(f"--db {store}: cannot open the store: {fault.reason}")


def start_error(exc: BaseException, store: str, path: str | None = None) -> Exception:
    """A store error met while `orch run` starts (before any cell): one line, the documented
    exit code: locked 4 (StoreLocked), lost 1 (StoreUnreachable), others 1 (Failed)."""
    fault = classify(exc, store, path)
    if fault.kind == "locked":
        return StoreLocked(f"{fault.cause}; {fault.advice.lower()}, then run again")
    if fault.kind == "lost":
        return StoreUnreachable(f"the store {store} cannot be reached ({fault.reason}); "
                                f"{fault.advice.lower()}, then run again")
    return Failed(f"{fault.cause}; {fault.advice.lower()}, then run again")
