"""`orch report` and `orch compare`: benchmark documents from the store.

context builds the data (runs, statistics, repeats, failures), sections and provenance turn it
into tables, plots draws the figures, render fills the Jinja2 templates of
`reports/templates/`, compare lays one matrix out side by side across devices.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from orchestrator.report.context import select_runs
    from orchestrator.report.render import render_report

__all__ = ["render_report", "select_runs"]


def __getattr__(name: str) -> Any:
    """render_report and select_runs, imported when first asked for: the terminal views
    (report/terminal.py: `orch runs`, `orch show`) are modules of this package, and importing
    the document's machinery (pandas, scipy, Jinja2) would make every short command pay it."""
    if name == "render_report":
        from orchestrator.report.render import render_report
        return render_report
    if name == "select_runs":
        from orchestrator.report.context import select_runs
        return select_runs
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
