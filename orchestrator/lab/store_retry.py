"""The lab's processes outlive a store restart (docs/reliability.md, "The lab outlives its
store and its broker"). A PostgreSQL restart cuts every pooled connection; SQLAlchemy
invalidates the pool on the first failed use, so the same call made again opens a fresh
connection. Here is the one rule the worker and its consumers follow: a *lost* store (a cut
or refused connection, a server shutting down or starting up) is waited out, a call repeated
with tenacity's backoff, for at most the worker's `--store-grace`; any other store error (a
constraint, SQLite's "database is locked", a full disk) is an answer, not an outage."""
from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from tenacity import Retrying, retry_if_exception, stop_after_delay, wait_exponential

from orchestrator.db.faults import classify, first_line
from orchestrator.db.store import Store
from orchestrator.errors import Failed

log = logging.getLogger("orch.lab")
T = TypeVar("T")
STORE_GRACE_S = 300.0      # the default `--store-grace`: a restart, a fail-over


class StoreGone(Failed):
    """The store stayed unreachable for the whole grace: one line, exit 1."""


def lost_store(exc: BaseException | None) -> bool:
    """True for an error that says the store's server went away (or is not back yet): the
    store's one rule (db/faults.py, kind "lost"); False once the grace is over (StoreGone)."""
    if exc is None:
        return False
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, StoreGone):   # the grace is over: no more waiting
            return False
        seen = seen.__cause__ or seen.__context__
    return classify(exc).kind == "lost"


def with_store(step: Callable[[], T], grace_s: float, what: str) -> T:
    """step(), repeated while the store is lost, for at most grace_s; then the last error."""
    began = time.monotonic()

    def noted(state: object) -> None:
        outcome = getattr(state, "outcome", None)
        exc = outcome.exception() if outcome is not None else None
        log.warning("%s: the store is unreachable (%s); trying again for up to %.0f s more",
                    what, first_line(exc) if exc else "?",
                    max(0.0, grace_s - (time.monotonic() - began)))

    for attempt in Retrying(retry=retry_if_exception(lost_store), reraise=True,
                            stop=stop_after_delay(grace_s),
                            wait=wait_exponential(multiplier=0.5, max=5.0),
                            before_sleep=noted):
        with attempt:
            return step()
    raise AssertionError("unreachable: Retrying returns or raises")  # pragma: no cover


def wait_for_store(store: Store, grace_s: float, what: str) -> None:
    """Return once the store answers again; StoreGone after grace_s of silence."""
    try:
        with_store(lambda: store.fetch(text("SELECT 1")), grace_s, what)
    except DBAPIError as exc:
        raise gone(store, grace_s, exc) from None


def gone(store: Store, grace_s: float, exc: BaseException) -> StoreGone:
    return StoreGone(f"the store at {store.url} was unreachable for {grace_s:g} s "
                     f"({first_line(exc)})")
