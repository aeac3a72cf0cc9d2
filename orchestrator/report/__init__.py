"""`orch report` and `orch compare`: benchmark documents from the store.

context builds the data (runs, statistics, repeats, failures), sections and provenance turn it
into tables, plots draws the figures, render fills the Jinja2 templates of
`reports/templates/`, compare lays one matrix out side by side across devices.
"""
from __future__ import annotations

from orchestrator.report.context import select_runs
from orchestrator.report.render import render_report

__all__ = ["render_report", "select_runs"]
