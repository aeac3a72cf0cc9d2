"""A group's warnings (group.md.j2): the caveats results/ found about the group's runs (drift,
load, validity: results/drift.py), next to the rows they concern."""
from __future__ import annotations

from typing import Any

from orchestrator.report.document.request import SectionRequest
from orchestrator.results.report_data import Group, ReportData

TEMPLATE = "group.md.j2"


def group_context(group: Group, data: ReportData, request: SectionRequest) -> dict[str, Any]:
    return {"warnings": [c for c in data.caveats if (c.model, c.device) == (group.model, group.device)]}
