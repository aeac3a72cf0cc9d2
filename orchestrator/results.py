"""Store -> analysis: the statistics of stored runs, for every view (terminal, table, report).

One place decides where a run's device pressure comes from: the agent's samples when the run
was measured by orch, else the `.metrics` sidecar an imported run brought along.
"""
from __future__ import annotations

from typing import Any, Iterable, Sequence

import pandas as pd
from sqlalchemy import select

from . import analysis
from .db import schema
from .db.store import Store
from .yamlfile import ConfigError

DAGGER = "†"


def runs_stats(store: Store, run_rows: Sequence[Any], quantile_method: str = "linear") -> pd.DataFrame:
    """analysis.runs_table for these runs, indexed by run id (every row present)."""
    ids = [r.id for r in run_rows]
    if not ids:
        return pd.DataFrame(columns=list(analysis.STAT_COLUMNS))
    tokens = store.frame("token", ids)
    samples = store.frame("sample", ids)
    by_run = dict(tuple(samples.groupby("run_id"))) if len(samples) else {}
    summaries: dict[int, Any] = {}
    pressure: dict[int, Any] = {}
    for row in run_rows:
        summary = row.summary or {}
        summaries[row.id] = summary
        if row.id in by_run:
            pressure[row.id] = analysis.pressure_from_samples(by_run[row.id])
        elif summary.get("sidecar"):
            pressure[row.id] = summary["sidecar"]
    stats = analysis.runs_table(tokens, summaries, pressure, quantile_method=quantile_method)
    return stats.reindex(ids)


def stats_dicts(store: Store, run_rows: Sequence[Any]) -> dict[int, dict[str, Any]]:
    """Per-run statistics as plain dicts (None for missing), keyed by run id."""
    stats = runs_stats(store, run_rows)
    return {rid: {k: analysis._py(v) for k, v in rec.items()}
            for rid, rec in stats.to_dict("index").items()}


def resolve_session(store: Store, session: str | None, matrix: str | None) -> int:
    """A session id from `SESSION` (id or name) or `--matrix NAME` (its latest session)."""
    table = schema.session
    if session is not None:
        if session.isdigit():
            if store.session_row(int(session)) is None:
                raise ConfigError(f"no session {session} in {store.url}")
            return int(session)
        rows = store.fetch(select(table.c.id).where(table.c.name == session).order_by(table.c.id.desc()))
    elif matrix is not None:
        rows = store.fetch(select(table.c.id).where(table.c.matrix_name == matrix)
                           .order_by(table.c.id.desc()))
    else:
        rows = store.fetch(select(table.c.id).order_by(table.c.id.desc()).limit(1))
    if not rows:
        what = session or matrix or "any"
        raise ConfigError(f"no session {what!r} in {store.url}")
    return rows[0].id


def labelled(rows: Iterable[Any]) -> dict[int, str]:
    """Row labels: the config name (and repeat), with a dagger on runs that did not end ok."""
    out = {}
    for row in rows:
        label = row.config + (f" #{row.repeat_index + 1}" if row.repeat_index else "")
        out[row.id] = label if row.status == "ok" else f"{label} {DAGGER}"
    return out
