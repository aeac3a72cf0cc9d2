"""`orch table`'s tables from `statistics.runs_table` output, laid out like the BigMoeOnEdge
summary.md: one table kind per spec of report/format/columns.py (TABLES: throughput, detail,
latency, pressure, adaptive, variants), printed as markdown, csv or json from the same rows.
`columns` (`orch table --columns`) lays the throughput table out from the named columns of
the throughput and detail specs instead.

Cells are formatted by the columns' formatters (orchestrator.report.format.formatters); a missing
value prints "—". Rows are addressed by display label: `labels` maps run_id -> label (the
caller's knowledge, e.g. which file a config came from) and `order` lists the labels to show;
a label without a run gets a row of "—" (the published tables list configs that were not
measured that day); without `order`, every run is a row. The variants table prints each
mean's delta to the first row's (results/table_data.py deltas_to_first); the two-flag pivot is
format/grid.py's.
"""
from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from orchestrator.report.format import markdown as md
from orchestrator.report.format.columns import (
    DECODE_SPLIT,
    DETAIL,
    ENERGY,
    LATENCY,
    TABLES,
    THROUGHPUT,
    TableSpec,
    pick,
)
from orchestrator.report.format.cells import OVERLAP_MARK, OVERLAP_NOTE, RUN_IDS, overlap_marked
from orchestrator.report.format.formatters import records
from orchestrator.report.format.within_cells import trim_header
from orchestrator.report.format.labels import model_on_device
from orchestrator.results.table_data import deltas_to_first
from orchestrator.stats.values import DASH

# what `orch table --columns` picks from: the throughput table, its detail table and the
# per-token latency table, and the energy table
PICKABLE: tuple[TableSpec, ...] = (THROUGHPUT, DETAIL, LATENCY, ENERGY)


def group_title(model: str, device: str, engine: str | None) -> str:
    """`model on device`; the engine stands in for a run without a model."""
    return model_on_device(model, device, engine)


def _rows(stats: pd.DataFrame, labels: Mapping[Any, str] | None,
          order: Sequence[str] | None) -> list[tuple[str, Mapping[str, Any] | None, Any]]:
    """(label, statistics, run id) per row; a label of `order` without a run: (label, None,
    None)."""
    recs = stats.to_dict("index")
    if order is None:     # every run, in the frame's order (labels may repeat across groups)
        return [((labels or {}).get(rid, str(rid)), rec, rid) for rid, rec in recs.items()]
    by_label = {(labels or {}).get(rid, str(rid)): (rec, rid) for rid, rec in recs.items()}
    return [(label, *by_label.get(label, (None, None))) for label in order]


def spec_of(kind: str, columns: Sequence[str] | None = None) -> TableSpec:
    """The table's spec; with `columns` (`--columns`, throughput only), those columns of
    PICKABLE instead."""
    if columns is not None and kind == "throughput":
        return pick(PICKABLE, columns)
    return TABLES[kind]


def cells(stats: pd.DataFrame, kind: str, labels: Mapping[Any, str] | None = None,
          order: Sequence[str] | None = None, columns: Sequence[str] | None = None,
          run_ids: bool = False, trim: int = 0) -> pd.DataFrame:
    """The table as display strings: a Config column then one column per header (then the
    row's run id, with `run_ids`: `orch table` names the run each row is). The compute + I/O
    cell of a run that ran with `--overlap` carries the overlap mark; `trim` names the
    trimmed mean's column."""
    spec = spec_of(kind, columns).columns
    rows = _rows(stats, labels, order)
    # the variants table: each mean's delta to the first measured row's (results/)
    deltas = (deltas_to_first([(rec or {}).get("mean") for _, rec, _ in rows])
              if kind == "variants" else [None] * len(rows))
    data = []
    for (label, rec, rid), delta in zip(rows, deltas):
        row = [label] + [overlap_marked(c.cell(rec), (rec or {}).get("overlapped"))
                         if c.key == DECODE_SPLIT.key else c.cell(rec) for c in spec]
        if delta is not None:
            row[1] += f" ({delta:+.2f})"
        if run_ids:
            row.append(DASH if rid is None else str(rid))
        data.append(row)
    table = pd.DataFrame(data, columns=["Config"] + [trim_header(c.key, c.header, trim)
                                                     for c in spec]
                         + ([RUN_IDS] if run_ids else []))
    # a picked column the data lacks is left out, as an optional one is; a summary-only
    # run's column only where such a run has a row
    summary = any((rec or {}).get("summary_only") for _, rec, _ in rows)
    headers = {c.header: trim_header(c.key, c.header, trim) for c in spec}
    empty = [headers[c.header] for c in spec if ((c.optional or columns is not None)
                                                 and (table[headers[c.header]] == DASH).all())
             or (c.summary and columns is None and not summary)]
    return table.drop(columns=empty)


def to_markdown(table: pd.DataFrame, kind: str, columns: Sequence[str] | None = None,
                trim: int = 0) -> str:
    """The table's markdown, with the overlap note under it when a cell carries the mark."""
    align = {trim_header(c.key, c.header, trim): c.align for c in spec_of(kind, columns).columns}
    aligns = ["---"] + [align.get(h, "---") for h in table.columns[1:]]
    rows = [[md.escape_cell(c) for c in r] for r in table.itertuples(index=False)]
    split = DECODE_SPLIT.header
    marked = split in table.columns and table[split].str.endswith(OVERLAP_MARK).any()
    return (md.render(md.Table(list(table.columns), aligns, rows)) + "\n"
            + (f"\n{OVERLAP_NOTE}\n" if marked else ""))


def markdown(stats: pd.DataFrame, kind: str, labels: Mapping[Any, str] | None = None,
             order: Sequence[str] | None = None, columns: Sequence[str] | None = None,
             run_ids: bool = False, trim: int = 0) -> str:
    return to_markdown(cells(stats, kind, labels, order, columns, run_ids, trim), kind, columns,
                       trim)


def values(stats: pd.DataFrame, kind: str, labels: Mapping[Any, str] | None = None,
           order: Sequence[str] | None = None,
           columns: Sequence[str] | None = None) -> pd.DataFrame:
    """The same rows and columns as numbers (for csv/json): unformatted, NaN when missing."""
    # derived cells: their inputs
    keys = list(dict.fromkeys(k for c in spec_of(kind, columns).columns for k in c.exported))
    rows = _rows(stats, labels, order)
    data = [{"config": label, **{k: (rec or {}).get(k) for k in keys}} for label, rec, _ in rows]
    return pd.DataFrame(data, columns=["config"] + keys)


def to_csv(stats: pd.DataFrame, kind: str, labels: Mapping[Any, str] | None = None,
           order: Sequence[str] | None = None) -> str:
    return values(stats, kind, labels, order).to_csv(index=False)


def to_json(stats: pd.DataFrame, kind: str, labels: Mapping[Any, str] | None = None,
            order: Sequence[str] | None = None) -> str:
    rows = records(values(stats, kind, labels, order).to_dict("records"))
    return json.dumps(rows, ensure_ascii=False, indent=1)
