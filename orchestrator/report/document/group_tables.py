"""The result tables of a report, per (model, device) group: throughput, device pressure, A/B.

The throughput, detail and pressure columns are report/format/columns.py's REPORT_THROUGHPUT,
REPORT_DETAIL and REPORT_PRESSURE (`--columns` picks the throughput table's from the first
two). Every row carries a `run ids` cell with the ids it was computed from (see Provenance),
and runs that did not end ok get their own daggered row, never a share of an aggregate.
Overlap configs carry a mark (‡) on their compute + I/O cell, whose meaning the note under
the table gives; a serial config's stall is "—" (its RunFigures have none: stats/overlap.py).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from orchestrator.report.format import ab_rows as ab_rows
from orchestrator.report.format import design_notes
from orchestrator.report.format.cells import RUN_IDS, id_list
from orchestrator.report.format.columns import (
    DECODE_SPLIT,
    REPORT_DETAIL,
    REPORT_PRESSURE,
    REPORT_THROUGHPUT,
    TableSpec,
    pick,
)
from orchestrator.report.format.labels import left_out_line, run_label
from orchestrator.report.format.markdown import Table, md_escape
from orchestrator.results.report_data import (
    ConfigAgg,
    Group,
    ReportData,
    RunView,
)
from orchestrator.stats.config_figures import Spread
from orchestrator.stats.divergence import divergence
from orchestrator.stats.values import DASH

OVERLAP_MARK = "‡"         # not †: that marks the runs left out
OVERLAP_NOTE = (f"{OVERLAP_MARK} ran with `--overlap`: flash I/O runs beside compute, so "
                "compute + I/O does not add up to the wall time (the I/O figure is the read "
                "lanes' busy time) and the stall is the I/O's cost.")
CAPTIONS = {
    "throughput": REPORT_THROUGHPUT.caption,
    "detail": REPORT_DETAIL.caption,
    "pressure": REPORT_PRESSURE.caption,
    "ab": ab_rows.CAPTION,
}


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


def _table(group: Group, spec: TableSpec, mark_overlap: bool = False) -> Table:
    cols = spec.columns
    table = Table(["Config"] + spec.headers + [RUN_IDS],
                  ["---"] + [c.align for c in cols] + ["---"])
    marked = False
    for label, values, spread, ids, overlapped in _rows(group):
        rec = {**values, "spread": spread}      # columns.SPREAD reads the row's spread
        # a † run (no spread): its figures are shown, but not as a headline (bold)
        row = [c.cell(rec, headline=spread is not None) for c in cols]
        if mark_overlap and overlapped:         # the caveat beside the figure it concerns
            for i, c in enumerate(cols):
                if c.key == DECODE_SPLIT.key and row[i] != DASH:
                    row[i] += f" {OVERLAP_MARK}"
                    marked = True
        table.rows.append([label] + row + [id_list(ids)])
    table = table.drop_empty(keep=(0, len(cols) + 1))
    if marked:
        table.notes.append(OVERLAP_NOTE)
    return table


def throughput(group: Group, columns: list[str] | None = None) -> Table:
    """The throughput table: REPORT_THROUGHPUT, or the `columns` picked by key from it and
    REPORT_DETAIL."""
    spec = REPORT_THROUGHPUT if columns is None else pick(PICKABLE, columns)
    table = _table(group, spec, mark_overlap=True)
    if any(a.spread["n"] > 1 for a in group.configs):
        table.notes.append("Configs that ran more than once: the mean is the mean of the runs' "
                           "means, *95% CI* its Student-t interval (*spread of means*, their "
                           "sample stdev and range, is in the table below); the other columns "
                           "average the runs (min/max: the extreme token of any run).")
    return table


# what `--columns` picks from: the throughput table and its detail table
PICKABLE: tuple[TableSpec, ...] = (REPORT_THROUGHPUT, REPORT_DETAIL)


def detail(group: Group, columns: list[str] | None = None) -> Table:
    """The throughput table's second part (prefill, stall, warm-up, latency); empty when
    `columns` picked the throughput table's columns (they may come from either part)."""
    if columns is not None:
        return Table([], [])
    return _table(group, REPORT_DETAIL)


def pressure(group: Group) -> Table:
    table = _table(group, REPORT_PRESSURE)
    if any(a.spread["n"] > 1 for a in group.configs):
        table.notes.append("Repeated configs show their worst run: highest peak RSS and "
                           "temperatures, lowest free-RAM floor.")
    return table


def ab(group: Group) -> tuple[Table | None, str | None]:
    """(table, note): the group's A/B table against its model's baseline (results/ab.py), or
    None and why there is none."""
    rows = group.ab
    if rows is None:
        return None, None
    if rows.note:
        return None, md_escape(rows.note)
    table = Table(ab_rows.HEADERS + [RUN_IDS, "text departs at"],
                  ab_rows.ALIGNS + ["---", "---:"])
    base = group.config(rows.baseline)
    base_text = _text(base) if base is not None else None
    for row in rows.rows:
        agg = group.config(row.config)
        text = _text(agg) if agg is not None else None
        table.rows.append([md_escape(row.label)] + ab_rows.row_cells(row)
                          + [id_list(row.ids), departs(base_text, text, row.is_baseline)])
    if all(r[-1] in (DASH, "baseline") for r in table.rows):
        for r in table.rows:   # no text to compare: the whole column goes
            r[-1] = DASH
    table = table.drop_empty(keep=(0, 1, 2, 4, len(ab_rows.HEADERS)))
    table.notes += ab_rows.notes(rows)
    if "text departs at" in table.headers:
        table.notes.append("text departs at: with greedy decoding, the first character where "
                           "a config's generated text differs from the baseline's (a change "
                           "of routing changes the output from that token on).")
    return table, None


def _text(agg: ConfigAgg) -> str | None:
    """The generated text of a config's first ok run (greedy decoding repeats it)."""
    return next((r.row.text for r in agg.runs if r.row.text), None)


def departs(base: str | None, text: str | None, is_base: bool) -> str:
    if is_base:
        return "baseline" if base else DASH
    if base is None or text is None:
        return DASH
    index = divergence(base, text)
    return "identical" if index is None else f"char {index}"


def left_out(runs: list[RunView]) -> list[str]:
    return [md_escape(left_out_line(r)) for r in runs if not r.ok]


# ---- what an import's design file adds (report/format/design_notes.py) --------------------------

def design_group(data: ReportData, group: Group) -> dict[str, Any]:
    """A group's model note (above its tables) and the notes on its configs (under them),
    from the design files of the group's sessions."""
    designs = [data.designs.get(sid) for sid in dict.fromkeys(r.row.session_id for r in group.runs)]
    return {"model_note": design_notes.model_note(designs, group.model),
            "config_notes": design_notes.config_notes(designs, [a.config for a in group.configs])}


def design_document(data: ReportData) -> dict[str, Any]:
    """The session notes (under the description) and the Configs legend (before the first
    group's tables)."""
    designs = list(data.designs.values())
    return {"session_notes": design_notes.session_notes(designs),
            "legend": design_notes.legend(designs, [r.row.config for r in data.runs]),
            "legend_caption": design_notes.LEGEND_CAPTION}
