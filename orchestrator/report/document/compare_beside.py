"""What the comparison table's ratios are read beside (`orch compare`, the report's
comparison section): what else differs between the matched configs (the rows marked ≠), each
side's device facts with their source, and the other headline figures, side against the
reference (the numbers: results/confounds.py, side_devices.py, headline_figures.py).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from orchestrator.report.format.ab_rows import interval_text
from orchestrator.report.format.formatters import gib_from_kb, ratio, when
from orchestrator.report.format.markdown import Table, md_escape
from orchestrator.results.comparison import SideComparison
from orchestrator.results.headline_figures import BY_KEY, FIGURES, FigureComparison
from orchestrator.results.side_devices import DESIGN_SOURCE, SideDevice
from orchestrator.stats.uncertainty import Comparison
from orchestrator.stats.values import DASH, is_missing

from orchestrator.report.document.compare_columns import DIFFERS, config_text, side_names

# how a figure of each unit is written (the report's tables' precision)
_FORMATS = {"tok/s": "%.2f", "s": "%.2f", "ms": "%.0f", "GiB": "%.2f", "°C": "%.1f"}


# ---- what else differs -------------------------------------------------------------------

def difference_lines(comp: SideComparison) -> list[str]:
    """Plain lines, one per marked row and other side: "anon-long (A vs B): cache_mb 3000 vs
    2000; tokens 1,354 vs 256"."""
    names = side_names(comp.sides)
    out = []
    for row in comp.matched:
        for j, diffs in enumerate(row.differs, 1):
            if diffs:
                what = "; ".join(f"{d.key} {d.reference} vs {d.other}" for d in diffs)
                out.append(f"{config_text(row)} ({names[0]} vs {names[j]}): {what}")
    return out


DIFFERS_NOTE = (f"{DIFFERS} These configs' runs differ in more than the side (settings, "
                "tokens, model or build; the reference's value first): their ratio measures "
                "those differences too, not the side alone.")


# ---- the devices -------------------------------------------------------------------------

def _source(dev: SideDevice) -> str:
    if dev.source == DESIGN_SOURCE:
        return f"the design file (session {dev.session_id})"
    if dev.source and dev.snapshot:
        return f"probed when session {dev.session_id} ran ({when(dev.at)} UTC)"
    if dev.source:
        return f"the device's newest probe ({when(dev.at)} UTC), not of when the runs ran"
    return "none stored (an import without a design file's device section, or never probed)"


_FACTS: tuple[tuple[str, Callable[[SideDevice], Any]], ...] = (
    ("SoC / CPU", lambda d: d.soc),
    ("cores", lambda d: d.get("cores")),
    ("RAM", lambda d: gib_from_kb(d.get("mem_total_kb")) if d.get("mem_total_kb") else None),
    ("OS", lambda d: d.os),
    ("CPU governor", lambda d: d.get("cpu.governor")),
    ("storage", lambda d: d.get("storage")),
    ("facts from", _source),
)


def device_rows(comp: SideComparison) -> tuple[list[str], list[list[str]]]:
    """(headers, rows) of the devices' facts, one column per side; a fact no side has is
    left out."""
    headers = ["", *side_names(comp.sides)]
    rows = []
    for name, get in _FACTS:
        cells = [str(v) if not is_missing(v) and v != "" else DASH
                 for v in (get(d) for d in comp.devices)]
        if name == "facts from" or any(c != DASH for c in cells):
            rows.append([name, *cells])
    return headers, rows


def devices_table(comp: SideComparison) -> Table:
    headers, rows = device_rows(comp)
    table = Table([md_escape(h) for h in headers], ["---"] * len(headers))
    table.rows = [[md_escape(c) for c in r] for r in rows]
    return table


# ---- the other headline figures ----------------------------------------------------------

def _number(fc: FigureComparison, value: float | None) -> str:
    return DASH if value is None else _FORMATS.get(fc.figure.unit, "%.2f") % value


def figure_cell(fc: FigureComparison) -> str:
    """"1.60 → 4.42 (2.76× [1.10×–6.90×])": the reference's value, the other's, and the
    ratio (a difference in °C for temperatures) with its interval where there is one."""
    c = fc.change
    if isinstance(c, Comparison):
        change = ratio(c.ratio)
        interval = interval_text(c.low, c.high, ratio)
    else:
        fmt = "%+.1f"
        change = DASH if c.value is None else f"{fmt % c.value} °C"
        interval = interval_text(c.low, c.high, lambda v: fmt % v)
    inside = change if interval == DASH else f"{change} [{interval}]"
    return f"{_number(fc, fc.reference.mean)} → {_number(fc, fc.other.mean)} ({inside})"


def figure_header(key: str) -> str:
    fig = BY_KEY[key]
    return f"{fig.name} ({fig.unit})"


def figure_rows(comp: SideComparison, skip: Sequence[str] = ("mean",)
                ) -> tuple[list[str], list[list[str]]]:
    """(headers, rows): per matched config and other side, each headline figure (not
    `skip`: decode tok/s is the table's) that some row has."""
    keys = [f.key for f in FIGURES if f.key not in skip and any(
        fc.figure.key == f.key for row in comp.matched for figs in row.figures for fc in figs)]
    names = side_names(comp.sides)
    pair = len(comp.sides) > 2
    models = len({row.model for row in comp.matched}) > 1   # a name may recur across models
    headers = [*(["Model"] if models else []), "Config", *(["sides"] if pair else []),
               *(figure_header(k) for k in keys)]
    rows = []
    for row in comp.matched:
        for j, figs in enumerate(row.figures, 1):
            by_key = {fc.figure.key: fc for fc in figs}
            if not any(k in by_key for k in keys):
                continue
            cells = [figure_cell(by_key[k]) if k in by_key else DASH for k in keys]
            rows.append([*([row.model] if models else []), config_text(row),
                         *([f"{names[j]}/{names[0]}"] if pair else []), *cells])
    return headers, rows


def figures_table(comp: SideComparison) -> Table:
    headers, rows = figure_rows(comp)
    if not rows:
        return Table([], [])
    text = len(headers) - sum(1 for h in headers if h.endswith(")"))   # figures: "(unit)"
    table = Table([md_escape(h) for h in headers],
                  ["---"] * text + ["---:"] * (len(headers) - text))
    table.rows = [[md_escape(c) for c in r] for r in rows]
    return table


# ---- JSON / CSV --------------------------------------------------------------------------

def figure_fields(figs: Sequence[FigureComparison]) -> dict[str, Any]:
    """A record's headline-figure fields: `<key>_reference`, `<key>_other`, `<key>_ratio`
    (or `<key>_difference` for temperatures), `<key>_ci_low`, `<key>_ci_high`."""
    out: dict[str, Any] = {}
    for fc in figs:
        k, c = fc.figure.key, fc.change
        if k == "mean":
            continue                     # the record's own mean_* and ratio fields
        out[f"{k}_reference"], out[f"{k}_other"] = fc.reference.mean, fc.other.mean
        out[f"{k}_{'ratio' if isinstance(c, Comparison) else 'difference'}"] = fc.value
        out[f"{k}_ci_low"], out[f"{k}_ci_high"] = c.low, c.high
    return out


def device_records(comp: SideComparison) -> list[dict[str, Any]]:
    """One `device` record per side: its facts as stored and where they came from."""
    return [{"kind": "device", "side": side.label, "device": dev.name, "source": dev.source
             or None, "facts_at": dev.at.isoformat() if dev.at is not None else None,
             "snapshot": dev.snapshot, "facts": dev.facts}
            for side, dev in zip(comp.sides, comp.devices)]
