"""A group's A/B table (group.md.j2): each config against its model's baseline (results/ab.py),
the cells format/ab_rows.py writes for `orch table` too, plus where a config's generated text
departs from the baseline's."""
from __future__ import annotations

from typing import Any

from orchestrator.report.document.request import SectionRequest
from orchestrator.report.format import ab_rows
from orchestrator.report.format.cells import RUN_IDS, id_list
from orchestrator.report.format.markdown import Table, md_escape
from orchestrator.results.report_data import ConfigAgg, Group, ReportData
from orchestrator.stats.divergence import divergence, generated_text
from orchestrator.stats.values import DASH

TEMPLATE = "group.md.j2"


def group_context(group: Group, data: ReportData, request: SectionRequest) -> dict[str, Any]:
    table, note = ab(group)
    return {"ab": table, "ab_note": note}


def ab(group: Group) -> tuple[Table | None, str | None]:
    """(table, note): the group's A/B table against its model's baseline(s) (results/ab.py),
    a Δ row under each compared config, or None and why there is none."""
    rows = group.ab
    if rows is None:
        return None, None
    if rows.note:
        return None, md_escape(rows.note)
    table = Table(ab_rows.headers(rows) + [RUN_IDS, "text departs at"],
                  ab_rows.ALIGNS + ["---", "---:"])
    texts = {name: _text(agg) for name in {r.config for r in rows.rows}
             if (agg := group.config(name)) is not None}
    for row, is_delta, cells in ab_rows.table_rows(rows):
        if is_delta:
            extra = [DASH, departs(texts.get(row.against), texts.get(row.config), False)]
        else:
            extra = [id_list(row.ids), "baseline" if row.is_baseline and
                     texts.get(row.config) else DASH]
        table.rows.append([ab_rows.first_cell(row, is_delta)] + cells + extra)
    if all(r[-1] in (DASH, "baseline") for r in table.rows):
        for r in table.rows:   # no text to compare: the whole column goes
            r[-1] = DASH
    table = table.drop_empty(keep=(*ab_rows.KEEP, len(ab_rows.HEADERS)))
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
    # the generated texts only: a captured log's loader lines differ between identical outputs
    base, text = generated_text(base), generated_text(text)
    if base is None or text is None:
        return DASH
    index = divergence(base, text)
    return "identical" if index is None else f"char {index}"
