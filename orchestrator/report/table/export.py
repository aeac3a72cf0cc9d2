"""`orch export`: a stored session as files, runs.<ext> (with the per-run statistics),
tokens.<ext> and samples.<ext> (and turns.<ext>, one row per turn, for session runs), in csv, json or parquet. Structured run columns (argv,
summary, warnings, temp_start, settings) are JSON text in every format, so each file holds
one flat table.

Paths follow report/format/paths.py's rule: by default relative to the study folder (an import's
`source_file`, a live run's paths against its matrix's folder) or by file name; `full` keeps
the absolute paths as stored."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from orchestrator.report.format.paths import Paths, base_of
from orchestrator.results.export import SessionExport


def export_session(data: SessionExport, out_dir: Path, fmt: str,
                   full: bool = False) -> list[Path]:
    """Write the session's tables (results/export.py) to `out_dir`; returns the paths
    written. `full`: absolute paths as stored (`--provenance full`)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = data.rows
    paths, base = Paths(full), base_of(data.session)
    # settings: an import's flags parsed (null for a live run); time_source and source_file
    # come with the stored columns
    run_frame = pd.DataFrame([{**_shown(r.as_dict(), paths, base), "settings": r.settings}
                              for r in rows])
    # a session run's turns go to a table of their own (turns.<ext>, one row per turn)
    turns = data.figures["turns"] if "turns" in data.figures else pd.Series(dtype=object)
    stats = data.figures.drop(columns=["turns"], errors="ignore").add_prefix("stat_")
    if len(run_frame):
        run_frame = run_frame.merge(stats, left_on="id", right_index=True, how="left")
        for column in ("argv", "summary", "warnings", "temp_start", "settings"):
            if column in run_frame:
                run_frame[column] = run_frame[column].map(
                    lambda v: None if v is None else json.dumps(v, ensure_ascii=False))
    frames = {"runs": run_frame, "tokens": data.tokens, "samples": data.samples}
    turn_rows = [{"run_id": rid, **t.stored()} for rid, ts in turns.items()
                 if isinstance(ts, tuple) for t in ts]
    if turn_rows:
        frames["turns"] = pd.DataFrame(turn_rows)
    written = []
    for name, frame in frames.items():
        if "extra" in frame:
            frame["extra"] = frame["extra"].map(lambda v: None if v is None else json.dumps(v))
        path = out_dir / f"{name}.{fmt}"
        if fmt == "csv":
            frame.to_csv(path, index=False)
        elif fmt == "json":
            # pandas rounds to 10 decimals by default: an export keeps what the store holds
            frame.to_json(path, orient="records", date_format="iso", indent=1,
                          double_precision=15)
        else:
            frame.to_parquet(path, index=False)
        written.append(path)
    return written


def _shown(run: dict, paths: Paths, base: str | None) -> dict:
    """A run's stored columns with its paths as `paths` shows them."""
    out = dict(run)
    for key in ("remote_dir", "binary_path"):
        out[key] = paths.path(out.get(key), base) or out.get(key)
    out["flags"] = paths.text(out.get("flags"), base)
    out["argv"] = paths.argv(out.get("argv"), base)
    return out
