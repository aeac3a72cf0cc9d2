"""`orch import` into a store whose disk fills (docs/reliability.md, "A store that fills
during an import").

Each run is written in a transaction of its own (ingest/write.py), so a run the store could
not take is rolled back; but the runs before it, and the session's bookkeeping after them,
would be a partial import with a raw driver error. A full store ends the whole attempt
instead: the runs it wrote are deleted (deleting frees pages: SQLite and PostgreSQL both
take it on a full disk; if even that fails, the line says which runs stayed), a session it
created goes too, runs a `--replace` would have replaced are kept, and one line says so:
`the store's disk is full: REASON; nothing of FOLDER was kept`."""
from __future__ import annotations

import errno
from collections.abc import Iterable
from pathlib import Path

from sqlalchemy.exc import SQLAlchemyError

from orchestrator.db.store import Store
from orchestrator.errors import Failed

# SQLite's SQLITE_FULL text ("database or disk is full"), PostgreSQL's SQLSTATE class 53
# (53100 disk_full) and the words of both, and an OSError ENOSPC / EDQUOT however wrapped
_FULL_WORDS = ("database or disk is full", "no space left on device", "disk full",
               "could not extend file", "quota exceeded")
_FULL_SQLSTATES = ("53100",)


def store_full(exc: BaseException) -> bool:
    """The exception (or one it wraps) says the store's disk, or its quota, is full."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if getattr(current, "pgcode", None) in _FULL_SQLSTATES or \
                getattr(current, "sqlstate", None) in _FULL_SQLSTATES:
            return True
        if isinstance(current, SQLAlchemyError) or type(current).__module__.startswith(
                ("sqlite3", "psycopg")):
            text = str(current).lower()
            if any(words in text for words in _FULL_WORDS):
                return True
        current = getattr(current, "orig", None) or current.__cause__ or current.__context__
    return False


def reason_of(exc: BaseException) -> str:
    """The driver's own first line, without SQLAlchemy's `(sqlite3.OperationalError)`."""
    text = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:200]


def undo_and_fail(store: Store, exc: BaseException, folder: Path, written: Iterable[int],
                  session_id: int | None) -> Failed:
    """Delete what this attempt wrote (its runs, and `session_id`: a session it created);
    the one-line error to raise."""
    kept = []
    for run_id in written:
        try:
            store.delete_run(run_id)
        except SQLAlchemyError:
            kept.append(run_id)
    if session_id is not None and not kept:
        try:
            store.delete_session(session_id)
        except SQLAlchemyError:
            pass
    where = f"nothing of {folder} was kept" if not kept else \
        f"run{'s' if len(kept) > 1 else ''} {', '.join(f'#{r}' for r in kept)} of {folder} " \
        f"could not be taken back (each is whole); import the folder again once there is room"
    return Failed(f"the store's disk is full: {reason_of(exc)}; {where}")
