"""`orch tokens`: one run's chosen tokens (results/tokens.py) as markdown, csv or json."""
from __future__ import annotations

import json

import pandas as pd

from orchestrator.report.format import markdown as md
from orchestrator.report.format.formatters import number, records

HEADERS = {"token": "token", "step": "step", "wall_ms": "wall ms", "compute_ms": "compute ms",
           "io_ms": "I/O ms", "stall_ms": "stall ms", "cache_hit_pct": "cache hit",
           "read_mib": "read MiB"}
_FORMAT = {"token": number("%d"), "step": number("%d"), "wall_ms": number("%.1f"),
           "compute_ms": number("%.1f"), "io_ms": number("%.1f"), "stall_ms": number("%.1f"),
           "cache_hit_pct": number("%.1f%%"), "read_mib": number("%.1f")}


def text(tokens: pd.DataFrame, fmt: str, run_id: int) -> str:
    """The tokens as `fmt` ("md", "csv" or "json"); csv and json unformatted, with the run id
    on every row, null for not measured."""
    if fmt == "csv":
        return tokens.assign(run_id=run_id).to_csv(index=False)
    if fmt == "json":
        rows = records(tokens.assign(run_id=run_id).to_dict("records"))
        return json.dumps(rows, ensure_ascii=False, indent=1) + "\n"
    table = md.Table([HEADERS[c] for c in tokens.columns], ["---:"] * len(tokens.columns))
    for rec in tokens.to_dict("records"):
        table.rows.append([_FORMAT[c](rec[c]) for c in tokens.columns])
    return f"**Run {run_id}, tokens** (token = position in the run; read = read_bytes / 2^20):\n\n" \
        + md.render(table) + "\n"
