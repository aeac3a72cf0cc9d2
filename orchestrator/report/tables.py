"""Report tables from `statistics.runs_table` output, laid out like the BigMoeOnEdge summary.md.

Cells are formatted by the one formatter set (orchestrator.report.formatting); a missing value
prints "—". Rows are addressed by display label: `labels` maps run_id -> label (the caller's
knowledge, e.g. which file a config came from) and `order` lists the labels to show; a label
without a run gets a row of "—" (the published tables list configs that were not measured that
day); without `order`, every run is a row. `pivot` lays a two-flag grid out as a table.
"""
from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from orchestrator.config.matrix import Matrix, expand_configs
from orchestrator.report import markdown as md
from orchestrator.report.formatting import (
    STATS,
    Formatter,
    bold,
    gib,
    number,
    records,
    split,
)
from orchestrator.stats.values import DASH, is_missing


@dataclass(frozen=True)
class Col:
    header: str
    key: str                                    # analysis column (also the csv/json column)
    fmt: Formatter                              # takes the values of `keys`, in order
    align: str = "---:"
    also: tuple[str, ...] = ()                  # further keys one cell combines (compute + I/O)
    optional: bool = False                      # markdown leaves it out when no row has it

    @property
    def keys(self) -> tuple[str, ...]:
        return (self.key, *self.also)

    def cell(self, rec: Mapping[str, Any] | None) -> str:
        return self.fmt(*(None if rec is None else rec.get(k) for k in self.keys))


def stat(key: str, align: str = "---:", headline: bool = False, header: str | None = None,
         optional: bool = False) -> Col:
    """A column of one statistic with its shared header and formatter."""
    s = STATS[key]
    return Col(header or s.header, key, bold(s.fmt) if headline else s.fmt, align,
               optional=optional)


# The published columns first, with their headers and cells unchanged (the 2026-07-13 oracle);
# p5 where the phone study prints it, the study's compute + I/O split after the stall, and
# majflt/token for the engines that count it.
THROUGHPUT = (stat("mean", headline=True), stat("min"), stat("max"), stat("median"),
              stat("p5"), stat("p95"), stat("prefill_tps"), stat("ttft_s"),
              stat("cache_hit_pct"), stat("read_mib_per_token"), stat("stall_ms_per_token"),
              Col("decode: compute + I/O (s/tok)", "compute_s_per_token", split,
                  also=("io_s_per_token",)),
              stat("majflt_per_token", optional=True))
LATENCY = (stat("mean", header="mean, all tokens"), stat("steady_mean"),
           stat("steady_from_token"), stat("latency_p50_ms"), stat("latency_p90_ms"),
           stat("latency_p99_ms"))
PRESSURE = (stat("peak_rss_gib"), stat("mem_floor_gib"), stat("cpu_temp_start_c"),
            stat("cpu_temp_max_c"), stat("batt_temp_max_c"))
ADAPTIVE = (stat("cache_budget_mib"), stat("cache_resizes"), stat("cache_resident_mib"),
            stat("spec_recall_pct"), stat("spec_useful_pct"), stat("spec_read_mib_per_token"),
            stat("spec_auto_off", ":--:"))
# The per-variant comparison of the 2026-07-12-pr23 write-up, in that document's own layout
# (units in the headers, whole degrees): its "decode tok/s" cell carries the change from the
# table's first row, and its "useful" cell combines two counters; both are built in
# `_variant_rows`. The published header says "stall ms/tok" but prints s/tok (0.063 for a
# 63 ms stall); the unit is stated correctly here. p5 and the compute + I/O split follow the
# published columns.
VARIANTS = (
    Col("decode tok/s", "mean", number("**%.2f**")),
    stat("median"), stat("p95"), stat("cache_hit_pct"),
    Col("flash MiB/tok", "read_mib_per_token", number("%.0f")),
    Col("stall s/tok", "stall_s_per_token", number("%.3f")),
    Col("spec MiB", "spec_read_mib", number("%.0f")),
    Col("useful", "spec_useful", lambda v: DASH if is_missing(v) else v),
    Col("recall", "spec_recall_pct", number("%.0f%%")),
    Col("TTFT s", "ttft_s", number("%.1f")),
    Col("peak RSS", "peak_rss_gib", gib),
    Col("CPU max", "cpu_temp_max_c", number("%.0f°C")),
    stat("p5"),
    Col("decode: compute + I/O (s/tok)", "compute_s_per_token", split, also=("io_s_per_token",)),
)
TABLES: dict[str, tuple[Col, ...]] = {
    "throughput": THROUGHPUT, "latency": LATENCY, "pressure": PRESSURE, "adaptive": ADAPTIVE,
    "variants": VARIANTS}
CAPTIONS = {
    "throughput": "**Throughput** (tok/s; mean = aggregate decode, prefill = prompt-processing; "
                  "decode: compute + I/O = the engine's split of a token's decode time; with "
                  "overlap the I/O figure is the read lanes' busy time, and the stall is the "
                  "wall time lost to flash):",
    "latency": "**Per-token latency & warm-up** (latency = wall time of one decode step, ms; "
               "steady state from the token where MSER-5 ends the warm-up, and the mean tok/s "
               "from there on, next to the mean over all tokens; — under 20 tokens, or not settled "
               "within the first half of the run):",
    "pressure": "**Device pressure** (peak process RSS, free-RAM floor, SoC/battery "
                "temperature):",
    "adaptive": "**Adaptive cache & speculative gating** (budget & resizes under "
                "`--cache-mb auto`; router-prediction recall, useful-hit rate and auto-off "
                "under `--spec-gate`):",
}


def group_title(model: str, device: str, engine: str | None) -> str:
    """`model on device`; the engine stands in for a run without a model."""
    return f"{model if model != '-' else engine or 'engine'} on {device}"


def _rows(stats: pd.DataFrame, labels: Mapping[Any, str] | None,
          order: Sequence[str] | None) -> list[tuple[str, Mapping[str, Any] | None]]:
    recs = stats.to_dict("index")
    if order is None:     # every run, in the frame's order (labels may repeat across groups)
        return [((labels or {}).get(rid, str(rid)), rec) for rid, rec in recs.items()]
    by_label = {(labels or {}).get(rid, str(rid)): rec for rid, rec in recs.items()}
    return [(label, by_label.get(label)) for label in order]


def _variant_rows(rows: list[tuple[str, Mapping[str, Any] | None]]) -> list[tuple[str, Any]]:
    """Derive the combined cells of VARIANTS (delta vs first measured row, a/b (p%))."""
    base = next((r["mean"] for _, r in rows if r is not None and not is_missing(r.get("mean"))),
                None)
    out = []
    for i, (label, rec) in enumerate(rows):
        if rec is not None:
            rec = dict(rec)
            stall = rec.get("stall_ms_per_token")
            rec["stall_s_per_token"] = None if is_missing(stall) else stall / 1000
            m = rec.get("mean")
            if not is_missing(m) and base is not None and i > 0:
                rec["_delta"] = m - base      # unrounded, as the published "(+0.05)" shows
            u, e = rec.get("spec_useful"), rec.get("spec_experts")
            rec["spec_useful"] = (f"{u:.0f}/{e:.0f} ({100 * u / e:.0f}%)"
                                  if not is_missing(u) and not is_missing(e) and e else None)
        out.append((label, rec))
    return out


def cells(stats: pd.DataFrame, kind: str, labels: Mapping[Any, str] | None = None,
          order: Sequence[str] | None = None) -> pd.DataFrame:
    """The table as display strings: a Config column then one column per header."""
    spec = TABLES[kind]
    rows = _rows(stats, labels, order)
    if kind == "variants":
        rows = _variant_rows(rows)
    data = []
    for label, rec in rows:
        row = [label] + [c.cell(rec) for c in spec]
        if kind == "variants" and rec is not None and "_delta" in rec:
            row[1] += " (%+.2f)" % rec["_delta"]
        data.append(row)
    table = pd.DataFrame(data, columns=["Config"] + [c.header for c in spec])
    empty = [c.header for c in spec if c.optional and (table[c.header] == DASH).all()]
    return table.drop(columns=empty)


def to_markdown(table: pd.DataFrame, kind: str) -> str:
    align = {c.header: c.align for c in TABLES[kind]}
    aligns = ["---"] + [align[h] for h in table.columns[1:]]
    rows = [[md.escape_cell(c) for c in r] for r in table.itertuples(index=False)]
    return md.render(md.Table(list(table.columns), aligns, rows)) + "\n"


def markdown(stats: pd.DataFrame, kind: str, labels: Mapping[Any, str] | None = None,
             order: Sequence[str] | None = None) -> str:
    return to_markdown(cells(stats, kind, labels, order), kind)


def values(stats: pd.DataFrame, kind: str, labels: Mapping[Any, str] | None = None,
           order: Sequence[str] | None = None) -> pd.DataFrame:
    """The same rows and columns as numbers (for csv/json): unformatted, NaN when missing."""
    keys = [k for c in TABLES[kind] for k in c.keys]
    if kind == "variants":   # the raw inputs of the derived cells
        keys = [{"stall_s_per_token": "stall_ms_per_token"}.get(k, k) for k in keys]
        keys.insert(keys.index("spec_useful") + 1, "spec_experts")
    rows = _rows(stats, labels, order)
    data = [{"config": label, **{k: (rec or {}).get(k) for k in keys}} for label, rec in rows]
    return pd.DataFrame(data, columns=["config"] + keys)


def to_csv(stats: pd.DataFrame, kind: str, labels: Mapping[Any, str] | None = None,
           order: Sequence[str] | None = None) -> str:
    return values(stats, kind, labels, order).to_csv(index=False)


def to_json(stats: pd.DataFrame, kind: str, labels: Mapping[Any, str] | None = None,
            order: Sequence[str] | None = None) -> str:
    rows = records(values(stats, kind, labels, order).to_dict("records"))
    return json.dumps(rows, ensure_ascii=False, indent=1)


def summary_section(stats: pd.DataFrame, title: str, labels: Mapping[Any, str] | None = None,
                    order: Sequence[str] | None = None,
                    kinds: Sequence[str] = ("throughput", "pressure", "adaptive"),
                    measured_only: Sequence[str] = ("adaptive",)) -> str:
    """One model's section of a summary.md: `### title`, then each table under its caption.

    Tables in `measured_only` skip the labels of `order` that have no run: the published
    budget/spec table concerns only the configs measured with that engine version.
    """
    parts = [f"### {title}\n"]
    present = {(labels or {}).get(rid, str(rid)) for rid in stats.index}
    for kind in kinds:
        if kind in CAPTIONS:
            parts.append(CAPTIONS[kind] + "\n")
        rows = order
        if kind in measured_only and order is not None:
            rows = [label for label in order if label in present]
        parts.append(markdown(stats, kind, labels, rows))
    return "\n".join(parts)


def pivot(matrix: Matrix | None, means: Mapping[str, float | None]) -> md.Table | None:
    """A grid over two flags as rows = the first flag's values, columns = the second's, cells
    = mean tok/s (`means`: config name -> mean, e.g. of a config's ok runs); None when the
    matrix has no such grid (or crosses it with several `configs`)."""
    if matrix is None or len(matrix.grid) != 2 or len(matrix.configs) > 1:
        return None
    (rflag, rvalues), (cflag, cvalues) = matrix.grid.items()
    names = [name for name, _ in expand_configs(matrix)]    # the grid's product order
    if not any(not is_missing(means.get(n)) for n in names):
        return None
    mean = STATS["mean"].fmt
    corner = f"{rflag.lstrip('-')} ↓ {cflag.lstrip('-')} →"
    table = md.Table([md.md_escape(corner)] + [md.md_escape(_grid_value(v)) for v in cvalues],
                     ["---"] + ["---:"] * len(cvalues))
    for i, rv in enumerate(rvalues):
        cells = [mean(means.get(names[i * len(cvalues) + j])) for j in range(len(cvalues))]
        table.rows.append([md.md_escape(_grid_value(rv))] + cells)
    return table


def pivot_caption(matrix: Matrix) -> str:
    rflag, cflag = (f.lstrip("-") for f in matrix.grid)
    return f"**Mean tok/s by {md.md_escape(rflag)} × {md.md_escape(cflag)}**:"


def _grid_value(value: Any) -> str:
    return ("on" if value else "off") if isinstance(value, bool) else str(value)
