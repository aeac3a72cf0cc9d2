"""What an import's design file (config/design.py) adds to the document, written by
format/design_notes.py: the session notes (header.md.j2, under the description), the Configs
legend (report.md.j2, before the first group) and, per group, its model's note (above its
tables) and the notes on its configs (under them)."""
from __future__ import annotations

from typing import Any

from orchestrator.report.document.request import SectionRequest
from orchestrator.report.format import design_notes
from orchestrator.results.report_data import Group, ReportData

TEMPLATE = "report.md.j2"


def context(data: ReportData, request: SectionRequest) -> dict[str, Any]:
    return {"design": design_document(data)}


def group_context(group: Group, data: ReportData, request: SectionRequest) -> dict[str, Any]:
    return design_group(data, group)


def design_group(data: ReportData, group: Group) -> dict[str, Any]:
    """A group's model note (above its tables) and the notes on its configs (under them),
    from the design files of the group's sessions."""
    designs = [data.designs.get(sid) for sid in dict.fromkeys(r.row.session_id for r in group.runs)]
    labels = {a.config: a.label or a.config for a in group.configs}
    return {"model_note": design_notes.model_note(designs, group.model),
            "config_notes": design_notes.config_notes(designs, list(labels), group.model,
                                                      labels)}


def design_document(data: ReportData) -> dict[str, Any]:
    """The session notes (under the description) and the Configs legend (before the first
    group's tables)."""
    designs = list(data.designs.values())
    return {"session_notes": design_notes.session_notes(designs),
            "legend": design_notes.legend(designs, data.config_order),
            "legend_caption": design_notes.LEGEND_CAPTION}
