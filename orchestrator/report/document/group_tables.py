"""The result tables of a report, per (model, device) group: throughput, its detail, and
device pressure (the A/B table is document/ab.py).

The throughput, detail and pressure columns are report/format/columns.py's REPORT_THROUGHPUT,
REPORT_DETAIL and REPORT_PRESSURE (`--columns` picks the throughput table's from the first
two). Rows follow the author's order and carry the configs' labels (results/rows.py); the
configs a design left out on purpose are notes under the throughput table. Every row carries
a `run ids` cell with the ids it was computed from (see Provenance),
and runs that did not end ok get their own daggered row, never a share of an aggregate.
Overlap configs carry a mark (‡) on their compute + I/O cell, whose meaning the note under
the table gives; a serial config's stall is "—" (its RunFigures have none: stats/overlap.py).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from orchestrator.report.format import ab_rows as ab_rows
from orchestrator.report.format import design_notes
from orchestrator.report.document.request import SectionRequest
from orchestrator.report.format.cells import OVERLAP_NOTE, RUN_IDS, id_list, overlap_marked
from orchestrator.report.format.columns import (
    ADAPTIVE,
    DECODE_SPLIT,
    REPORT_DETAIL,
    REPORT_PRESSURE,
    REPORT_THROUGHPUT,
    TableSpec,
    pick,
)
from orchestrator.report.format.labels import run_label
from orchestrator.report.format.markdown import Table, md_escape
from orchestrator.report.format.within_cells import trim_header, with_trim
from orchestrator.results.report_data import (
    Group,
    ReportData,
)
from orchestrator.stats.config_figures import Spread
from orchestrator.stats.values import is_missing

CAPTIONS = {
    "throughput": REPORT_THROUGHPUT.caption,
    "detail": REPORT_DETAIL.caption,
    "pressure": REPORT_PRESSURE.caption,
    "adaptive": ADAPTIVE.caption,
    "ab": ab_rows.CAPTION,
}
TEMPLATE = "group.md.j2"


def context(data: ReportData, request: SectionRequest) -> dict[str, Any]:
    """The tables' captions (the throughput and detail captions name the trim)."""
    return {"captions": {k: with_trim(v, data.trim) if k in ("throughput", "detail") else v
                         for k, v in CAPTIONS.items()}}


def group_context(group: Group, data: ReportData, request: SectionRequest) -> dict[str, Any]:
    """A group's throughput, detail and device-pressure tables."""
    pressure_table = pressure(group)
    through = throughput(group, request.report.columns, data.trim)
    through.notes += design_notes.left_out_notes(group.left_out)    # beside the rows run
    return {"throughput": through,
            "detail": detail(group, request.report.columns, data.trim),
            "pressure": pressure_table, "pressure_caption": pressure_caption(pressure_table),
            # the engine's adaptive-cache and speculative-gating summary, where a run printed it
            # (the study's third table; columns no row has are left out, as everywhere)
            "adaptive": adaptive(group)}


Row = tuple[str, Mapping[str, Any], Spread | None, list[int], bool | None]


def _rows(group: Group) -> list[Row]:
    """(label, values, spread, run ids, overlap): one row per config with ok runs, then one
    daggered row per run that did not end ok, right under its config. The figures are the
    model's (ConfigFigures, RunFigures): a serial run's stall is already not measured."""
    out: list[Row] = []
    for agg in group.configs:
        if agg.runs:
            out.append((md_escape(agg.label or agg.config), agg.values, agg.spread, agg.ids,
                        agg.figures.overlapped))
        for bad in agg.bad:
            out.append((md_escape(run_label(bad)), bad.figures.as_dict(), None, [bad.id],
                        bad.figures.overlapped))
    return out


def _table(group: Group, spec: TableSpec, mark_overlap: bool = False, trim: int = 0) -> Table:
    summary = any(values.get("summary_only") for _, values, _, _, _ in _rows(group))
    # s/token: the figure of a summary-only run's row (columns.THROUGHPUT), only beside one
    cols = tuple(c for c in spec.columns if summary or not c.summary)
    table = Table(["Config"] + [trim_header(c.key, c.header, trim) for c in cols] + [RUN_IDS],
                  ["---"] + [c.align for c in cols] + ["---"])
    marked = False
    for label, values, spread, ids, overlapped in _rows(group):
        rec = {**values, "spread": spread}      # columns.SPREAD reads the row's spread
        # a † run (no spread): its figures are shown, but not as a headline (bold)
        row = [c.cell(rec, headline=spread is not None) for c in cols]
        if mark_overlap:                        # the caveat beside the figure it concerns
            for i, c in enumerate(cols):
                if c.key == DECODE_SPLIT.key:
                    cell = overlap_marked(row[i], overlapped)
                    marked = marked or cell != row[i]
                    row[i] = cell
        table.rows.append([label] + row + [id_list(ids)])
    table = table.drop_empty(keep=(0, len(cols) + 1))
    if marked:
        table.notes.append(OVERLAP_NOTE)
    return table


def throughput(group: Group, columns: list[str] | None = None, trim: int = 0) -> Table:
    """The throughput table: REPORT_THROUGHPUT, or the `columns` picked by key from it and
    REPORT_DETAIL; `trim` names the trimmed mean's column ("mean after trim 50"); the
    configs the design left out on purpose, with why, in its notes."""
    spec = REPORT_THROUGHPUT if columns is None else pick(PICKABLE, columns)
    table = _table(group, spec, mark_overlap=True, trim=trim)
    if any(a.spread["n"] > 1 for a in group.configs):
        table.notes.append("Configs that ran more than once: the mean is the mean of the runs' "
                           "means, *95% CI* its Student-t interval (*spread of means*, their "
                           "sample stdev and range, is in the table below); the other columns "
                           "average the runs (min/max: the extreme token of any run).")
    return table


# what `--columns` picks from: the throughput table and its detail table
PICKABLE: tuple[TableSpec, ...] = (REPORT_THROUGHPUT, REPORT_DETAIL)


def detail(group: Group, columns: list[str] | None = None, trim: int = 0) -> Table:
    """The throughput table's second part (prefill, stall, warm-up, latency); empty when
    `columns` picked the throughput table's columns (they may come from either part)."""
    if columns is not None:
        return Table([], [])
    return _table(group, REPORT_DETAIL, trim=trim)


def adaptive(group: Group) -> Table | None:
    """The adaptive-cache & speculative-gating table, where it says something: a run
    speculated, resized its cache, or the configs' budgets differ (a fixed budget and the
    resident size, which every streaming run prints, are no reason for a table)."""
    rows = [values for _, values, _, _, _ in _rows(group)]
    # a summary that prints 0 speculative reads did not speculate
    speculated = any(not is_missing(v.get("spec_recall_pct")) or (v.get(k) or 0) > 0
                     for v in rows for k in ("spec_useful_pct", "spec_read_mib_per_token"))
    resized = any((v.get("cache_resizes") or 0) > 0 for v in rows)
    budgets = {v.get("cache_budget_mib") for v in rows} - {None}
    return _table(group, ADAPTIVE) if speculated or resized or len(budgets) > 1 else None


def pressure(group: Group) -> Table:
    table = _table(group, REPORT_PRESSURE)
    if any(a.spread["n"] > 1 for a in group.configs):
        table.notes.append("Repeated configs show their worst run: highest peak RSS and "
                           "temperatures, lowest free-RAM floor.")
    return table


def pressure_caption(table: Table) -> str:
    """The device-pressure caption naming only the columns the table has (the columns' notes,
    report/format/columns.py: REPORT_PRESSURE)."""
    return REPORT_PRESSURE.caption_naming(table.headers)
