"""The lab's tables (lab_device, lab_batch, lab_cell): every read and write the lab's
commands, workers and consumers make, in one place.

They live in the db layer so that lab/ never composes SQL or takes the store's lock itself:
the schema and the store's one-writer discipline stay behind functions of the store, as for
the runs (db/runs.py)."""
from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from typing import Any

from sqlalchemy import func, select, update

from orchestrator.db import schema
from orchestrator.db.store import Store, inserted_id, now
from orchestrator.db.runs import current_only
from orchestrator.stats.status import RESUMABLE, Status

PENDING = ("queued", "delivered")          # a cell that has not ended
GOOD = ("ok", "kept")                      # ended well (`kept`: it was ok already)
CANCELLED = "cancelled"                    # `orch lab cancel` ended it before it ran

ACTIVE, QUARANTINED, REMOVED = "active", "quarantined", "removed"
STALE_S = 30.0     # a consumer whose heartbeat (every 5 s) is older than this is gone


def heartbeat_age(row: Any) -> float | None:
    """Seconds since the device's consumer last said it lives (None: never)."""
    if row.seen_at is None:
        return None
    seen = row.seen_at if row.seen_at.tzinfo else row.seen_at.replace(tzinfo=dt.UTC)
    return (now() - seen).total_seconds()


def consumer_alive(row: Any) -> bool:
    age = heartbeat_age(row)
    return row.pid is not None and age is not None and age < STALE_S


# -- devices --------------------------------------------------------------------------------
def register_device(store: Store, name: str, kind: str, worker: str, host: str) -> str:
    """A worker serves `name`: its row says so. A device quarantined or removed stays so (a
    restarted worker does not release a device someone quarantined or removed). Returns the
    device's state."""
    table = schema.lab_device
    with store.lock, store.engine.begin() as conn:
        row = conn.execute(select(table).where(table.c.name == name)).first()
        if row is None:
            conn.execute(table.insert().values(name=name, kind=kind, worker=worker, host=host,
                                               state=ACTIVE, failures=0, updated_at=now()))
            return ACTIVE
        conn.execute(update(table).where(table.c.id == row.id).values(
            kind=kind, worker=worker, host=host, updated_at=now()))
        return row.state


def lab_device(store: Store, name: str) -> Any | None:
    rows = store.fetch(select(schema.lab_device).where(schema.lab_device.c.name == name))
    return rows[0] if rows else None


def lab_devices(store: Store, worker: str | None = None) -> list[Any]:
    stmt = select(schema.lab_device).order_by(schema.lab_device.c.name)
    if worker is not None:
        stmt = stmt.where(schema.lab_device.c.worker == worker)
    return store.fetch(stmt)


def update_device(store: Store, name: str, **values: Any) -> None:
    values.setdefault("updated_at", now())
    with store.lock, store.engine.begin() as conn:
        conn.execute(update(schema.lab_device).where(schema.lab_device.c.name == name)
                     .values(**values))


# -- batches and cells ----------------------------------------------------------------------
def create_batch(store: Store, **values: Any) -> int:
    values.setdefault("created_at", now())
    with store.lock, store.engine.begin() as conn:
        return inserted_id(conn.execute(schema.lab_batch.insert().values(**values)))


def batch_row(store: Store, batch_id: int) -> Any | None:
    rows = store.fetch(select(schema.lab_batch).where(schema.lab_batch.c.id == batch_id))
    return rows[0] if rows else None


def insert_cells(store: Store, rows: list[dict[str, Any]]) -> list[int]:
    """Insert the batch's cells (one statement per 1,000 rows); their ids in the given order."""
    table = schema.lab_cell
    with store.lock, store.engine.begin() as conn:
        for start in range(0, len(rows), 1000):
            conn.execute(table.insert(), rows[start:start + 1000])
        keys = {(r["session_id"], r["cell_key"]) for r in rows}
        sessions = sorted({r["session_id"] for r in rows})
        found = conn.execute(select(table.c.id, table.c.session_id, table.c.cell_key)
                             .where(table.c.session_id.in_(sessions))).all()
    ids = {(r.session_id, r.cell_key): r.id for r in found if (r.session_id, r.cell_key) in keys}
    return [ids[(r["session_id"], r["cell_key"])] for r in rows]


def cell_row(store: Store, cell_id: int) -> Any | None:
    rows = store.fetch(select(schema.lab_cell).where(schema.lab_cell.c.id == cell_id))
    return rows[0] if rows else None


def update_cell(store: Store, cell_id: int, **values: Any) -> None:
    with store.lock, store.engine.begin() as conn:
        conn.execute(update(schema.lab_cell).where(schema.lab_cell.c.id == cell_id)
                     .values(**values))


def take_cell(store: Store, cell_id: int, worker: str) -> bool:
    """A consumer took the cell: from here on a successor consumer of the device finishes it.
    False when the cell ended meanwhile (`orch lab cancel` between the read and this write):
    one conditional UPDATE, so a cell is either taken or cancelled, never both."""
    table = schema.lab_cell
    with store.lock, store.engine.begin() as conn:
        done = conn.execute(update(table).where(table.c.id == cell_id,
                                                table.c.state.in_(PENDING)).values(
            state="delivered", worker=worker, delivered_at=now(), attempts=table.c.attempts + 1))
    return bool(done.rowcount)


def cancel_queued(store: Store, batch_id: int) -> tuple[list[int], int]:
    """`orch lab cancel`: the batch's cells still `queued` become `cancelled` (a consumer
    that meets their task does nothing); (their ids, how many a consumer has taken and is
    running)."""
    table = schema.lab_cell
    stamp = now()
    with store.lock, store.engine.begin() as conn:
        conn.execute(update(table).where(table.c.batch_id == batch_id,
                                         table.c.state == "queued")
                     .values(state=CANCELLED, ended_at=stamp))
        ids = [r.id for r in conn.execute(select(table.c.id).where(
            table.c.batch_id == batch_id, table.c.state == CANCELLED,
            table.c.ended_at == stamp))]
        running = conn.execute(select(func.count()).where(
            table.c.batch_id == batch_id, table.c.state == "delivered")).scalar_one()
    return ids, int(running)


def batch_devices(store: Store, batch_id: int) -> list[str]:
    """The devices a batch was submitted to, in the order given."""
    table = schema.lab_cell
    rows = store.fetch(select(table.c.device, func.min(table.c.session_id).label("s"))
                       .where(table.c.batch_id == batch_id).group_by(table.c.device)
                       .order_by("s"))
    return [r.device for r in rows]


def taken_cells(store: Store, device: str) -> list[Any]:
    """Cells of `device` a consumer took and did not end (it died): the order they came in."""
    table = schema.lab_cell
    return store.fetch(select(table).where(table.c.device == device,
                                           table.c.state == "delivered")
                       .order_by(table.c.batch_id, table.c.position))


def pending_counts(store: Store) -> dict[str, int]:
    table = schema.lab_cell
    rows = store.fetch(select(table.c.device, func.count()).where(table.c.state.in_(PENDING))
                       .group_by(table.c.device))
    return {device: count for device, count in rows}


def cells_of_sessions(store: Store, session_ids: Iterable[int]) -> list[Any]:
    table = schema.lab_cell
    return store.fetch(select(table).where(table.c.session_id.in_(list(session_ids)))
                       .order_by(table.c.device, table.c.batch_id, table.c.position))


def session_pending(store: Store, session_id: int) -> int:
    table = schema.lab_cell
    return store.fetch(select(func.count()).where(table.c.session_id == session_id,
                                                  table.c.state.in_(PENDING)))[0][0]


def newest_batch(store: Store) -> int | None:
    rows = store.fetch(select(func.max(schema.lab_batch.c.id)))
    return rows[0][0] if rows else None


def batch_sessions(store: Store, batch_id: int) -> list[int]:
    table = schema.lab_cell
    return [r[0] for r in store.fetch(select(table.c.session_id).where(table.c.batch_id == batch_id)
                                      .distinct().order_by(table.c.session_id))]


def own_job_dirs(store: Store, device: str) -> set[str]:
    """Job dirs of `device`'s runs that are the lab's to collect: runs still `running` or
    `interrupted` whose cell a consumer took (state `delivered`) and did not end."""
    run, cell = schema.run, schema.lab_cell
    rows = store.fetch(select(run.c.remote_dir).join(
        cell, (cell.c.session_id == run.c.session_id) & (cell.c.cell_key == run.c.cell_key))
        .where(cell.c.device == device, cell.c.state == "delivered",
               run.c.status.in_(sorted(RESUMABLE))))
    return {r.remote_dir for r in rows if r.remote_dir}


def session_batch(store: Store, session_id: int) -> int | None:
    table = schema.lab_cell
    rows = store.fetch(select(table.c.batch_id).where(table.c.session_id == session_id).limit(1))
    return rows[0][0] if rows else None


def device_activity(store: Store) -> list[Any]:
    """Per lab device not removed: `pending` (its cells not ended), `last_end` (when its last
    cell ended, None if none has) and `first_queued` (its oldest pending cell's enqueue time):
    what tells a device that stopped producing data (lab/watch.py)."""
    c, d = schema.lab_cell, schema.lab_device
    pending = (select(c.c.device, func.count().label("pending"),
                      func.min(c.c.enqueued_at).label("first_queued"))
               .where(c.c.state.in_(PENDING)).group_by(c.c.device).subquery())
    ended = (select(c.c.device, func.max(c.c.ended_at).label("last_end"))
             .where(c.c.ended_at.is_not(None)).group_by(c.c.device).subquery())
    stmt = (select(d.c.name, pending.c.pending, pending.c.first_queued, ended.c.last_end)
            .join(pending, pending.c.device == d.c.name)
            .outerjoin(ended, ended.c.device == d.c.name)
            .where(d.c.state != REMOVED).order_by(d.c.name))
    return store.fetch(stmt)


def queued_cells(store: Store, device: str, before: dt.datetime) -> list[Any]:
    """Cells of `device` still `queued` that were sent before `before`, in the order they
    were sent (lab/reconcile.py: what a broker that lost its messages must be given again)."""
    table = schema.lab_cell
    return store.fetch(select(table.c.id, table.c.device).where(
        table.c.device == device, table.c.state == "queued", table.c.enqueued_at < before)
        .order_by(table.c.batch_id, table.c.position))


def reopen_stranded(store: Store, device: str) -> list[int]:
    """Cells of `device` stored `failed` while their run is still `running` (an older orch
    marked a cell failed when its worker was stopped hard, and left its engine running on the
    device): taken again (`delivered`), so the device's consumer re-attaches their job instead
    of finding the device busy with it. Their ids."""
    run, cell = schema.run, schema.lab_cell
    with store.lock, store.engine.begin() as conn:
        ids = [r.id for r in conn.execute(current_only(select(cell.c.id).join(
            run, (cell.c.session_id == run.c.session_id) & (cell.c.cell_key == run.c.cell_key))
            .where(cell.c.device == device, cell.c.state == Status.FAILED,
                   run.c.status == Status.RUNNING)).distinct())]
        if ids:
            conn.execute(update(cell).where(cell.c.id.in_(ids))
                         .values(state="delivered", ended_at=None))
    return ids
