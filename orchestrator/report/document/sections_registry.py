"""The document's sections, in ONE list: each entry is a section module's template and the
functions that fill that template's names. render.py `render_report` builds the context by
going down SECTIONS: `context(data, request)` adds names for the whole document, and
`group_context(group, data, request)` adds names to each (model, device) group's dict (the
`g` of group.md.j2).

Adding a section: a module here with `TEMPLATE` and `context` or `group_context` (returning
the names its template reads; a section with nothing to show returns its names empty, and
its template prints nothing for them), one line in SECTIONS, and its template in
reports/templates/, included where it goes in the document (report.md.j2, or group.md.j2
for a part of each group). Where a section sits in the document is the templates' to say,
so a user's `--template` directory can move it; which names it fills is this list's.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from orchestrator.report.document import (
    ab,
    ceilings,
    comparison,
    design,
    environment,
    figures,
    findings,
    group_tables,
    header,
    left_out,
    model_facts,
    provenance,
    quality,
    regressions,
    reproduce,
    routing,
    turns,
    warnings,
)
from orchestrator.report.document.request import SectionRequest
from orchestrator.results.report_data import Group, ReportData

DocumentContext = Callable[[ReportData, SectionRequest], dict[str, Any]]
GroupContext = Callable[[Group, ReportData, SectionRequest], dict[str, Any]]


@dataclass(frozen=True)
class Section:
    """A section: the template that prints it, and its names for the whole document
    (`context`), for each group (`group_context`), or both."""

    template: str
    context: DocumentContext | None = None
    group_context: GroupContext | None = None


SECTIONS: tuple[Section, ...] = (
    Section(header.TEMPLATE, context=header.context),
    Section(environment.TEMPLATE, context=environment.context),
    Section(design.TEMPLATE, context=design.context, group_context=design.group_context),
    Section(model_facts.TEMPLATE, group_context=model_facts.group_context),
    Section(group_tables.TEMPLATE, context=group_tables.context,
            group_context=group_tables.group_context),
    Section(ceilings.TEMPLATE, group_context=ceilings.group_context),
    Section(turns.TEMPLATE, group_context=turns.group_context),
    Section(warnings.TEMPLATE, group_context=warnings.group_context),
    Section(ab.TEMPLATE, group_context=ab.group_context),
    Section(quality.TEMPLATE, group_context=quality.group_context),
    Section(figures.TEMPLATE, context=figures.context, group_context=figures.group_context),
    Section(findings.TEMPLATE, context=findings.context),
    Section(routing.TEMPLATE, context=routing.context),
    Section(regressions.TEMPLATE, context=regressions.context),
    Section(comparison.TEMPLATE, context=comparison.context),
    Section(reproduce.TEMPLATE, context=reproduce.context),
    Section(left_out.TEMPLATE, context=left_out.context),
    Section(provenance.TEMPLATE, context=provenance.context),
)
