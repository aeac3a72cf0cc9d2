"""The report's Comparison section (`orch report --compare`, compare_table.md.j2): the sides'
comparison that document/compare.py `section` built, passed in with the request."""
from __future__ import annotations

from typing import Any

from orchestrator.report.document.compare_plot import draw_figure
from orchestrator.report.document.request import SectionRequest
from orchestrator.results.report_data import ReportData

TEMPLATE = "compare_table.md.j2"


def context(data: ReportData, request: SectionRequest) -> dict[str, Any]:
    """The section, with its figure drawn where the report draws its own (not --no-plots)."""
    section = request.report.comparison
    if section is not None and request.report.plots:
        section = draw_figure(section, request.report.out, request.report.fmt)
    return {"comparison": section}
