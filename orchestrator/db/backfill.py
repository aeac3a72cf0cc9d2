"""The stored runs' figures, computed once for a store written before this orch's
FIGURES_VERSION (db/figures.py): called by Store.open when a migration brought the schema to
its head (a new FIGURES_VERSION comes with a migration)."""
from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from sqlalchemy import Connection, select

from orchestrator.db import schema
from orchestrator.db.access import StoreAccess
from orchestrator.db.figures import compute_rows, write
from orchestrator.db.runs import Runs
from orchestrator.stats.figures import FIGURES_VERSION
from orchestrator.stats.status import Status

BACKFILL_RUNS = 200         # runs computed and written per step of a backfill
BACKFILL_SAY = 100          # a backfill of more runs than this says so on stderr


def stale_runs(conn: Connection) -> list[int]:
    """Runs that ended without figures of this version (every run, before migration 0010)."""
    run = schema.run
    rows = conn.execute(select(run.c.id, run.c.figures).where(run.c.status != Status.RUNNING)
                        .order_by(run.c.id)).fetchall()
    return [r.id for r in rows
            if not isinstance(r.figures, dict) or r.figures.get("version") != FIGURES_VERSION]


def backfill(store: StoreAccess, say: Callable[[str], Any] | None = None) -> int:
    """Compute and store the figures of every ended run that has none of this version, in
    steps of BACKFILL_RUNS runs (each its own transaction, so a stopped backfill keeps what it
    did). Returns how many runs it computed."""
    with store.reading() as conn:
        todo = stale_runs(conn)
    if not todo:
        return 0
    say = say or _stderr
    if len(todo) > BACKFILL_SAY:
        say(f"orch: computing the figures of {len(todo):,} stored runs (once, for this "
            f"version of orch's figures)")
    reader = Runs(store)
    for at in range(0, len(todo), BACKFILL_RUNS):
        rows = reader.by_ids(todo[at:at + BACKFILL_RUNS])
        with store.reading() as conn:
            figures = compute_rows(conn, rows)
        with store.writing() as conn:
            write(conn, figures)
    return len(todo)


def _stderr(text: str) -> None:
    print(text, file=sys.stderr, flush=True)
