"""What the CLI's document commands compose: read and compute (results/), then render
(report/). A view reads no store (docs/architecture.md, "Layers"), so the reading is here,
in the thin layer that owns the store a command opened.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypedDict

from orchestrator.db.rows import RunRow
from orchestrator.db.store import Store
from orchestrator.errors import ConfigError
from orchestrator.report.document.compare import no_common_text, section
from orchestrator.report.document.render import ReportRequest, render_report
from orchestrator.results.ab import Baselines, parse_baselines, runs_where
from orchestrator.results.comparison import SideComparison, build, build_side
from orchestrator.results.exclude import split_sides
from orchestrator.results.query import Side, select_sides
from orchestrator.results.report_data import build as report_data


class ReportOptions(TypedDict):
    """`orch report`'s options as its command passes them on: report_text's `quantile` and
    `trim`, the rest ReportRequest's fields."""

    out: Path | None
    fmt: str
    template: str | None
    plots: bool
    quantile: str
    columns: list[str] | None
    provenance_full: bool
    trim: int | None
    exclude: Sequence[str]


def report_text(store: Store, rows: Sequence[RunRow], baseline: str | Baselines | None = None,
                quantile: str = "linear", trim: int | None = None,
                exclude: Sequence[str] = (), **request: Any) -> str:
    """`orch report` of these runs: its data (results/report_data.py) rendered
    (report/document/render.py; `request`: ReportRequest's fields); `exclude`: the
    `--exclude` values (results/exclude.py)."""
    plots = request.get("plots", True)
    data = report_data(store, rows, baseline=baseline, quantile=quantile, keep_frames=plots,
                       trim=trim, exclude=exclude)
    return render_report(data, ReportRequest(**request))


def comparison_of(store: Store, sessions: Sequence[str], devices: Sequence[str],
               matrix: str | None, builds: Sequence[str] = (),
               matches: Sequence[str] = (), trim: int | None = None,
               exclude: Sequence[str] = ()) -> SideComparison:
    """The sides (results/query.py: select_sides; with builds, one side per engine build:
    comparison.build_side) and their comparison; `matches`: `--match A=B` pairs. Sides with
    no config in common are refused, each side's configs listed: a table of nothing but
    one-sided rows would read as a comparison."""
    if builds:
        if sessions or len(devices) > 1:
            raise ConfigError("--builds compares builds (on one --device): no --session, "
                              "one --device at most")
        device = devices[0] if devices else None
        sides = [build_side(store, b, device, matrix) for b in builds]
    else:
        sides = select_sides(store, sessions, devices, matrix)
    sides = _without_excluded(sides, exclude)
    comp = build(store, sides, matches, trim=trim)
    if not any(len(row.on) >= 2 for row in comp.rows):
        raise ConfigError(no_common_text(comp))
    return comp



def _without_excluded(sides: Sequence[Side], exclude: Sequence[str]) -> list[Side]:
    """The sides without the runs left out on purpose (results/exclude.py), each named on
    stderr with its reason."""
    import click

    from orchestrator.escape import visible

    kept, gone = split_sides(sides, exclude)
    for label, e in gone:
        click.echo(visible(f"left out: {label}: run {e.run.id} ({e.run.config}): {e.reason}"),
                   err=True)
    return kept


def compared_report(store: Store, sessions: Sequence[str], devices: Sequence[str],
                    matrix: str | None, baselines: Sequence[str] = (), **options: Any) -> str:
    """`orch report --compare`: the report of every side's runs with the comparison as a
    section (options: report_text's; `baselines`: the `-b` choices for its A/B tables)."""
    comp = comparison_of(store, sessions, devices, matrix, trim=options.get("trim"),
                         exclude=options.get("exclude", ()))
    rows = [r for side in comp.sides for r in side.rows]
    chosen = parse_baselines(baselines, rows, runs_where(rows))
    return report_text(store, rows, baseline=chosen or None,
                       comparison=section(comp, in_report=True), **options)
