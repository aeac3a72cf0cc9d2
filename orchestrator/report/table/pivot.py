"""`orch table --pivot model`: results/pivot.py's rows as markdown (one table per device),
csv or json (one record per row and model)."""
from __future__ import annotations

import json
from typing import Any

import pandas as pd

from orchestrator.report.format import markdown as md
from orchestrator.report.format.cells import id_list
from orchestrator.report.format.formatters import STATS, records
from orchestrator.results.pivot import Pivot, PivotRow
from orchestrator.stats.values import DASH

CAPTION = ("**Models side by side** (mean decode tok/s of each config's ok runs; a row pairs "
           "configs of the same name, else the same settings apart from the model's own, "
           "else the same design label):")


def _row_name(row: PivotRow) -> str:
    return " / ".join(row.names)


def markdown(pivot: Pivot) -> str:
    headers = ["Config", "matched by"] + [f"{m} tok/s" for m in pivot.models] + ["run ids"]
    table = md.Table([md.md_escape(h) for h in headers],
                     ["---", "---"] + ["---:"] * len(pivot.models) + ["---"])
    for row in pivot.rows:
        cells = [md.md_escape(_row_name(row)), row.matched_by or DASH]
        for model in pivot.models:
            cell = row.cells.get(model)
            cells.append(DASH if cell is None else STATS["mean"].fmt(cell.mean))
        ids = [i for c in row.cells.values() for i in c.run_ids]
        cells.append(id_list(ids))
        table.rows.append(cells)
    return f"### {md.md_escape(pivot.device)}\n\n{CAPTION}\n\n{md.render(table)}\n"


def _records(found: list[Pivot]) -> list[dict[str, Any]]:
    return [{"table": "pivot", "device": p.device, "row": _row_name(row),
             "matched_by": row.matched_by or None, "model": cell.model, "config": cell.config,
             "mean": cell.mean, "runs": len(cell.run_ids), "run_ids": list(cell.run_ids)}
            for p in found for row in p.rows for cell in row.cells.values()]


def pivot_text(found: list[Pivot] | None, session_id: int, fmt: str = "md") -> str:
    """The pivot of a stored session (results/pivot.py session_pivots: None for a session
    without runs) as markdown, csv or json."""
    if found is None:
        return f"session {session_id} has no runs\n"
    if fmt == "md":
        return "\n".join(markdown(p) for p in found)
    out = records(_records(found))
    if fmt == "csv":
        return pd.DataFrame(out).to_csv(index=False)
    return json.dumps(out, ensure_ascii=False, indent=1) + "\n"
