"""The report's Comparison section (`orch report --compare`, compare_table.md.j2): the sides'
comparison that document/compare.py `section` built, passed in with the request."""
from __future__ import annotations

from typing import Any

from orchestrator.report.document.request import SectionRequest
from orchestrator.results.report_data import ReportData

TEMPLATE = "compare_table.md.j2"


def context(data: ReportData, request: SectionRequest) -> dict[str, Any]:
    return {"comparison": request.report.comparison}
