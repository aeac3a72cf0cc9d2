"""Each run's figures (stats/figures.py RunFigures) in and out of the store.

The figures are computed by stats/statistics.py `compute`, the one function, from what this
module reads of the store (token rows, agent samples, the run's record and overlap), and
stored in `run.figures` with their version:

- when a run ends (run/runner.py) and when it is imported (ingest/write.py): `compute_run`;
- for every stored run without current figures when the store is migrated (db/backfill.py,
  called by Store.open after the schema reaches its head: a new FIGURES_VERSION comes with
  a migration, so stores written before it get the new figures once);
- for a view that asks for other figures (`--trim N`, the `lower` quantile method) or a run
  still recording: `compute_rows`, not stored.

A run whose token rows change after it ended (a re-attached run: run/device_session.py) has
its figures cleared with its status, and gets them again when it ends.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, bindparam, select, update

from orchestrator.db import schema
from orchestrator.db.storable import json_problems
from orchestrator.db.access import StoreAccess
from orchestrator.stats.figures import RunFigures

if TYPE_CHECKING:
    import pandas as pd

    from orchestrator.db.rows import RunRow
    from orchestrator.record import RunRecord
    from orchestrator.stats.statistics import RunInput

# the token columns the figures read (stats/statistics.py table), in (run_id, seq) order
TOKEN_COLUMNS = ("run_id", "seq", "wall_ms", "stall_ms", "majflt", "read_bytes", "cache_hit_pct",
                 "turn")
SAMPLE_COLUMNS = ("run_id", "seq", "t_ms", "hwm_kb", "rss_kb", "mem_avail_kb", "cpu_temp_mC",
                  "batt_temp_dC")
CHUNK_ROWS = 65536          # token rows per fetchmany: bounded Python objects whatever the run


def _numbers(conn: Connection, stmt: Any, columns: Sequence[str]) -> pd.DataFrame:
    """A query's rows as a float frame (NULL as NaN; run_id and seq as int64), fetched
    CHUNK_ROWS at a time into one array: no list of millions of row objects."""
    import numpy as np
    import pandas as pd

    result = conn.execute(stmt)
    chunks = []
    while rows := result.fetchmany(CHUNK_ROWS):
        chunks.append(np.array(rows, dtype=float).reshape(len(rows), len(columns)))
    grid = np.concatenate(chunks) if chunks else np.empty((0, len(columns)))
    frame = pd.DataFrame({c: np.ascontiguousarray(grid[:, j]) for j, c in enumerate(columns)})
    return frame.astype({"run_id": "int64", "seq": "int64"})


def read_tokens(conn: Connection, ids: Sequence[int]) -> pd.DataFrame:
    """The token columns the figures read (TOKEN_COLUMNS), each run's rows in token order."""
    tok = schema.token
    stmt = (select(*(tok.c[c] for c in TOKEN_COLUMNS)).where(tok.c.run_id.in_(list(ids)))
            .order_by(tok.c.run_id, tok.c.seq))
    return _numbers(conn, stmt, TOKEN_COLUMNS)


def read_samples(conn: Connection, ids: Sequence[int]) -> pd.DataFrame:
    """The agent samples' columns the pressure figures read (SAMPLE_COLUMNS)."""
    s = schema.sample
    stmt = (select(*(s.c[c] for c in SAMPLE_COLUMNS)).where(s.c.run_id.in_(list(ids)))
            .order_by(s.c.run_id, s.c.seq))
    return _numbers(conn, stmt, SAMPLE_COLUMNS)


def run_input(row: RunRow, record: RunRecord | None = None) -> RunInput:
    """What compute needs of a run besides its rows: its record (the stored one unless given)
    and its overlap (stats/overlap.py)."""
    from orchestrator.stats.statistics import RunInput

    if record is None:
        return RunInput(row.record, row.overlapped)
    # the run being ended or imported: its settings are the record's, not yet stored
    return RunInput(record, row.overlapped_with(record))


def compute_rows(conn: Connection, rows: Sequence[RunRow], trim: int = 0,
                 quantile_method: str = "linear",
                 records: dict[int, RunRecord] | None = None,
                 tokens: pd.DataFrame | None = None) -> dict[int, RunFigures]:
    """The figures of these runs from their stored rows (not stored): run id -> RunFigures.
    `records`: a run's record when the stored one is not yet written (the run being ended);
    `tokens`: their token rows as read_tokens gives them, when the caller has them already
    (an import that watched them being stored: ingest/figures.py)."""
    from orchestrator.stats.statistics import compute

    if not rows:
        return {}
    ids = [r.id for r in rows]
    inputs = {r.id: run_input(r, (records or {}).get(r.id)) for r in rows}
    if tokens is None:
        tokens = read_tokens(conn, ids)
    samples = read_samples(conn, ids)
    return compute(tokens, inputs, samples, quantile_method=quantile_method, trim=trim)


def compute_run(store: StoreAccess, row: RunRow, record: RunRecord | None = None,
                tokens: pd.DataFrame | None = None) -> dict[str, Any]:
    """One run's figures as `run.figures` stores them, when it ends or is imported: `record`
    is its record when not yet stored, `tokens` its rows when the caller has them."""
    with store.reading() as conn:
        figures = compute_rows(conn, [row], records={row.id: record} if record else None,
                               tokens=tokens)
    return figures[row.id].stored()


def write(conn: Connection, figures: dict[int, RunFigures]) -> None:
    """Store figures computed elsewhere (one UPDATE per run, executemany)."""
    if not figures:
        return
    stmt = (update(schema.run).where(schema.run.c.id == bindparam("rid"))
            .values(figures=bindparam("figures")))
    # a figure JSON cannot hold (NaN, Inf: PostgreSQL refuses the document) is stored as None
    # (db/storable.py), as update_run does for a run's own figures
    conn.execute(stmt, [{"rid": rid, "figures": json_problems(f.stored())[0]}
                        for rid, f in figures.items()])
