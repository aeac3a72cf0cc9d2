"""The per-turn tables of session runs (report/format/turn_columns.py TURNS and
TURN_COMPARISON) as markdown, and as plain rows for csv/json: `orch table`'s "turns" kind and
`orch export`'s turns. Runs without turns (one-shot runs) have no rows here, so a session of
one-shot runs prints nothing of this kind and its other tables are unchanged.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from orchestrator.report.format import markdown as md
from orchestrator.report.format.columns import TableSpec
from orchestrator.report.format.turn_columns import TURN_COMPARISON, TURNS
from orchestrator.stats.config_figures import ConfigFigures
from orchestrator.stats.figures import RunFigures
from orchestrator.stats.values import DASH

RunLabel = tuple[int, str]      # (run id, the row's config label)


def has_turns(figures: Mapping[int, RunFigures], ids: Sequence[int]) -> bool:
    return any(figures[i].turns for i in ids if i in figures)


def _table(spec: TableSpec, rows: list[tuple[str, str, Any]]) -> str:
    """rows: (config label, run id, record the spec's cells read) -> a markdown table of the
    columns some row measured (a column of dashes says nothing)."""
    shown = [c for c in spec.columns if any(c.text(rec) not in (DASH, "") for _, _, rec in rows)]
    headers = ["Config", "run", *(c.header for c in shown)]
    aligns = ["---", "---:", *(c.align for c in shown)]
    body = [[md.escape_cell(label), rid, *(md.escape_cell(c.cell(rec)) for c in shown)]
            for label, rid, rec in rows]
    return md.render(md.Table(headers, aligns, body)) + "\n"


def markdown(runs: Sequence[RunLabel], figures: Mapping[int, RunFigures],
             configs: Sequence[tuple[str, ConfigFigures]] = ()) -> str:
    """The Turns table (every turn of every session run) and the Turn comparison table (one
    row per session run, then one per config of two or more of them: `configs`, (label, its
    runs combined), whose Δ interval is over its runs: stats/config_figures.py); "" when no
    run has turns."""
    session_runs = [(rid, label) for rid, label in runs if figures[rid].turns]
    if not session_runs:
        return ""
    turn_rows = [(label, str(rid), t) for rid, label in session_runs
                 for t in figures[rid].turns or ()]
    run_rows: list[tuple[str, str, Any]] = [(label, str(rid), figures[rid])
                                            for rid, label in session_runs]
    for label, combined in configs:
        ok = [rid for rid in combined.ok if rid in figures and figures[rid].turns]
        if len(ok) >= 2:
            run_rows.append((label, f"all {len(ok)}", combined))
    return "\n".join([TURNS.caption + "\n", _table(TURNS, turn_rows),
                      TURN_COMPARISON.caption + "\n", _table(TURN_COMPARISON, run_rows)])


def rows(runs: Sequence[RunLabel], figures: Mapping[int, RunFigures]) -> list[dict[str, Any]]:
    """One plain row per turn (csv/json): the run, then every TurnFigures value unformatted
    (None: not measured)."""
    out = []
    for rid, label in runs:
        for t in figures[rid].turns or ():
            out.append({"run_id": rid, "label": label, **t.stored()})
    return out
