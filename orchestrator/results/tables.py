"""Report tables from `analysis.runs_table` output, formatted like the BigMoeOnEdge summary.md.

Formatting uses Python's %-formatting, which rounds the binary value correctly and an exact half
to even (76.5 -> "76%"), as the published tables do. A missing value prints "—".
Rows are addressed by display label: `labels` maps run_id -> label (the caller's knowledge, e.g.
which file a config came from) and `order` lists the labels to show; a label without a run gets
a row of "—" (the published tables list configs that were not measured that day).
"""
from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

DASH = "—"


@dataclass(frozen=True)
class Col:
    header: str
    key: str                                    # analysis column (also the csv/json column)
    fmt: Callable[[Any], str]
    align: str = "---:"


def _ok(v: Any) -> bool:
    return v is not None and not (isinstance(v, float) and math.isnan(v))


def _f(pattern: str) -> Callable[[Any], str]:
    return lambda v: pattern % v


def _yes_no(v: Any) -> str:
    return "yes" if v else "no"


def _positive(pattern: str) -> Callable[[Any], str]:
    # spec counters of 0 mean "nothing speculated": the published table shows a dash
    return lambda v: pattern % v if v else DASH


THROUGHPUT = (
    Col("decode mean", "mean", _f("**%.2f**")),
    Col("min", "min", _f("%.2f")), Col("max", "max", _f("%.2f")),
    Col("median", "median", _f("%.2f")), Col("p95", "p95", _f("%.2f")),
    Col("prefill tok/s", "prefill_tps", _f("%.2f")), Col("TTFT (s)", "ttft_s", _f("%.1f")),
    Col("cache hit", "cache_hit_pct", _f("%.0f%%")),
    Col("flash read/token", "read_mib_per_token", _f("%.0f MiB")),
    Col("stall ms/tok", "stall_ms_per_token", _f("%.1f")),
)
PRESSURE = (
    Col("peak RSS", "peak_rss_gib", _f("%.2f GB")),
    Col("free-RAM floor", "mem_floor_gib", _f("%.2f GB")),
    Col("CPU start", "cpu_temp_start_c", _f("%.1f °C")),
    Col("CPU max", "cpu_temp_max_c", _f("%.1f °C")),
    Col("battery max", "batt_temp_max_c", _f("%.1f °C")),
)
ADAPTIVE = (
    Col("cache budget", "cache_budget_mib", _f("%.0f MiB")),
    Col("resizes", "cache_resizes", _f("%d")),
    Col("resident", "cache_resident_mib", _f("%.0f MiB")),
    Col("spec recall", "spec_recall_pct", _f("%.0f%%")),
    Col("spec useful", "spec_useful_pct", _f("%.0f%%")),
    Col("spec read/token", "spec_read_mib_per_token", _positive("%.0f MiB")),
    Col("auto-off", "spec_auto_off", _yes_no, ":--:"),
)
# The per-variant comparison of the 2026-07-12-pr23 write-up. Its "decode tok/s" cell carries
# the change from the table's first row, and its "useful" cell combines two counters: both are
# built in `variants_table`. The published header says "stall ms/tok" but prints s/tok
# (0.063 for a 63 ms stall); the unit is stated correctly here.
VARIANTS = (
    Col("decode tok/s", "mean", _f("**%.2f**")),
    Col("median", "median", _f("%.2f")), Col("p95", "p95", _f("%.2f")),
    Col("cache hit", "cache_hit_pct", _f("%.0f%%")),
    Col("flash MiB/tok", "read_mib_per_token", _f("%.0f")),
    Col("stall s/tok", "stall_s_per_token", _f("%.3f")),
    Col("spec MiB", "spec_read_mib", _f("%.0f")),
    Col("useful", "spec_useful", lambda v: v),
    Col("recall", "spec_recall_pct", _f("%.0f%%")),
    Col("TTFT s", "ttft_s", _f("%.1f")),
    Col("peak RSS", "peak_rss_gib", _f("%.2f GB")),
    Col("CPU max", "cpu_temp_max_c", _f("%.0f°C")),
)
TABLES: dict[str, tuple[Col, ...]] = {
    "throughput": THROUGHPUT, "pressure": PRESSURE, "adaptive": ADAPTIVE, "variants": VARIANTS}
CAPTIONS = {
    "throughput": "**Throughput** (tok/s; mean = aggregate decode, prefill = prompt-processing):",
    "pressure": "**Device pressure** (peak process RSS, free-RAM floor, SoC/battery "
                "temperature):",
    "adaptive": "**Adaptive cache & speculative gating** (budget & resizes under "
                "`--cache-mb auto`; router-prediction recall, useful-hit rate and auto-off "
                "under `--spec-gate`):",
}


def _rows(stats: pd.DataFrame, labels: Mapping[Any, str] | None,
          order: Sequence[str] | None) -> list[tuple[str, Mapping[str, Any] | None]]:
    recs = stats.to_dict("index")
    by_label = {(labels or {}).get(rid, str(rid)): rec for rid, rec in recs.items()}
    if order is None:
        order = list(by_label)
    return [(label, by_label.get(label)) for label in order]


def _cell(col: Col, rec: Mapping[str, Any] | None) -> str:
    if rec is None:
        return DASH
    v = rec.get(col.key)
    return col.fmt(v) if _ok(v) else DASH


def _variant_rows(rows: list[tuple[str, Mapping[str, Any] | None]]) -> list[tuple[str, Any]]:
    """Derive the combined cells of VARIANTS (delta vs first measured row, a/b (p%))."""
    base = next((r["mean"] for _, r in rows if r is not None and _ok(r.get("mean"))), None)
    out = []
    for i, (label, rec) in enumerate(rows):
        if rec is not None:
            rec = dict(rec)
            stall = rec.get("stall_ms_per_token")
            rec["stall_s_per_token"] = stall / 1000 if _ok(stall) else None
            m = rec.get("mean")
            if _ok(m) and base is not None and i > 0:
                rec["_delta"] = m - base      # unrounded, as the published "(+0.05)" shows
            u, e = rec.get("spec_useful"), rec.get("spec_experts")
            rec["spec_useful"] = (f"{u:.0f}/{e:.0f} ({100 * u / e:.0f}%)"
                                  if _ok(u) and _ok(e) and e else None)
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
        row = [label] + [_cell(c, rec) for c in spec]
        if kind == "variants" and rec is not None and "_delta" in rec:
            row[1] += " (%+.2f)" % rec["_delta"]
        data.append(row)
    return pd.DataFrame(data, columns=["Config"] + [c.header for c in spec])


_NEWLINES = re.compile(r"\s*[\r\n\x0b\x0c\x85\u2028\u2029]+\s*")


def escape_cell(value: Any) -> str:
    """A table cell that cannot end the cell or the row: `\\` -> `\\\\`, `|` -> `\\|`, line
    breaks -> one space (a config name, flag or prompt may hold any of them)."""
    text = str(value).replace("\\", "\\\\").replace("|", "\\|")
    return _NEWLINES.sub(" ", text)


def to_markdown(table: pd.DataFrame, kind: str) -> str:
    aligns = ["---"] + [c.align for c in TABLES[kind]]
    lines = ["| " + " | ".join(table.columns) + " |", "|" + "|".join(aligns) + "|"]
    lines += ["| " + " | ".join(map(escape_cell, r)) + " |" for r in table.itertuples(index=False)]
    return "\n".join(lines) + "\n"


def markdown(stats: pd.DataFrame, kind: str, labels: Mapping[Any, str] | None = None,
             order: Sequence[str] | None = None) -> str:
    return to_markdown(cells(stats, kind, labels, order), kind)


def values(stats: pd.DataFrame, kind: str, labels: Mapping[Any, str] | None = None,
           order: Sequence[str] | None = None) -> pd.DataFrame:
    """The same rows and columns as numbers (for csv/json): unformatted, NaN when missing."""
    keys = [c.key for c in TABLES[kind]]
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
    recs = values(stats, kind, labels, order).to_dict("records")
    clean = [{k: (None if not _ok(v) else (v.item() if hasattr(v, "item") else v))
              for k, v in r.items()} for r in recs]
    return json.dumps(clean, ensure_ascii=False, indent=1)


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
