"""What a document is rendered with, besides its data (results/report_data.py ReportData):
`ReportRequest`, the options `orch report` passes, and `SectionRequest`, what every section's
context function receives (those options plus what render.py prepared before the sections:
the figures it drew and the traced runs' routing parts)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from orchestrator.report.document.routing import RoutingSection


@dataclass(frozen=True)
class ReportRequest:
    """How `orch report` renders a document (what it is about: results/report_data.py
    ReportData). `out`: written there, its figures in `<out stem>_files/`; `columns`: the
    throughput table's (`--columns`); `provenance_full`: user@host and absolute paths;
    `comparison`: `--compare`'s section (report/document/compare.py section), or None."""

    out: Path | None = None
    fmt: str = "md"
    template: str | Path | None = None
    plots: bool = True
    columns: list[str] | None = None
    provenance_full: bool = False
    comparison: dict[str, Any] | None = None


@dataclass(frozen=True)
class SectionRequest:
    """A section's input beyond the data: the request, the figures drawn per group (group
    slug -> figures; empty when none were drawn) with the note saying why none were, and the
    Routing section's parts (document/routing.py build: traced runs, unreadable traces)."""

    report: ReportRequest = ReportRequest()
    figures: dict[str, list[Any]] = field(default_factory=dict)
    plot_note: str | None = None
    traced: list[RoutingSection] = field(default_factory=list)
    untraceable: list[str] = field(default_factory=list)
