"""`orch table`: a stored session's per-run tables as markdown, csv or json."""
from __future__ import annotations

import json
from typing import Any

import pandas as pd

from orchestrator.db.store import Store
from orchestrator.results import tables
from orchestrator.results.formatting import records
from orchestrator.results.query import labelled, runs_stats
from orchestrator.results.values import DAGGER


def failure_line(row: Any) -> str:
    """Why a run that did not end ok is in no aggregate (the terminal and `orch table`)."""
    return (f"{DAGGER} {row.config}: {row.status}" + (f" ({row.cause})" if row.cause else "")
            + f", run {row.id}; left out of every aggregate")


def _markdown(store: Store, session_id: int, rows: list[Any], stats: pd.DataFrame,
              kinds: list[str]) -> str:
    labels = labelled(rows)
    groups = tables.by_model_and_device(rows)
    parts = []
    for (model, device), members in groups:
        if len(groups) > 1 or model != "-":
            parts.append(f"### {tables.group_title(model, device, members[0].engine)}\n")
        ids = [r.id for r in members]
        for kind in kinds:
            if kind in tables.CAPTIONS:
                parts.append(tables.CAPTIONS[kind] + "\n")
            parts.append(tables.markdown(stats.loc[ids], kind, labels))
    note = "".join(failure_line(r) + "\n" for r in rows if r.status != "ok")
    from orchestrator.results.drift import session_warnings

    warnings = "".join(f"⚠ {w}\n" for w in session_warnings(store, session_id))
    return "\n".join(parts) + ("\n" + note if note else "") + ("\n" + warnings if warnings else "")


def session_tables(store: Store, session_id: int, kinds: list[str], fmt: str = "md",
                   quantile: str = "linear") -> str:
    rows = store.runs(session_id)
    if not rows:
        return f"session {session_id} has no runs\n"
    stats = runs_stats(store, rows, quantile_method=quantile)
    if fmt == "md":
        return _markdown(store, session_id, rows, stats, kinds)
    labels = labelled(rows)
    by_id = {r.id: r for r in rows}
    frames = []
    for kind in kinds:
        frame = tables.values(stats, kind, labels)
        frame.insert(0, "table", kind)
        frame.insert(1, "run_id", list(stats.index))
        frame.insert(2, "device", [by_id[i].device for i in stats.index])
        frame.insert(3, "model", [by_id[i].model for i in stats.index])
        frame.insert(4, "status", [by_id[i].status for i in stats.index])
        frames.append(frame)
    data = pd.concat(frames, ignore_index=True)
    if fmt == "csv":
        return data.to_csv(index=False)
    return json.dumps(records(data.to_dict("records")), ensure_ascii=False, indent=1) + "\n"
