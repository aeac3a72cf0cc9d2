"""A store that outlives its faults during a run (docs/reliability.md, "Store faults during a
run"). Every Store has one Guard; `orch run` gives it the run's `--link-grace`.

- **A lost connection** (a PostgreSQL restart, a cut socket, a server not back yet) is waited
  out for at most the grace, with tenacity's backoff, as the transports wait out a device
  (transports/base.py LinkPolicy): a new connection is retried (the `do_connect` hook, so
  every read and write that starts while the server is away waits), and a store call cut in
  the middle is made again (`redo`). The store's writes are one transaction each, rolled back
  whole when the connection is cut, so making one again stores it once (db/writes.py checks
  the one case a cut can leave unsure: a commit that reached the server). After a loss the
  session locks this process holds are taken again (db/session_lock.py `retake`); one that
  another orch took meanwhile stops the run with that cause.
- **Connections cannot hang**: a PostgreSQL connection has a 10 s connect timeout, TCP
  keepalives and a TCP user timeout (unless the URL sets them), so a server that accepts and
  never answers is one line within a minute, and a dead peer is noticed; a server silent in
  the middle of a statement is found by db/statement_watch.py.
- **A deleted SQLite file**: the file's (st_dev, st_ino) are remembered at open, and before
  every commit one stat checks them; a file that is gone or replaced raises StoreDeleted
  (db/faults.py) instead of writing on into an unlinked file nobody can open.
"""
from __future__ import annotations

import datetime as dt
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Engine, event
from tenacity import Retrying, retry_if_exception, wait_exponential

from orchestrator.db.faults import StoreDeleted, classify
from orchestrator.db.statement_watch import StatementWatch

log = logging.getLogger("orch.store")
T = TypeVar("T")

# libpq's own bounds for every PostgreSQL connection orch opens (a URL's own values win)
PG_CONNECT_ARGS = {"connect_timeout": 10, "keepalives": 1, "keepalives_idle": 10,
                   "keepalives_interval": 5, "keepalives_count": 3, "tcp_user_timeout": 30000}
_LIBPQ = ("psycopg", "psycopg2", "psycopg2cffi")


# Called with the engine after a lost connection, before a store call is made again: each
# takes the locks this process held on that store again (db/session_lock.py adds its own).
RETAKE: list[Callable[[Engine], None]] = []


def lost(exc: BaseException) -> bool:
    return classify(exc).kind == "lost"


class Guard:
    """One store's fault rules (see the module doc). `grace_s` 0: nothing is waited for (every
    command but `orch run`, which sets its --link-grace)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.grace_s = 0.0
        self.note: Callable[[str], None] | None = None   # told once per outage
        self._off = threading.local()
        self.path: str | None = None
        self._ident: tuple[int, int] | None = None
        self.opened = dt.datetime.now(dt.timezone.utc).strftime("%H:%M:%S UTC")
        self._relock = False     # a connection was lost or made since the locks were checked
        self._since: float | None = None   # when the current outage began (monotonic)
        self._told = False                 # the outage was told (note)
        event.listen(engine, "invalidate", self._invalidated)
        # a new connection mid-run may follow a restart that no pooled one noticed (the pool
        # was empty): the locks' own connections are checked then too (one SELECT 1 each)
        event.listen(engine, "connect", self._invalidated)
        database = engine.url.database
        if engine.dialect.name == "sqlite" and database not in (None, "", ":memory:") \
                and not str(database).startswith("file:"):
            self.path = str(Path(str(database)).expanduser())
            event.listen(engine, "commit", self._check_file)
            # a new connection to a deleted file would create an empty database there
            event.listen(engine, "do_connect", lambda *_args: self._check_file(None))
        self.statements: StatementWatch | None = None
        if engine.dialect.name == "postgresql" and engine.dialect.driver in _LIBPQ:
            event.listen(engine, "do_connect", self._connect)
            # a server silent mid-statement, which no libpq timeout bounds
            self.statements = StatementWatch(engine)

    # -- the deletion watch ------------------------------------------------------------------
    def remember_file(self) -> None:
        """Remember the file's identity now (Store.open, once it exists)."""
        if self.path is not None:
            st = os.stat(self.path)
            self._ident = (st.st_dev, st.st_ino)

    def _check_file(self, _conn: Any) -> None:
        if self.path is None or self._ident is None:
            return
        try:
            st = os.stat(self.path)
            same = (st.st_dev, st.st_ino) == self._ident
        except OSError:
            same = False
        if not same:
            raise StoreDeleted(self.path, f"orch opened it ({self.opened})")

    # -- lost connections --------------------------------------------------------------------
    @property
    def waiting(self) -> bool:
        return self.grace_s > 0 and not getattr(self._off, "on", False)

    @contextmanager
    def off(self) -> Iterator[None]:
        """No waiting on this thread for the block: a run already stopping for a store fault
        tries its last update once."""
        before = getattr(self._off, "on", False)
        self._off.on = True
        try:
            yield
        finally:
            self._off.on = before

    def _retrying(self, what: str) -> Retrying:
        """tenacity over lost-store errors, bounded by the grace counted from the start of
        the outage (shared by nested waits: a redo and the new connection under it), told
        once per outage."""
        def elapsed(_state: Any) -> float:
            if self._since is None:
                self._since = time.monotonic()
            return time.monotonic() - self._since

        def noted(state: Any) -> None:
            if self._told:
                return
            self._told = True
            exc = state.outcome.exception() if state.outcome is not None else None
            message = (f"the store {self.engine.url.render_as_string(hide_password=True)} is "
                       f"unreachable ({classify(exc).reason if exc else '?'}); waiting up to "
                       f"{self.grace_s:g} s for it (--link-grace)")
            log.warning("%s", message)
            if self.note is not None:
                self.note(message)

        return Retrying(retry=retry_if_exception(lost), reraise=True,
                        stop=lambda state: elapsed(state) >= self.grace_s,
                        wait=wait_exponential(multiplier=0.25, max=4.0), before_sleep=noted)

    def _back(self) -> None:
        """A store call worked: the outage, if any, is over."""
        if self._since is not None and self._told and self.note is not None:
            self.note(f"the store {self.engine.url.render_as_string(hide_password=True)} "
                      f"is back after {time.monotonic() - self._since:.0f} s")
        self._since, self._told = None, False

    def _connect(self, dialect: Any, _record: Any, cargs: Any, cparams: dict[str, Any]) -> Any:
        for key, value in PG_CONNECT_ARGS.items():
            cparams.setdefault(key, value)
        if not self.waiting:
            return None          # SQLAlchemy connects once, as usual
        for attempt in self._retrying("a new connection"):
            with attempt:
                conn = dialect.dbapi.connect(*cargs, **cparams)
                self._back()
                return conn
        return None  # pragma: no cover - Retrying returns or raises

    def _invalidated(self, *_args: Any) -> None:
        self._relock = True

    def _retake(self) -> None:
        """After a lost connection: the locks this process held on the store, taken again."""
        if self._relock:
            self._relock = False
            for retake in RETAKE:
                retake(self.engine)

    def redo(self, what: str, step: Callable[[bool], T]) -> T:
        """step(again) (again: False the first time), made again while the store is lost,
        for at most the grace; after a loss, the session locks are taken again first."""
        if not self.waiting:
            return step(False)
        for attempt in self._retrying(what):
            with attempt:
                again = attempt.retry_state.attempt_number > 1
                if again:              # the store was lost: so may be the locks' connections
                    self._relock = True
                    self._retake()
                result = step(again)
                self._retake()      # a pooled connection found dead (pre-ping) on the way
                self._back()
                return result
        raise AssertionError("unreachable: Retrying returns or raises")  # pragma: no cover


def engine_options(url: Any) -> dict[str, Any]:
    """create_engine's options for a store at `url`: a server's pooled connections are
    checked before use (one that a restart cut is replaced, not failed on)."""
    return {} if url.get_backend_name() == "sqlite" else {"pool_pre_ping": True}


def no_retry(store: Any) -> Any:
    """`with no_retry(store):` one try of each store call on this thread."""
    return store.guard.off()
