"""The report's figures in the document: each group's (drawn by document/plots.py before the
sections, group.md.j2 links or embeds them) and the note that says why there are none
(report.md.j2: no `-o`, or no matplotlib)."""
from __future__ import annotations

from typing import Any

from orchestrator.report.document.request import SectionRequest
from orchestrator.results.report_data import Group, ReportData

TEMPLATE = "group.md.j2"


def context(data: ReportData, request: SectionRequest) -> dict[str, Any]:
    return {"plot_note": request.plot_note}


def group_context(group: Group, data: ReportData, request: SectionRequest) -> dict[str, Any]:
    return {"plots": request.figures.get(group.slug, [])}
