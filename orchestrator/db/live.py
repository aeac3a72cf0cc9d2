"""What is happening now, as the store holds it: the runs still recording, each run's newest
agent sample, the newest failures, every device and the lab's waiting cells. Read by
results/live.py for `orch serve`'s lab page and its JSON (docs/serve.md); db/ composes the
SQL so the layers above never touch the schema."""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import func, select

from orchestrator.db import schema
from orchestrator.db.access import StoreAccess
from orchestrator.db.lab import PENDING
from orchestrator.db.rows import RunRow
from orchestrator.db.runs import Runs, _run_select, current_only
from orchestrator.stats.status import Status


def running_runs(store: StoreAccess) -> list[RunRow]:
    """Current runs whose status is still `running` (an `orch run` or a lab cell recording,
    or one whose controller died mid-run), oldest first."""
    stmt = current_only(_run_select()).where(schema.run.c.status == Status.RUNNING)
    return Runs(store)._fetch(stmt.order_by(schema.run.c.id))


def failed_runs(store: StoreAccess, limit: int) -> list[RunRow]:
    """The newest `limit` runs that ended other than ok (failed, oom, timeout, ...), newest
    first, superseded ones included: a failure a resume re-ran still happened."""
    stmt = _run_select().where(schema.run.c.status.not_in([Status.OK, Status.RUNNING]))
    return Runs(store)._fetch(stmt.order_by(schema.run.c.id.desc()).limit(limit))


def latest_samples(store: StoreAccess, run_ids: Iterable[int]) -> dict[int, Any]:
    """Each run's newest agent sample row (t_ms, mem_avail_kb, cpu_temp_mC, ...), by run id;
    a run without samples is absent."""
    ids = list(run_ids)
    if not ids:
        return {}
    sample = schema.sample
    newest = (select(sample.c.run_id, func.max(sample.c.seq).label("seq"))
              .where(sample.c.run_id.in_(ids)).group_by(sample.c.run_id).subquery())
    rows = store.fetch(select(sample).join(newest, (newest.c.run_id == sample.c.run_id)
                                           & (newest.c.seq == sample.c.seq)))
    return {r.run_id: r for r in rows}


def newest_sampled_run_per_device(store: StoreAccess) -> dict[str, int]:
    """Each device's newest run that has agent samples (its newest temperature and free RAM
    are that run's last sample), by device name."""
    run, dev, sample = schema.run, schema.device, schema.sample
    # EXISTS: one lookup of the (run_id, seq) key per run, not a scan of every sample
    has_samples = select(sample.c.run_id).where(sample.c.run_id == run.c.id).exists()
    rows = store.fetch(select(dev.c.name, func.max(run.c.id).label("run_id"))
                       .join(run, run.c.device_id == dev.c.id).where(has_samples)
                       .group_by(dev.c.name))
    return {r.name: r.run_id for r in rows}


def devices(store: StoreAccess) -> list[Any]:
    """Every device the store knows (name, kind, facts, facts_at), by name."""
    return store.fetch(select(schema.device).order_by(schema.device.c.name))


def queued_cells(store: StoreAccess, per_device: int) -> dict[str, list[Any]]:
    """The lab cells not ended (queued, delivered) of each device in the order the device
    runs them, the first `per_device` of each (lab_cell rows)."""
    cell = schema.lab_cell
    rank = func.row_number().over(partition_by=cell.c.device,
                                  order_by=(cell.c.batch_id, cell.c.position)).label("rank")
    inner = select(cell, rank).where(cell.c.state.in_(PENDING)).subquery()
    rows = store.fetch(select(inner).where(inner.c.rank <= per_device)
                       .order_by(inner.c.device, inner.c.rank))
    out: dict[str, list[Any]] = {}
    for row in rows:
        out.setdefault(row.device, []).append(row)
    return out


def store_mark(store: StoreAccess) -> tuple[Any, ...]:
    """A value that changes whenever a session or run is added, ends or changes status: the
    server rebuilds its site pages when it differs from the last one seen."""
    run, ses = schema.run, schema.session
    row = store.fetch(select(func.count(run.c.id), func.max(run.c.id), func.max(run.c.ended_at),
                             select(func.count(ses.c.id)).scalar_subquery(),
                             select(func.max(ses.c.ended_at)).scalar_subquery()))[0]
    return tuple(row)


def recent_sessions(store: StoreAccess, limit: int) -> list[tuple[Any, dict[str, int]]]:
    """The newest `limit` sessions (session rows), each with its current runs' count per
    status, newest first."""
    ses, run = schema.session, schema.run
    rows = store.fetch(select(ses).order_by(ses.c.id.desc()).limit(limit))
    ids = [r.id for r in rows]
    counts: dict[int, dict[str, int]] = {i: {} for i in ids}
    if ids:
        stmt = current_only(select(run.c.session_id, run.c.status, func.count().label("n"))
                            .where(run.c.session_id.in_(ids))
                            .group_by(run.c.session_id, run.c.status))
        for r in store.fetch(stmt):
            counts[r.session_id][r.status] = r.n
    return [(r, counts[r.id]) for r in rows]


def token_progress(store: StoreAccess, run_ids: Iterable[int]) -> dict[int, tuple[int, float]]:
    """Each run's token rows stored so far and their summed wall_ms (NULL walls add
    nothing), by run id: one aggregate over the (run_id, seq) key, however long the run."""
    ids = list(run_ids)
    if not ids:
        return {}
    token = schema.token
    rows = store.fetch(select(token.c.run_id, func.count().label("n"),
                              func.coalesce(func.sum(token.c.wall_ms), 0.0).label("wall"))
                       .where(token.c.run_id.in_(ids)).group_by(token.c.run_id))
    return {r.run_id: (int(r.n), float(r.wall)) for r in rows}
