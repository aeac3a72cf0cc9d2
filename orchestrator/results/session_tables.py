"""A stored session as tables (`orch table`) and as files (`orch export`)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from orchestrator.db.store import Store
from orchestrator.results import tables
from orchestrator.results.query import DAGGER, labelled, runs_stats


def _groups(rows: list[Any]) -> list[tuple[str, list[Any]]]:
    """Runs grouped by (device, model) in run order: one set of tables per group."""
    groups: dict[tuple[str, str], list[Any]] = {}
    for row in rows:
        groups.setdefault((row.device, row.model or "-"), []).append(row)
    multi = len(groups) > 1
    out = []
    for (device, model), members in groups.items():
        title = f"{model} on {device}" if model != "-" else device
        out.append((title if multi or model != "-" else "", members))
    return out


def failures_note(rows: list[Any]) -> str:
    bad = [r for r in rows if r.status != "ok"]
    if not bad:
        return ""
    lines = [f"{DAGGER} {r.config}: {r.status}" + (f" ({r.cause})" if r.cause else "")
             + f", run {r.id}; left out of every aggregate" for r in bad]
    return "\n".join(lines) + "\n"


def session_tables(store: Store, session_id: int, kinds: list[str], fmt: str = "md",
                   quantile: str = "linear") -> str:
    rows = store.runs(session_id)
    if not rows:
        return f"session {session_id} has no runs\n"
    stats = runs_stats(store, rows, quantile_method=quantile)
    labels = labelled(rows)
    if fmt == "md":
        parts = []
        for title, members in _groups(rows):
            if title:
                parts.append(f"### {title}\n")
            ids = [r.id for r in members]
            for kind in kinds:
                if kind in tables.CAPTIONS:
                    parts.append(tables.CAPTIONS[kind] + "\n")
                parts.append(tables.markdown(stats.loc[ids], kind, labels))
        note = failures_note(rows)
        from orchestrator.results.drift import session_warnings

        warnings = "".join(f"⚠ {w}\n" for w in session_warnings(store, session_id))
        return "\n".join(parts) + ("\n" + note if note else "") + ("\n" + warnings if warnings else "")
    records = []
    by_id = {r.id: r for r in rows}
    for kind in kinds:
        frame = tables.values(stats, kind, labels)
        frame.insert(0, "table", kind)
        frame.insert(1, "run_id", list(stats.index))
        frame.insert(2, "device", [by_id[i].device for i in stats.index])
        frame.insert(3, "model", [by_id[i].model for i in stats.index])
        frame.insert(4, "status", [by_id[i].status for i in stats.index])
        records.append(frame)
    data = pd.concat(records, ignore_index=True)
    if fmt == "csv":
        return data.to_csv(index=False)
    clean = json.loads(data.to_json(orient="records"))
    return json.dumps(clean, ensure_ascii=False, indent=1) + "\n"


def export_session(store: Store, session_id: int, out_dir: Path, fmt: str) -> list[Path]:
    """runs.<ext> (with the per-run statistics), tokens.<ext>, samples.<ext>."""
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = store.runs(session_id, include_superseded=True)
    run_frame = pd.DataFrame([dict(r._mapping) for r in rows])
    current = [r for r in rows if not r.superseded]
    stats = runs_stats(store, current).add_prefix("stat_")
    if len(run_frame):
        run_frame = run_frame.merge(stats, left_on="id", right_index=True, how="left")
        for column in ("argv", "summary", "warnings", "temp_start"):
            if column in run_frame:
                run_frame[column] = run_frame[column].map(
                    lambda v: None if v is None else json.dumps(v, ensure_ascii=False))
    ids = [r.id for r in rows]
    frames = {"runs": run_frame, "tokens": store.frame("token", ids),
              "samples": store.frame("sample", ids)}
    written = []
    for name, frame in frames.items():
        for column in ("extra",):
            if column in frame:
                frame[column] = frame[column].map(lambda v: None if v is None else json.dumps(v))
        path = out_dir / f"{name}.{fmt}"
        if fmt == "csv":
            frame.to_csv(path, index=False)
        elif fmt == "json":
            frame.to_json(path, orient="records", date_format="iso", indent=1)
        else:
            frame.to_parquet(path, index=False)
        written.append(path)
    return written
