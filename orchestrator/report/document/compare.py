"""`orch compare` and the report's comparison section: the sides' mean tok/s per config with
95% intervals, and each side's ratio to the reference (the first side) with its interval,
p-value, Holm-corrected p-value and verdict (the numbers: results/comparison.py). Rendered as
a rich table on the terminal, markdown (compare.md.j2 / compare_table.md.j2), csv or json.
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

from orchestrator.report.format import ab_rows as ab_table
from orchestrator.report.document import render
from orchestrator.report.format.cells import id_list, interval_cell, mean_cell, verdict_cell
from orchestrator.report.format.formatters import ratio, when
from orchestrator.report.format.markdown import Table, md_escape
from orchestrator.report.format.labels import failure_line
from orchestrator.results.comparison import (
    Absence,
    ConfigRow,
    SideComparison,
    absence_records,
    records,
)
from orchestrator.results.query import Side
from orchestrator.stats.uncertainty import ALPHA, CONFIDENCE
from orchestrator.stats.values import DASH

# ---- cells (the A/B tables' cell formats, results/ab.py, so both read alike) -------------



# ---- the table ---------------------------------------------------------------------------

def columns(comp: SideComparison) -> list[tuple[str, str]]:
    """(group, name) of every column: the group is a side or a pair of sides."""
    cols = [("", "Model"), ("", "Config")]
    for side in comp.sides:
        cols += [(side.label, "tok/s [95% CI]"), (side.label, "run ids")]
    ref = comp.reference.label
    for other in comp.others:
        pair = f"{other.label}/{ref}"
        cols += [(pair, "ratio"), (pair, "95% CI"), (pair, "p"), (pair, "p (Holm)"),
                 (pair, "verdict")]
    return cols


def _config_text(row: ConfigRow) -> str:
    """The config's name, and the other sides' own names where --match paired them:
    "anon-long ↔ dense_weights=anon"."""
    others = [m for m in dict.fromkeys(row.matched) if m and m != row.config]
    return " ↔ ".join([row.config] + others)


def _row_cells(row: ConfigRow) -> list[str]:
    cells = [row.model, _config_text(row)]
    for interval, ids in zip(row.means, row.run_ids):
        cells += [mean_cell(interval), id_list(ids) if ids else DASH]
    for c in row.vs_reference:
        cells += [ratio(c.ratio if c is not None else None), interval_cell(c),
                  ab_table.p_cell(c.p_value if c is not None else None),
                  ab_table.p_cell(c.p_adjusted if c is not None else None), verdict_cell(c)]
    return cells


def _summary_cells(comp: SideComparison) -> list[str]:
    counts = set(comp.summary_configs)
    label = (f"geometric mean ({counts.pop()} configs)" if len(counts) == 1
             else "geometric mean")
    cells = ["", label] + [DASH, DASH] * len(comp.sides)
    for value in comp.summary:
        cells += [ratio(value), DASH, DASH, DASH, DASH]
    return cells


def cell_rows(comp: SideComparison) -> tuple[list[tuple[str, str]], list[list[str]]]:
    """(columns, rows) as plain text: the matched configs, then the geometric-mean summary.
    The Model column goes when no run names a model."""
    cols = columns(comp)
    rows = [_row_cells(r) for r in comp.matched]
    if comp.matched:
        rows.append(_summary_cells(comp))
    if all(r.model == "-" for r in comp.rows):
        cols, rows = cols[1:], [r[1:] for r in rows]
    return cols, rows


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
    return _config_text(row) if row.model == "-" else f"{row.model} {_config_text(row)}"


def left_out_lines(comp: SideComparison) -> list[str]:
    """Plain lines: the runs that did not end ok, in no figure."""
    return [f"{side.label}: {failure_line(row)}" for side, row in comp.left_out]


def markdown_table(comp: SideComparison) -> Table:
    cols, rows = cell_rows(comp)
    text_cols = sum(1 for g, _ in cols if not g)
    table = Table([md_escape(f"{g} {n}".strip()) for g, n in cols],
                  ["---"] * text_cols + ["---:"] * (len(cols) - text_cols))
    table.rows = [[md_escape(c) for c in r] for r in rows]
    return table


def print_rich(console: Console, comp: SideComparison, title: str) -> None:
    cols, rows = cell_rows(comp)
    table = RichTable(title=title, title_justify="left")
    for group, name in cols:
        table.add_column(Text(f"{group}\n{name}" if group else name),
                         justify="right" if group else "left")
    for row in rows:
        table.add_row(*(Text(c) for c in row))     # Text: no rich markup from config names
    console.print(table)
    for line in only_lines(comp) + left_out_lines(comp):
        console.print(Text(line))


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


def section(comp: SideComparison, in_report: bool = False) -> dict[str, Any]:
    """The context of compare_table.md.j2: the body of `orch compare`'s markdown, and the
    report's comparison section (in_report: says when the report's tables pool two sides)."""
    tests = sum(1 for r in comp.rows for c in r.vs_reference
                if c is not None and c.p_value is not None)
    return {"sides": [md_escape(x) for x in sides_lines(comp.sides)],
            "reference": md_escape(comp.reference.label), "table": markdown_table(comp),
            "confidence": round(CONFIDENCE * 100), "alpha": ALPHA, "tests": tests,
            "only": [md_escape(x) for x in only_lines(comp)],
            "shared": [md_escape(x) for x in shared_lines(comp)] if in_report else []}


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


def text(comp: SideComparison, fmt: str, template: str | Path | None = None) -> str:
    """The comparison as markdown (compare.md.j2), csv or json."""
    if fmt == "json":
        return json.dumps(records(comp) + absence_records(comp), ensure_ascii=False,
                          indent=1) + "\n"
    if fmt == "csv":
        return pd.DataFrame(records(comp)).to_csv(index=False)
    env, user_main = render.environment(template)
    try:
        return env.get_template(user_main or "compare.md.j2").render(
            title=md_escape(title(comp)), comparison=section(comp),
            left_out=[md_escape(x) for x in left_out_lines(comp)])
    except TemplateError as exc:
        raise render.template_error(exc) from None


def title(comp: SideComparison) -> str:
    return " vs ".join(side.label for side in comp.sides)


def compare(comp: SideComparison, fmt: str | None = None, out: Path | None = None,
            console: Console | None = None, template: str | Path | None = None) -> str | None:
    """`orch compare`: with no format, the rich table on `console` (and markdown to `out`);
    with one, that text, written to `out` or returned for stdout."""
    if fmt is None and console is not None:
        print_rich(console, comp, f"mean tok/s: {title(comp)}")
    result = text(comp, fmt or "md", template) if fmt is not None or out is not None else None
    if out is not None and result is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(result, encoding="utf-8")
        return None
    return result
