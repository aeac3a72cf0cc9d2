"""`orch compare` and the report's comparison section: the sides' mean tok/s per config with
95% intervals, and each side's ratio to the reference (the first side) with its interval,
p-value, Holm-corrected p-value and verdict (the numbers: results/comparison.py); beside them
what else differs between the matched configs, the devices' facts and the other headline
figures (compare_beside.py), and a figure of the ratios (compare_plot.py). Rendered as a rich
table on the terminal, markdown (compare.md.j2 / compare_table.md.j2), csv or json.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd
from jinja2 import TemplateError
from rich.console import Console
from rich.table import Table as RichTable
from rich.text import Text

from orchestrator.report.document import compare_beside as beside
from orchestrator.report.document import compare_plot
from orchestrator.report.document import render
from orchestrator.report.document.compare_columns import TEXT_COLUMNS, cell_rows, config_text
from orchestrator.report.format.cells import id_list
from orchestrator.report.format.formatters import when
from orchestrator.report.format.markdown import Table, md_escape
from orchestrator.report.format.labels import failure_line
from orchestrator.results.comparison import (
    Absence,
    ConfigRow,
    SideComparison,
    absence_records,
    records,
)
from orchestrator.results.confounds import Difference
from orchestrator.results.query import Side
from orchestrator.stats.uncertainty import ALPHA, CONFIDENCE
from orchestrator.stats.values import DASH

# ---- the table (its columns: compare_columns.py) -------------------------------------------

def only_lines(comp: SideComparison) -> list[str]:
    """Plain lines: the configs each side has alone (no ratio for them)."""
    lines = []
    for side_index, side in enumerate(comp.sides):
        names = [_name(r) for r in comp.only if r.present == [side_index]]
        if names:
            lines.append(f"Only on {side.label}: {', '.join(names)}")
    for i, side in enumerate(comp.sides):
        # a config whose runs failed is not a config that never ran: said apart
        failed = [f"{_name(r)} (runs {id_list(r.failed[i])})" for r in comp.only
                  if r.absence(i) is Absence.FAILED]
        if failed:
            lines.append(f"Failed on {side.label}, not missing (the others above never ran "
                         f"there): {', '.join(failed)}")
    return lines


def _name(row: ConfigRow) -> str:
    return config_text(row) if row.model == "-" else f"{row.model} {config_text(row)}"


def left_out_lines(comp: SideComparison) -> list[str]:
    """Plain lines: the runs that did not end ok, in no figure."""
    return [f"{side.label}: {failure_line(row)}" for side, row in comp.left_out]


def markdown_table(comp: SideComparison, keys: Sequence[str] | None = None) -> Table:
    cols, rows = cell_rows(comp, keys)
    table = Table([md_escape(f"{g} {n}".strip()) for g, n in cols],
                  ["---" if (g, n) in TEXT_COLUMNS else "---:" for g, n in cols])
    table.rows = [[md_escape(c) for c in r] for r in rows]
    return table


def print_rich(console: Console, comp: SideComparison, title: str,
               keys: Sequence[str] | None = None) -> None:
    cols, rows = cell_rows(comp, keys)
    table = RichTable(title=title, title_justify="left")
    for group, name in cols:
        table.add_column(Text(f"{group}\n{name}" if group else name),
                         justify="left" if (group, name) in TEXT_COLUMNS else "right")
    for row in rows:
        table.add_row(*(Text(c) for c in row))     # Text: no rich markup from config names
    console.print(table)
    differences = beside.difference_lines(comp)
    if differences:
        console.print(Text(beside.DIFFERS_NOTE))
        for line in differences:
            console.print(Text(f"  {line}"))
    for line in only_lines(comp) + left_out_lines(comp):
        console.print(Text(line))
    _print_beside(console, comp)


def _print_beside(console: Console, comp: SideComparison) -> None:
    """The devices' facts and the other headline figures, as rich tables."""
    for title, (headers, rows) in (("devices", beside.device_rows(comp)),
                                   ("headline figures, each side against the first "
                                    "(its interval in brackets)", beside.figure_rows(comp))):
        if not rows:
            continue
        table = RichTable(title=title, title_justify="left")
        for h in headers:
            table.add_column(Text(h))
        for row in rows:
            table.add_row(*(Text(c) for c in row))
        console.print(table)


def sides_lines(sides: Sequence[Side]) -> list[str]:
    """Plain text: what each side is (session, device, matrix, when, runs)."""
    out = []
    for side in sides:
        s = side.session
        what = s.matrix_name or s.name or DASH
        # an imported session's start is the import, not the measurement
        start = (f"imported {when(s.started_at)} UTC" if s.kind == "import"
                 else f"started {when(s.started_at)} UTC")
        session = "" if f"session {s.id}" in side.label else f"session {s.id}, "
        out.append(f"{side.label}: {session}{what} on {side.device}, {start}, "
                   f"{len(side.rows)} run(s)")
    return out


def section(comp: SideComparison, in_report: bool = False,
            keys: Sequence[str] | None = None) -> dict[str, Any]:
    """The context of compare_table.md.j2: the body of `orch compare`'s markdown, and the
    report's comparison section (in_report: says when the report's tables pool two sides).
    `keys`: the table's columns (compare_columns.py; None: the default). `figure` is the
    comparison's figure once drawn (compare_plot.draw_figure); `comp` stays for drawing it."""
    tests = sum(1 for r in comp.rows for c in r.vs_reference
                if c is not None and c.p_value is not None)
    return {"sides": [md_escape(x) for x in sides_lines(comp.sides)],
            "reference": md_escape(comp.reference.label),
            "table": markdown_table(comp, keys),
            "confidence": round(CONFIDENCE * 100), "alpha": ALPHA, "tests": tests,
            "only": [md_escape(x) for x in only_lines(comp)],
            "shared": [md_escape(x) for x in shared_lines(comp)] if in_report else [],
            "differs_note": md_escape(beside.DIFFERS_NOTE),
            "differences": [md_escape(x) for x in beside.difference_lines(comp)],
            "devices": beside.devices_table(comp), "figures": beside.figures_table(comp),
            "figure": None, "figure_note": None, "comp": comp}


def shared_lines(comp: SideComparison) -> list[str]:
    """Sides on one device: a report's per-device tables pool their runs, this table not."""
    by_device: dict[str, list[str]] = {}
    for side in comp.sides:
        by_device.setdefault(side.device, []).append(side.label)
    return [f"{' and '.join(labels)} ran on {device}: the report's tables of {device} pool "
            f"their runs; this comparison keeps them apart"
            for device, labels in by_device.items() if len(labels) > 1]


# ---- entry points ------------------------------------------------------------------------

def no_common_text(comp: SideComparison) -> str:
    """The refusal of sides with no config in common: one line, then each side's configs."""
    lines = [("no config in common between the sides: pair them with --match A=B "
              "(A of the first side, B of another)")]
    for i, side in enumerate(comp.sides):
        names = [_name(r) for r in comp.rows if i in r.on]
        lines.append(f"  {side.label}: {', '.join(names) or '(no runs)'}")
    return "\n".join(lines)


def all_records(comp: SideComparison) -> list[dict[str, Any]]:
    """records() with what is read beside the ratios: per config record its `differs` (what
    else differs: key, reference, other) and its other headline figures
    (compare_beside.figure_fields)."""
    out = records(comp)
    by_pair = {(row.model, row.config, other.label): (diffs, figs)
               for row in comp.rows
               for other, diffs, figs in zip(comp.others, row.differs or [[]] * len(comp.others),
                                             row.figures or [[]] * len(comp.others))}
    for rec in out:
        diffs, figs = by_pair.get((rec["model"], rec["config"], rec["other"]), ([], []))
        if rec["kind"] == "config":
            rec["differs"] = [_difference(d) for d in diffs]
            rec.update(beside.figure_fields(figs))
    return out


def _difference(d: Difference) -> dict[str, str]:
    return {"key": d.key, "reference": d.reference, "other": d.other}


def text(comp: SideComparison, fmt: str, template: str | Path | None = None,
         keys: Sequence[str] | None = None, doc: Path | None = None) -> str:
    """The comparison as markdown (compare.md.j2; its figure beside `doc`), csv or json."""
    if fmt == "json":
        return json.dumps(all_records(comp) + absence_records(comp)
                          + beside.device_records(comp), ensure_ascii=False, indent=1,
                          default=str) + "\n"
    if fmt == "csv":
        rows = all_records(comp)
        for rec in rows:      # one cell: "cache_mb 3000 vs 2000; tokens 1,354 vs 256"
            if "differs" in rec:
                rec["differs"] = "; ".join(f"{d['key']} {d['reference']} vs {d['other']}"
                                           for d in rec["differs"])
        return pd.DataFrame(rows).to_csv(index=False)
    env, user_main = render.environment(template)
    try:
        return env.get_template(user_main or "compare.md.j2").render(
            title=md_escape(title(comp)),
            comparison=compare_plot.draw_figure(section(comp, keys=keys), doc, fmt),
            left_out=[md_escape(x) for x in left_out_lines(comp)])
    except TemplateError as exc:
        raise render.template_error(exc) from None


def title(comp: SideComparison) -> str:
    return " vs ".join(side.label for side in comp.sides)


def compare(comp: SideComparison, fmt: str | None = None, out: Path | None = None,
            console: Console | None = None, template: str | Path | None = None,
            keys: Sequence[str] | None = None) -> str | None:
    """`orch compare`: with no format, the rich table on `console` (and markdown to `out`);
    with one, that text, written to `out` or returned for stdout. `keys`: `--columns`."""
    if fmt is None and console is not None:
        print_rich(console, comp, f"mean tok/s: {title(comp)}", keys)
    result = (text(comp, fmt or "md", template, keys, out)
              if fmt is not None or out is not None else None)
    if out is not None and result is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(result, encoding="utf-8")
        return None
    return result
