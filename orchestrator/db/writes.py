"""The streaming write path: one recorder batch (token, sample and output rows of a run) and
the spool line count it reaches, stored in one transaction.

Rows and the count must commit together: after a crash or a dropped link the run resumes from
the line after the last stored one, so nothing is lost and nothing is stored twice. This is the
hot path of ingest (bench/ingest measures its rows/s), so rows arrive as the recorder built them
and go straight to `bulk_insert`'s compiled executemany: no per-row work here.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import select, update

from orchestrator.db import schema
from orchestrator.db.schema import SAMPLE_FIELDS
from orchestrator.db.storable import name_on_run, storable_samples
from orchestrator.db.store import Store, bulk_insert

__all__ = ["SAMPLE_FIELDS", "TOKEN_KEYS", "write_batch"]

# The order of a token row tuple: the recorder spells its tuples out in this order (one per
# token, no dict), and bulk_insert takes them as they are.
# They are the token table's columns in its order (engines/base.py's TokenRow has the same
# fields, and tests/test_record.py checks the two agree).
TOKEN_KEYS: tuple[str, ...] = tuple(c.name for c in schema.token.columns)


def write_batch(store: Store, run_id: int, tokens: Sequence[tuple[Any, ...]],
                samples: Sequence[dict[str, Any]], outputs: Sequence[dict[str, Any]],
                spool_lines: int) -> None:
    """Insert the batch's rows (token tuples in TOKEN_KEYS order; sample rows with every
    SAMPLE_FIELDS key, `run_id`, `seq`, `t_ms` and `extra`; output rows with `run_id`, `seq`,
    `stream`, `line`) and set the run's `spool_lines`, in one transaction. A sample's value
    the store cannot hold (a device's: db/storable.py) is dropped and named in the run's
    warnings; token values were checked by the engine's parser (engines/bmoe_checks.py)."""
    samples, dropped = storable_samples(samples)

    def write(again: bool) -> None:
        with store.writing() as conn:
            if again and _stored_up_to(conn, run_id) >= spool_lines:
                return   # the cut came after the commit reached the server: stored once
            bulk_insert(conn, schema.token, tokens, TOKEN_KEYS)
            bulk_insert(conn, schema.sample, samples)
            if dropped:
                name_on_run(conn, run_id, dropped)
            bulk_insert(conn, schema.output, outputs)
            conn.execute(update(schema.run).where(schema.run.c.id == run_id)
                         .values(spool_lines=spool_lines))
    # made again after a lost connection (db/reconnect.py): the transaction was rolled back
    # whole, unless the cut came after its commit, which the stored line count tells
    store.guard.redo(f"the rows of run #{run_id}", write)


def _stored_up_to(conn: Any, run_id: int) -> int:
    row = conn.execute(select(schema.run.c.spool_lines).where(schema.run.c.id == run_id)).first()
    return int(row[0] or 0) if row is not None else 0
