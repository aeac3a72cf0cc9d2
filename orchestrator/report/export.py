"""`orch export`: a stored session as files, runs.<ext> (with the per-run statistics),
tokens.<ext> and samples.<ext>, in csv, json or parquet. Structured run columns (argv,
summary, warnings, temp_start, settings) are JSON text in every format, so each file holds
one flat table."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from orchestrator.db.runs import Runs
from orchestrator.db.store import Store


def export_session(store: Store, session_id: int, out_dir: Path, fmt: str) -> list[Path]:
    """Write the session's three tables to `out_dir`; returns the paths written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = store.runs(session_id, include_superseded=True)
    # settings: an import's flags parsed (null for a live run); time_source and source_file
    # come with the stored columns
    run_frame = pd.DataFrame([{**r.as_dict(), "settings": r.settings} for r in rows])
    current = [r for r in rows if not r.superseded]
    stats = Runs(store).stats(current).add_prefix("stat_")
    if len(run_frame):
        run_frame = run_frame.merge(stats, left_on="id", right_index=True, how="left")
        for column in ("argv", "summary", "warnings", "temp_start", "settings"):
            if column in run_frame:
                run_frame[column] = run_frame[column].map(
                    lambda v: None if v is None else json.dumps(v, ensure_ascii=False))
    ids = [r.id for r in rows]
    frames = {"runs": run_frame, "tokens": store.frame("token", ids),
              "samples": store.frame("sample", ids)}
    written = []
    for name, frame in frames.items():
        if "extra" in frame:
            frame["extra"] = frame["extra"].map(lambda v: None if v is None else json.dumps(v))
        path = out_dir / f"{name}.{fmt}"
        if fmt == "csv":
            frame.to_csv(path, index=False)
        elif fmt == "json":
            frame.to_json(path, orient="records", date_format="iso", indent=1)
        else:
            frame.to_parquet(path, index=False)
        written.append(path)
    return written
