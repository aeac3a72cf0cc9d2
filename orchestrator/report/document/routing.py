"""The data of a report's Routing section: one part per traced run (a run with route rows).

What a reader of the phone and Celeron studies looks for (docs/routes.md §3-§5): the headline
figures under their §3 names, how each layer's routing concentrates, how fast token-to-token
overlap decays with lag, what simple predictors would guess, and what an expert cache of X MiB
would give (offline replay, results/replay.py), with the cache hits that real runs of the same
model measured drawn over it.

One thing is easy to get wrong, and the section says it: bmoe's `# summary` cache_hit_pct
is cumulative over the session (docs/formats.md §2), prefill lookups included, and it matches the
replay's *cumulative* hit (Gemma, LRU at the run's 4000 MiB: 76.784 replayed, 76.8 measured;
2000 MiB: 58.27 vs 58.0), not its decode-only hit (81.9). So measured points are compared with
the cumulative curves; the traced run's decode hit (its trace's residency column) sits on the
decode curves.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath, PureWindowsPath
from typing import Any, Protocol

import numpy as np
import pandas as pd

from orchestrator.errors import ConfigError
from orchestrator.record import load_record
from orchestrator.report.format.markdown import Table, md_escape
from orchestrator.report.format.labels import repeat_suffix
from orchestrator.results.report_data import ReportData, RunView, traced_runs
from orchestrator.results.routes import (
    LAGS,
    decode_cells,
    display,
    layer_figures,
    replay_trace,
)
from orchestrator.stats.config_figures import combine
from orchestrator.stats.values import DASH, is_missing

POLICIES = ("belady", "lru", "lfu", "layer", "layerlfu")
STUDY_BUDGETS = (250, 500, 750, 1000, 1500, 2000, 2500, 3000, 4000, 6000, 8000)
LARGER_BUDGETS = (12000, 16000, 24000, 32000, 48000, 64000, 96000, 128000, 192000, 256000)
FIGURE_KINDS = ("steps", "popularity", "lags", "replay")   # report/document/routing_plots.py draws them
MIN_BUDGETS = 6       # fewer study budgets under the touched size: scale the list to the trace


@dataclass
class MeasuredPoint:
    """A config's measured cache hit at its budget: the mean over its ok runs (n of them)."""

    number: int                   # the marker's number in the figure and the table
    label: str                    # config label (and device, when not the traced run's)
    budget_mib: float
    hit_pct: float                # bmoe's summary cache_hit_pct: cumulative, prefill included
    n: int
    low: float
    high: float
    run_ids: list[int]
    traced: bool = False          # the traced run itself
    replay_lru_cum: float | None = None   # replayed global LRU at this budget, cumulative hit


@dataclass
class RoutingSection:
    run: RunView
    slug: str
    heading: str                  # escaped markdown
    figures: dict[str, Any]       # docs/routes.md §3, unrounded
    layers: pd.DataFrame          # results.routes.layer_figures
    overlap: np.ndarray           # (L, N-1): experts shared with the previous decode step
    popularity: np.ndarray        # (L, n_expert): per layer, activation share % by rank
    budgets: list[float]
    replay: list[dict[str, Any]]
    token_cycle_mib: float
    measured: list[MeasuredPoint]
    budget_mib: float | None      # the traced run's own cache budget (summary)
    plots: list[Any] = field(default_factory=list)   # report.plots.Plot, set by route_plots

    @property
    def top_k(self) -> int:
        return int(self.figures["top_k"])


# ---- which runs, which budgets -------------------------------------------------------------

def _nice(value: float) -> float:
    """Two significant digits: budgets a reader can type back into --replay."""
    if value <= 0:
        return value
    return float(f"{value:.2g}")


def default_budgets(touched_mib: float) -> list[float]:
    """The phone study's budget list (250 ... 8000 MiB), cut after the first budget that holds
    everything decode touched (past it every policy hits the same), extended with larger ones
    for a trace that touches more; for a small trace (fewer than MIN_BUDGETS study budgets
    under its touched size) the same list scaled so that 8000 lands at 1.06 × touched, as it
    does for the Gemma trace."""
    under = [b for b in STUDY_BUDGETS if b < touched_mib]
    if len(under) < MIN_BUDGETS:
        scale = touched_mib * 1.06 / STUDY_BUDGETS[-1]
        return list(dict.fromkeys(_nice(b * scale) for b in STUDY_BUDGETS if b * scale > 0))
    budgets = [float(b) for b in STUDY_BUDGETS]
    if budgets[-1] < touched_mib:
        for b in LARGER_BUDGETS:
            budgets.append(float(b))
            if b >= touched_mib:
                break
    else:
        first_over = next(i for i, b in enumerate(budgets) if b >= touched_mib)
        budgets = budgets[:first_over + 1]
    return budgets


# ---- measured cache hits of the same model -------------------------------------------------

def _file_name(path: Any) -> str | None:
    if is_missing(path) or not str(path).strip() or str(path) == "-":
        return None
    text = str(path).strip()
    return PureWindowsPath(text).name if "\\" in text else PurePosixPath(text).name


def model_names(run: RunView) -> set[str]:
    """What names a run's model: the run's model name, and the file names of the model its
    CSV preamble and its route trace's preamble give. Two runs are of the same model when
    these sets meet (an imported trace may carry only the file name; a matrix run its key)."""
    record = load_record(run.row.summary)
    trace = (record.route_trace or {}).get("preamble") or {}
    names = {_file_name(run.row.model), _file_name(record.settings.get("model")),
             _file_name(trace.get("model"))}
    return {n for n in names if n}


def measured_points(data: ReportData, traced: RunView) -> list[MeasuredPoint]:
    """Every config of the report that ran the traced run's model with an expert cache and
    reported its hit (ok runs with the summary's cache_budget_MiB and cache_hit_pct >= 0),
    one point per (device, config, budget); the traced run first."""
    names = model_names(traced)
    label_of = {r.id: a.label or a.config for g in data.groups for a in g.configs for r in a.runs}
    points: dict[tuple[str, str, float], list[tuple[RunView, float]]] = {}
    for run in data.runs:
        if not run.ok or not (model_names(run) & names):
            continue
        # the run's figures (RunFigures): the summary's cumulative hit, "not measured" < 0
        budget, hit = run.figures.cache_budget_mib, run.figures.cache_hit_pct
        if is_missing(budget) or is_missing(hit) or budget <= 0:
            continue
        label = label_of.get(run.id, run.row.config)
        if run.row.device != traced.row.device:
            label = f"{label} on {run.row.device}"
        key = (run.row.device, label, float(budget))
        points.setdefault(key, []).append((run, float(hit)))
    ordered = sorted(points.items(), key=lambda kv: (all(r.id != traced.id for r, _ in kv[1]),
                                                     kv[0][2], kv[0][1]))
    out = []
    for number, ((_, label, budget), members) in enumerate(ordered, 1):
        hits = [h for _, h in members]
        # the config's hit is its ConfigFigures' (the one combination of runs), not a mean here
        config_hit = combine([r.result for r, _ in members]).get("cache_hit_pct")
        out.append(MeasuredPoint(number, label, budget, config_hit, len(hits),
                                 min(hits), max(hits), [r.id for r, _ in members],
                                 traced=any(r.id == traced.id for r, _ in members)))
    return out


# ---- the section's data --------------------------------------------------------------------

def _heatmaps(trace: Any) -> tuple[np.ndarray, np.ndarray]:
    """(overlap with the previous step per (layer, decode step ≥ 1), activation share % by
    popularity rank per layer)."""
    _, ids = decode_cells(trace)
    member = np.zeros(ids.shape[:2] + (trace.n_expert,), dtype=bool)
    np.put_along_axis(member, ids, True, axis=2)
    overlap = (member[:, 1:] & member[:, :-1]).sum(axis=2)
    counts = -np.sort(-member.sum(axis=1), axis=1)
    return overlap, counts / max(1, ids.shape[1] * trace.top_k) * 100


def _model_title(run: RunView, trace: Any) -> str:
    if run.row.model and run.row.model != "-":
        return str(run.row.model)
    return _file_name(trace.preamble.get("model")) or "unknown model"


def build_section(data: ReportData, run: RunView) -> RoutingSection:
    """One traced run's section: its figures, per-layer values, replay at the default budgets
    (11 × 5 for a Gemma-sized trace, about a second), and the measured points, each with the
    replayed global LRU at its budget (one cheap LRU pass per distinct measured budget)."""
    found = data.routes[run.id]
    if isinstance(found, Exception):
        raise found
    figures, trace = found
    if not figures["decode_tokens"]:
        raise ValueError("no decode rows (phase 1): nothing to analyse")
    budgets = default_budgets(figures["touched_mib"])
    replayed = replay_trace(trace, budgets, list(POLICIES))
    measured = measured_points(data, run)
    extra = sorted({p.budget_mib for p in measured})
    if extra:
        lru = {r["budget_mib"]: r["hit_pct_cum"]
               for r in replay_trace(trace, extra, ["lru"])["replay"]}
        for p in measured:
            p.replay_lru_cum = lru.get(p.budget_mib)
    overlap, popularity = _heatmaps(trace)
    record = load_record(run.row.summary)
    model = _model_title(run, trace)
    config = run.config_label + repeat_suffix(run.row.repeat_index)
    heading = md_escape(f"Run {run.id}: {config} — {model} on {run.row.device}")
    return RoutingSection(run=run, slug=f"routing-run{run.id}", heading=heading,
                          figures=figures, layers=layer_figures(trace), overlap=overlap,
                          popularity=popularity, budgets=budgets, replay=replayed["replay"],
                          token_cycle_mib=replayed["token_cycle_mib"], measured=measured,
                          budget_mib=record.cache_budget_mib)


def build(data: ReportData) -> tuple[list[RoutingSection], list[str]]:
    """(a section per traced run of the report, a line per traced run whose trace could not
    be analysed); ([], []) when none is traced: the report is then exactly what it was. One
    unreadable trace does not cost the reader the rest of the document."""
    sections, problems = [], []
    for run in traced_runs(data.runs):
        try:
            sections.append(build_section(data, run))
        except (ValueError, ConfigError) as exc:
            problems.append(md_escape(f"Run {run.id} ({run.row.config}): its route trace "
                                      f"could not be analysed: {exc}"))
    return sections, problems


# ---- tables --------------------------------------------------------------------------------

def _fmt(value: Any, decimals: int) -> str:
    return display(value, decimals)


def budget_text(budget: float) -> str:
    return f"{budget:g}"


def headline_table(s: RoutingSection) -> Table:
    f = s.figures
    rows = [
        ("MoE layers × experts, top-k", (f"{f['n_moe_layers']} × {f['n_expert']}, "
         f"top-{f['top_k']}"), "n_moe_layers, n_expert, top_k"),
        ("decoded tokens (N)", _fmt(f["decode_tokens"], 0), "decode_tokens"),
        ("distinct experts per layer: mean (min–max)",
         (f"{_fmt(f['distinct_experts_mean'], 0)} ({f['distinct_experts_min']}–"
         f"{f['distinct_experts_max']}) of {f['n_expert']}"),
         "distinct_experts_mean / _min / _max"),
        ("touched in decode", (f"{_fmt(f['touched_pct'], 0)}% ({_fmt(f['touched_mib'], 0)} of "
         f"{_fmt(f['bank_mib'], 0)} MiB)"), "touched_pct, touched_mib, bank_mib"),
        ("one expert (mean over layers)", f"{_fmt(f['one_expert_mib'], 2)} MiB",
         "one_expert_mib"),
        ("decode hit in the trace (its residency column)",
         f"{_fmt(f['decode_hit_pct'], 1)}%" + (f" at {budget_text(s.budget_mib)} MiB"
                                               if not is_missing(s.budget_mib) else ""),
         "decode_hit_pct"),
        ("token cycle T (k experts in every layer)", f"{_fmt(s.token_cycle_mib, 0)} MiB",
         "token_cycle_mib"),
    ]
    if not is_missing(f.get("summary_cache_hit_pct")):
        rows.append(("cache hit, run summary (cumulative, prefill included)",
                     f"{_fmt(f['summary_cache_hit_pct'], 1)}%", "summary_cache_hit_pct"))
    table = Table(["figure", "value", "key"], ["---", "---:", "---"])
    table.rows = [[label, md_escape(value), " ".join(f"`{k.strip()}`" for k in key.split(","))]
                  for label, value, key in rows]
    return table


def layers_table(s: RoutingSection) -> Table:
    table = Table(["layer", "one expert MiB", "distinct experts", "top-8 share %",
                   "experts for 80%", "overlap with previous token %"],
                  ["---:", "---:", "---:", "---:", "---:", "---:"])
    for row in s.layers.itertuples(index=False):
        table.rows.append([str(row.layer), _fmt(row.expert_mib, 2), str(row.distinct_experts),
                           _fmt(row.top8_share_pct, 1), str(row.experts_for_80pct),
                           _fmt(row.temporal_pct, 1)])
    f = s.figures
    table.notes.append(
        f"Over layers: distinct experts mean {_fmt(f['distinct_experts_mean'], 0)}; top-8 share "
        f"mean {_fmt(f['top8_share_mean_pct'], 1)}% (`top8_share_mean_pct`); experts for 80% "
        f"median {_fmt(f['experts_for_80pct_median'], 1)}, min {f['experts_for_80pct_min']}, "
        f"max {f['experts_for_80pct_max']} (`experts_for_80pct_median` / `_min` / `_max`).")
    return table


def lag_table(s: RoutingSection) -> Table:
    f = s.figures
    table = Table([*(f"lag {g}" for g in LAGS), "random k/n"], ["---:"] * (len(LAGS) + 1))
    table.rows.append([_fmt(f.get(f"overlap_lag{g}_pct"), 1) for g in LAGS]
                      + [_fmt(f["pred_random_pct"], 1)])
    return table


def predictor_table(s: RoutingSection) -> Table:
    f, k = s.figures, s.top_k
    gib = f.get("prompt_static_k24_budget_gib")
    rows = [
        ("random", f"any {k} of {f['n_expert']}", "pred_random_pct", "—"),
        ("temporal", "the previous token's experts (first token not scored)",
         "pred_temporal_pct", f"{k} per layer"),
        ("static", f"the {k} most routed of the whole decode (an oracle: it saw the answers)",
         "pred_static_pct", f"{k} per layer"),
        ("prompt-static", f"the {k} most routed while reading the prompt", "pred_prompt_static_pct",
         f"{k} per layer"),
        ("prompt-static k24", "the 24 most routed while reading the prompt",
         "pred_prompt_static_k24_pct",
         f"24 per layer = {_fmt(gib, 2)} GiB" if not is_missing(gib) else "24 per layer"),
    ]
    table = Table(["predictor", "guesses", "hit %", "list held", "key"],
                  ["---", "---", "---:", "---", "---"])
    table.rows = [[name, what, _fmt(f.get(key), 1), held, f"`{key}`"]
                  for name, what, key, held in rows]
    return table


def replay_table(s: RoutingSection) -> Table:
    """Budgets down, policies across: decode hit % / MiB read (the study's layout)."""
    by = {(r["budget_mib"], r["policy"]): r for r in s.replay}
    table = Table(["budget MiB", *POLICIES], ["---:"] * (len(POLICIES) + 1))
    for budget in s.budgets:
        mark = " (< T)" if budget < s.token_cycle_mib else ""
        table.rows.append([budget_text(budget) + mark] + [
            f"{_fmt(by[(budget, p)]['hit_pct_decode'], 3)} / {_fmt(by[(budget, p)]['read_mib'], 1)}"
            for p in POLICIES])
    return table


def measured_table(s: RoutingSection) -> Table:
    table = Table(["#", "config", "cache budget MiB", "measured cache hit %", "n",
                   "replayed LRU, cumulative %", "runs"],
                  ["---:", "---", "---:", "---:", "---:", "---:", "---"])
    for p in s.measured:
        hit = _fmt(p.hit_pct, 1) + (f" ({_fmt(p.low, 1)}–{_fmt(p.high, 1)})" if p.n > 1 else "")
        table.rows.append([str(p.number), md_escape(p.label + (" (the traced run)"
                                                                if p.traced else "")),
                           budget_text(p.budget_mib), hit, str(p.n),
                           _fmt(p.replay_lru_cum, 1) if p.replay_lru_cum is not None else DASH,
                           ", ".join(str(i) for i in p.run_ids)])
    return table


def section_context(s: RoutingSection) -> dict[str, Any]:
    """What routing.md.j2 fills in: the tables, and the figures by kind (absent: not drawn)."""
    return {"heading": s.heading, "run_id": s.run.id, "headline": headline_table(s),
            "layers": layers_table(s), "lags": lag_table(s), "predictors": predictor_table(s),
            "replay": replay_table(s), "measured": measured_table(s) if s.measured else None,
            "token_cycle": _fmt(s.token_cycle_mib, 0), "top_k": s.top_k,
            "n_expert": s.figures["n_expert"],
            "plots": {**dict.fromkeys(FIGURE_KINDS), **{p.kind: p for p in s.plots}}}


TEMPLATE = "routing.md.j2"     # one traced run's part; report.md.j2 holds the section around it


class RoutingParts(Protocol):
    """What the section needs of the document's request (document/request.py SectionRequest;
    a protocol, so that request.py, which names RoutingSection, is not imported back)."""

    @property
    def traced(self) -> Sequence[RoutingSection]: ...

    @property
    def untraceable(self) -> Sequence[str]: ...


def context(data: ReportData, request: RoutingParts) -> dict[str, Any]:
    """`routing`: one routing.md.j2 context per traced run (its figures drawn already);
    `routing_problems`: a line per traced run whose trace could not be analysed."""
    return {"routing": [section_context(s) for s in request.traced],
            "routing_problems": request.untraceable}
