"""The runs left out (left_out.md.j2): one line per run that did not end ok, with why; its
figures are in no aggregate (†); then one per run left out on purpose (a design's
`exclude:`, `--exclude`: results/exclude.py), with its reason and who gave it; then one per
cause of lab cells that failed before their run started (results/lab_failures.py)."""
from __future__ import annotations

from typing import Any

from orchestrator.report.document.request import SectionRequest
from orchestrator.report.format.lab_failures import failure_group_line
from orchestrator.report.format.labels import excluded_line, left_out_line
from orchestrator.report.format.markdown import md_escape
from orchestrator.results.report_data import ReportData, RunView

TEMPLATE = "left_out.md.j2"


def context(data: ReportData, request: SectionRequest) -> dict[str, Any]:
    return {"left_out": left_out(data.runs) + [excluded_line(e) for e in data.excluded]
            + [md_escape(f"lab: {failure_group_line(g)}") for g in data.lab_failed]}


def left_out(runs: list[RunView]) -> list[str]:
    return [md_escape(left_out_line(r)) for r in runs if not r.ok]

