"""The report's per-turn tables of a group's session runs (report/format/turn_tables.py: the Turns and
Turn comparison tables, docs/sessions.md). A group of one-shot runs gets nothing, so a
one-shot session's document is unchanged."""
from __future__ import annotations

from typing import Any

from orchestrator.report.document.request import SectionRequest
from orchestrator.report.format import turn_tables
from orchestrator.results.report_data import Group, ReportData

TEMPLATE = "turns.md.j2"


def group_context(group: Group, data: ReportData, request: SectionRequest) -> dict[str, Any]:
    """`turns`: the group's turn tables as markdown ("" when no run of it has turns)."""
    figures = {r.id: r.figures for r in group.runs}
    configs = [(a.label or a.config, a.figures) for a in group.configs]
    return {"turns": turn_tables.markdown([(r.id, r.config_label) for r in group.runs],
                                          figures, configs)}
