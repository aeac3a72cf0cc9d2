"""The regression loop's tables (docs/regressions.md): `annotation` (notes on sessions and
runs, acknowledged regressions) and `alert` (what the lab's watcher posted or evaluated, once
per event). Their SQL lives here so the schema and the store's write lock stay inside db/."""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError

from orchestrator.db import schema
from orchestrator.db.store import Store, inserted_id, now

TARGET_KINDS = ("session", "run", "change_point")


def add_annotation(store: Store, target_kind: str, target: str, text: str,
                   author: str | None = None) -> int:
    """Store a note on (target_kind, target); its id."""
    assert target_kind in TARGET_KINDS, target_kind
    with store.writing() as conn:
        return inserted_id(conn.execute(schema.annotation.insert().values(
            target_kind=target_kind, target=target, text=text, author=author,
            created_at=now())))


def annotation_rows(store: Store, target_kind: str | None = None,
                targets: Iterable[str] | None = None) -> list[Any]:
    """Annotations, oldest first; of one kind of target, and of these targets, when given."""
    t = schema.annotation
    stmt = select(t).order_by(t.c.created_at, t.c.id)
    if target_kind is not None:
        stmt = stmt.where(t.c.target_kind == target_kind)
    if targets is not None:
        stmt = stmt.where(t.c.target.in_(list(targets)))
    return store.fetch(stmt)


def claim_alert(store: Store, key: str, kind: str, payload: dict[str, Any] | None) -> bool:
    """Record the event `key` as handled; False when it was already (by this process or by
    another worker of the lab): the unique key is the once-only guarantee."""
    try:
        with store.writing() as conn:
            conn.execute(schema.alert.insert().values(key=key, kind=kind, payload=payload,
                                                      created_at=now()))
    except IntegrityError:
        return False
    return True


def set_alert_outcome(store: Store, key: str, outcome: str) -> None:
    with store.writing() as conn:
        conn.execute(update(schema.alert).where(schema.alert.c.key == key)
                     .values(outcome=outcome))


def alerts(store: Store, kind: str | None = None) -> list[Any]:
    """Handled events, oldest first (of one kind when given)."""
    stmt = select(schema.alert).order_by(schema.alert.c.id)
    if kind is not None:
        stmt = stmt.where(schema.alert.c.kind == kind)
    return store.fetch(stmt)


def matrix_names(store: Store) -> list[str]:
    """Every matrix name a session of the store ran, by name."""
    s = schema.session
    rows = store.fetch(select(s.c.matrix_name).where(s.c.matrix_name.is_not(None))
                       .distinct().order_by(s.c.matrix_name))
    return [r.matrix_name for r in rows]


def sessions_ended_since(store: Store, since: Any) -> list[Any]:
    """(id, matrix_name, ended_at) of the sessions that ended at or after `since`, oldest
    first."""
    s = schema.session
    return store.fetch(select(s.c.id, s.c.matrix_name, s.c.ended_at)
                       .where(s.c.ended_at.is_not(None), s.c.ended_at >= since)
                       .order_by(s.c.ended_at, s.c.id))


def alert(store: Store, key: str) -> Any | None:
    rows = store.fetch(select(schema.alert).where(schema.alert.c.key == key))
    return rows[0] if rows else None
