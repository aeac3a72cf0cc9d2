"""The `ceiling` table: a device's measured hardware ceilings (storage, memory, compute), one
row per device and UTC day, written by `orch ceilings` (run/ceilings.py) and read by the views
that judge configs against them (results/ceilings.py). Their SQL lives here so the schema and
the store's write lock stay inside db/.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import delete, select

from orchestrator.db import schema
from orchestrator.db.storable import storable_row
from orchestrator.db.store import Store, inserted_id
from orchestrator.errors import StoreError


def replace_day(store: Store, row: dict[str, Any]) -> int:
    """Store `row` as its device's ceilings of its day (`device_id`, `day`), replacing an
    earlier measurement of that day, in one transaction; the new row's id. A figure the
    store cannot hold (db/storable.py: the device measured it) is dropped and named in the
    row's notes."""
    table = schema.ceiling
    kept, dropped = storable_row(table, row)
    if kept is None:
        raise StoreError("; ".join(dropped))
    if dropped:
        kept["notes"] = [*(kept.get("notes") or []), *dropped]
    row = kept
    with store.writing() as conn:
        conn.execute(delete(table).where(table.c.device_id == row["device_id"],
                                         table.c.day == row["day"]))
        return inserted_id(conn.execute(table.insert().values(**row)))


def ceiling_rows(store: Store, device_names: Iterable[str] | None = None) -> list[Any]:
    """Ceiling rows with their device's name (`device`), by device name and newest first."""
    c, d = schema.ceiling, schema.device
    stmt = (select(c, d.c.name.label("device")).join(d, c.c.device_id == d.c.id)
            .order_by(d.c.name, c.c.measured_at.desc()))
    if device_names is not None:
        stmt = stmt.where(d.c.name.in_(list(device_names)))
    return store.fetch(stmt)
