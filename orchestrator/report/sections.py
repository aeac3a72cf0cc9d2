"""The result tables of a report, per (model, device) group: throughput, device pressure, A/B.

Every row carries a `runs` cell with the ids it was computed from (see Provenance), and runs
that did not end ok get their own daggered row, never a share of an aggregate.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from orchestrator.report.cells import id_list, split_cell, spread_cell, temp_cell
from orchestrator.report.context import ConfigAgg, Group, RunView, left_out_line
from orchestrator.results.divergence import divergence
from orchestrator.results.formatting import STATS, bold, pct
from orchestrator.results.markdown import Table, md_escape
from orchestrator.results.statistics import delta_pct
from orchestrator.results.values import DAGGER, DASH, is_missing

Cell = Callable[[Mapping[str, Any], Mapping[str, Any] | None], str]


def _stat(key: str, headline: bool = False) -> tuple[str, str, Cell]:
    """A column of one statistic: its shared header and formatter."""
    f = bold(STATS[key].fmt) if headline else STATS[key].fmt
    return STATS[key].header, "---:", lambda v, s: f(v.get(key))


THROUGHPUT: list[tuple[str, str, Cell]] = [
    _stat("mean", headline=True),
    ("spread of means", "---:", lambda v, s: spread_cell(s)),
    _stat("min"), _stat("max"), _stat("median"), _stat("p5"), _stat("p95"),
    _stat("prefill_tps"), _stat("ttft_s"), _stat("cache_hit_pct"),
    _stat("read_mib_per_token"), _stat("stall_ms_per_token"),
    ("compute + I/O (s/tok)", "---:", lambda v, s: split_cell(v)),
]
PRESSURE: list[tuple[str, str, Cell]] = [
    _stat("peak_rss_gib"), _stat("mem_floor_gib"),
    ("CPU start → max", "---:", lambda v, s: temp_cell(v)),
    _stat("batt_temp_max_c"),
]
CAPTIONS = {
    "throughput": "**Throughput** (tok/s; mean = aggregate decode n / Σ decode time, in bold; "
                  "min/max = slowest/fastest token; prefill = prompt processing):",
    "pressure": "**Device pressure** (peak process RSS, free-RAM floor, CPU temperature at the "
                "start → its maximum, battery maximum):",
    "ab": "**A/B against the baseline** (change of each config's mean from the baseline's):",
}


def _rows(group: Group) -> list[tuple[str, Mapping[str, Any], Mapping[str, Any] | None, list[int]]]:
    """(label, values, spread, run ids): one row per config with ok runs, then one daggered
    row per run that did not end ok, right under its config."""
    out = []
    for agg in group.configs:
        if agg.runs:
            out.append((md_escape(agg.config), agg.values, agg.spread, agg.ids))
        for bad in agg.bad:
            out.append((md_escape(bad.label), bad.stats, None, [bad.id]))
    return out


def _table(group: Group, spec: list[tuple[str, str, Cell]]) -> Table:
    table = Table(["Config"] + [h for h, _, _ in spec] + ["runs"],
                  ["---"] + [a for _, a, _ in spec] + ["---"])
    for label, values, spread, ids in _rows(group):
        row = [cell(values, spread) for _, _, cell in spec]
        if spread is None:     # a † run: its figures are shown, but not as a headline (bold)
            row = [c.replace("**", "") for c in row]
        table.rows.append([label] + row + [id_list(ids)])
    return table.drop_empty(keep=(0, len(spec) + 1))


def throughput(group: Group) -> Table:
    table = _table(group, THROUGHPUT)
    if any(a.spread["n"] > 1 for a in group.configs):
        table.notes.append("Configs that ran more than once: the mean is the mean of the runs' "
                           "means, *spread of means* their sample stdev and range; the other "
                           "columns average the runs (min/max: the extreme token of any run).")
    return table


def pressure(group: Group) -> Table:
    table = _table(group, PRESSURE)
    if any(a.spread["n"] > 1 for a in group.configs):
        table.notes.append("Repeated configs show their worst run: highest peak RSS and "
                           "temperatures, lowest free-RAM floor.")
    return table


def _range(agg: ConfigAgg) -> float | None:
    s = agg.spread
    return s["max"] - s["min"] if s["n"] > 1 else None


def within_noise(base: ConfigAgg, agg: ConfigAgg) -> bool | None:
    """True when the mean differs from the baseline's by less than the spread (range of the
    repeat means) of either side: the difference is not a measured effect. None when neither
    side was repeated (no spread to compare with). A zero spread flags nothing."""
    spreads = [r for r in (_range(base), _range(agg)) if r is not None]
    a, b = base.values.get("mean"), agg.values.get("mean")
    if not spreads or is_missing(a) or is_missing(b):
        return None
    return abs(b - a) < max(spreads)


def ab(group: Group, baseline: str | None) -> tuple[Table | None, str | None]:
    """(table, note): the A/B table of a group, or None and why there is none."""
    if not baseline:
        return None, None
    base = group.config(baseline)
    if base is None:
        return None, f"The baseline {md_escape(baseline)} did not run in this group."
    if not base.runs:
        return None, (f"The baseline {md_escape(baseline)} has no run that ended ok: "
                      f"no A/B comparison.")
    table = Table(["Config", "decode mean", "spread of means", "Δ mean", "flash read/token",
                   "Δ read/token", "peak RSS", "Δ peak RSS", "runs", "note", "text departs at"],
                  ["---", "---:", "---:", "---:", "---:", "---:", "---:", "---:", "---", "---",
                   "---:"])
    base_text = _text(base)
    mean = bold(STATS["mean"].fmt)
    read, rss = STATS["read_mib_per_token"].fmt, STATS["peak_rss_gib"].fmt
    noisy = single = False
    for agg in [base] + [c for c in group.configs if c is not base]:
        v = agg.values
        if not agg.runs:
            table.rows.append([md_escape(agg.config)] + [DASH] * 7 + [
                DASH, f"no run ended ok ({DAGGER}: {id_list([r.id for r in agg.bad])})", DASH])
            continue
        is_base = agg is base

        def delta(key: str) -> str:
            return "baseline" if is_base else pct(delta_pct(base.values.get(key),
                                                                     v.get(key)))
        note = ""
        if not is_base:
            verdict = within_noise(base, agg)
            if verdict:
                noisy, note = True, "⚠ Δ within the spread"
            elif verdict is None:
                single = True
        table.rows.append([md_escape(agg.config), mean(v.get("mean")), spread_cell(agg.spread),
                           delta("mean"), read(v.get("read_mib_per_token")),
                           delta("read_mib_per_token"), rss(v.get("peak_rss_gib")),
                           delta("peak_rss_gib"), id_list(agg.ids), note or DASH,
                           departs(base_text, _text(agg), is_base)])
    if all(row[-1] in (DASH, "baseline") for row in table.rows):
        for row in table.rows:   # no text to compare: the whole column goes
            row[-1] = DASH
    table = table.drop_empty(keep=(0, 3, 8))
    if "text departs at" in table.headers:
        table.notes.append("text departs at: with greedy decoding, the first character where "
                           "a config's generated text differs from the baseline's (a change "
                           "of routing changes the output from that token on).")
    if noisy:
        table.notes.append("⚠ The difference from the baseline is smaller than the spread of "
                           "the repeat means (of the config or the baseline): it is not a "
                           "measured effect.")
    if single:
        table.notes.append("Configs measured once (with a baseline measured once) have no "
                           "spread to weigh their difference against: repeat them to tell an "
                           "effect from run-to-run noise.")
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
