"""The `quality` table: every read and write of the probe answers, in one place.

The probe runner (run/quality.py) writes one row per probe invocation and updates it as the
probe ends; the quality summary (results/quality.py) and the report (report/document/quality.py) read
them back. Probe rows never touch the run / token / sample tables, so no speed statistic can
see them; keeping their SQL here keeps the schema and the store's write lock inside db/.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import select

from orchestrator.db import schema
from orchestrator.db.storable import storable_values
from orchestrator.db.store import Store, inserted_id
from orchestrator.stats.status import Status



def answered_ok(store: Store, session_id: int) -> set[tuple[str, str, str]]:
    """(model, config, probe id) of the session's probes that ended ok (`--resume` skips
    them)."""
    table = schema.quality
    rows = store.fetch(select(table.c.model, table.c.config, table.c.probe_id)
                       .where(table.c.session_id == session_id, table.c.status == Status.OK))
    return {(r.model, r.config, r.probe_id) for r in rows}


def start_probe(store: Store, values: dict[str, Any]) -> int:
    """A fresh row for the probe, replacing an earlier attempt (--resume of a failed one);
    its id."""
    table = schema.quality
    with store.writing() as conn:
        conn.execute(table.delete().where(table.c.session_id == values["session_id"],
                                          table.c.model == values["model"],
                                          table.c.config == values["config"],
                                          table.c.probe_id == values["probe_id"]))
        values = storable_values(conn, table, None, values)   # a device's rc, say
        return inserted_id(conn.execute(table.insert().values(**values)))


def update_probe(store: Store, row_id: int, **values: Any) -> None:
    table = schema.quality
    with store.writing() as conn:
        values = storable_values(conn, table, row_id, values)
        conn.execute(table.update().where(table.c.id == row_id).values(**values))


def probe_rows(store: Store, session_id: int, model: str | None = None) -> list[Any]:
    """The session's probe rows in the order they ran (model filter optional)."""
    table = schema.quality
    stmt = select(table).where(table.c.session_id == session_id)
    if model is not None:
        stmt = stmt.where(table.c.model == model)
    return store.fetch(stmt.order_by(table.c.id))


def newest_probed_session(store: Store, session_ids: Iterable[int], model: str) -> int | None:
    """The newest of these sessions with probe rows for `model` (None: none has any)."""
    table = schema.quality
    found = store.fetch(select(table.c.session_id)
                        .where(table.c.session_id.in_(list(session_ids)),
                               table.c.model == model)
                        .order_by(table.c.session_id.desc()).limit(1))
    return found[0].session_id if found else None
