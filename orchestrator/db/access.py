"""What the read model and the figures need of a store: connections and its url.

db/runs.py (`Runs`, `Sessions`), db/figures.py and db/backfill.py take any `StoreAccess`, not
db/store.py's `Store`: Store.open computes the stored runs' figures once after a migration
(db/backfill.py), so store.py imports them, and they must not import it back (import-linter's
"no import cycles" contract counts type-only imports too).
"""
from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any, Protocol

from sqlalchemy import Connection


class StoreAccess(Protocol):
    """A store's connections (db/store.py `Store` is the one implementation)."""

    @property
    def url(self) -> Any:
        """The store's SQLAlchemy URL (named in errors: "no run 9 in sqlite:///orch.db")."""
        ...

    def reading(self) -> AbstractContextManager[Connection]:
        """A connection to read on (the thread's open transaction's, if any)."""
        ...

    def writing(self) -> AbstractContextManager[Connection]:
        """A connection to write on, committed at the end of the block."""
        ...

    def transaction(self) -> AbstractContextManager[Connection]:
        """Every write of the block committed together, or none."""
        ...

    def fetch(self, stmt: Any) -> list[Any]:
        """The rows of a select."""
        ...
