"""The routing figures of docs/routes.md §3 from one traced run: how many experts each layer
touches, what they weigh, how well simple predictors would guess the next token's experts, and
what the run's per-token metrics and `# summary` line say next to them.

Conventions (docs/routes.md §2): decode cells only unless said; per layer, then the unweighted
mean over MoE layers (layers whose experts are streamed, expert_bytes > 0); overlap(A, B) =
|A ∩ B| / k; hot lists break count ties by first appearance (earliest step, then lowest slot).
Values are returned unrounded: rounding (half away from zero) happens only at display.

Every layer's decode cells are one boolean (N, n_expert) membership matrix, so overlaps,
counts and hot-list scores are array operations over all layers at once.
"""
from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal
from typing import Any

import numpy as np
import pandas as pd

from orchestrator.db.runs import Runs
from orchestrator.engines.route_trace import RouteTrace
from orchestrator.errors import ConfigError, NotFound
from orchestrator.record import load_record
from orchestrator.stats.values import DASH, is_missing

MIB = float(1 << 20)
GIB = float(1 << 30)
LAGS = range(1, 9)
PROMPT_LIST = 24          # the phone study's larger prompt-only hot list


def round_half_away(value: float, digits: int) -> float:
    """Half away from zero at `digits` decimals, on the value's shortest decimal repr (so a
    computed 52.5 rounds to 53, as the study printed it)."""
    return float(Decimal(repr(float(value))).quantize(Decimal(1).scaleb(-digits),
                                                      rounding=ROUND_HALF_UP))


def _cells(rows: pd.DataFrame, layers: list[int], k: int) -> np.ndarray:
    """(n_layers, n_cells, k) expert ids: each layer's cells in (turn, step) order, slots in
    router rank order. Every layer must have the same number of cells."""
    ordered = rows[rows["layer"].isin(layers)].sort_values(["layer", "turn", "step", "slot"],
                                                           kind="stable")
    counts = ordered.groupby("layer").size().reindex(layers, fill_value=0)
    if counts.nunique() != 1:
        raise ValueError(f"layers have different numbers of routed experts: "
                         f"{dict(counts[counts != counts.iloc[0]])} vs {counts.iloc[0]}")
    return ordered["expert"].to_numpy().reshape(len(layers), -1, k)


def _membership(ids: np.ndarray, n_expert: int) -> np.ndarray:
    """(L, N, k) ids -> (L, N, n_expert) booleans."""
    member = np.zeros(ids.shape[:2] + (n_expert,), dtype=bool)
    np.put_along_axis(member, ids, True, axis=2)
    return member


def _hot_lists(ids: np.ndarray, n_expert: int, size: int) -> list[np.ndarray]:
    """Per layer, the `size` most frequent ids of its cells (fewer if fewer appear), count ties
    broken by first appearance (cell order, then slot)."""
    layers, cells, k = ids.shape
    flat = ids.reshape(layers, cells * k)
    counts = np.zeros((layers, n_expert), dtype=np.int64)
    np.add.at(counts, (np.arange(layers)[:, None], flat), 1)
    first = np.full((layers, n_expert), cells * k, dtype=np.int64)
    positions = np.broadcast_to(np.arange(cells * k), flat.shape)
    np.minimum.at(first, (np.arange(layers)[:, None], flat), positions)
    hot = []
    for layer in range(layers):
        order = np.lexsort((first[layer], -counts[layer]))
        hot.append(order[:min(size, int((counts[layer] > 0).sum()))])
    return hot


def _score(hot: list[np.ndarray], member: np.ndarray, start: int, k: int) -> float:
    """Mean over layers of mean over cells i >= start of |hot ∩ D[i]| / k."""
    per_layer = [member[l, start:][:, h].sum(axis=1).mean() / k for l, h in enumerate(hot)]
    return float(np.mean(per_layer)) * 100


def _overlap_lag(member: np.ndarray, lag: int, k: int) -> float:
    both = member[:, lag:] & member[:, :-lag]
    return float((both.sum(axis=2) / k).mean(axis=1).mean()) * 100


def decode_cells(trace: RouteTrace) -> tuple[list[int], np.ndarray]:
    """(the MoE layers, their decode cells as an (L, N, k) array of expert ids): row l is
    layer layers[l]'s D_l in step order, slots in router rank order."""
    layers = trace.moe_layers()
    rows = trace.rows
    return layers, _cells(rows[rows["phase"] == 1], layers, trace.top_k)


def _concentration(member: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per layer: distinct experts, top-8 share % and experts for 80% of the activations."""
    n = member.shape[1]
    distinct = member.any(axis=1).sum(axis=1)
    ranked = -np.sort(-member.sum(axis=1), axis=1)               # per-expert counts, descending
    share = ranked.cumsum(axis=1) / (n * k)
    for_80 = (share < 0.8 - 1e-12).sum(axis=1) + 1
    top8 = ranked[:, :8].sum(axis=1) / (n * k) * 100
    return distinct, top8, for_80


def layer_figures(trace: RouteTrace) -> pd.DataFrame:
    """One row per MoE layer, the per-layer values that routing_figures averages
    (docs/routes.md §3): layer, expert_mib (one expert), distinct_experts, top8_share_pct,
    experts_for_80pct, temporal_pct (overlap with the previous token, lag 1)."""
    layers, ids = decode_cells(trace)
    k = trace.top_k
    member = _membership(ids, trace.n_expert)
    distinct, top8, for_80 = _concentration(member, k)
    both = member[:, 1:] & member[:, :-1]
    temporal = (both.sum(axis=2) / k).mean(axis=1) * 100 if ids.shape[1] > 1 \
        else np.full(len(layers), np.nan)
    return pd.DataFrame({
        "layer": layers,
        "expert_mib": [trace.layer_bytes[l][0] / MIB for l in layers],
        "distinct_experts": distinct, "top8_share_pct": top8,
        "experts_for_80pct": for_80, "temporal_pct": temporal})


def routing_figures(trace: RouteTrace) -> dict[str, Any]:
    """The figures computed from the trace alone (docs/routes.md §3)."""
    k, n_expert = trace.top_k, trace.n_expert
    layers, ids = decode_cells(trace)
    rows = trace.rows
    decode = rows[rows["phase"] == 1]
    n = ids.shape[1]
    member = _membership(ids, n_expert)
    expert_bytes = np.array([trace.layer_bytes[l][0] for l in layers], dtype=np.float64)
    dense_bytes = sum(d for _, d in trace.layer_bytes.values())
    distinct, top8, for_80 = _concentration(member, k)
    at = {layer: i for i, layer in enumerate(layers)}
    bank = float((expert_bytes * n_expert).sum()) / MIB
    touched = float((expert_bytes * distinct).sum()) / MIB
    figures: dict[str, Any] = {
        "n_moe_layers": len(layers), "n_expert": n_expert, "top_k": k, "decode_tokens": n,
        "distinct_experts_mean": float(distinct.mean()),
        "distinct_experts_min": int(distinct.min()), "distinct_experts_max": int(distinct.max()),
        "distinct_experts_layer0": int(distinct[at[0]]) if 0 in at else None,
        "one_expert_mib": float(expert_bytes.mean()) / MIB,
        "bank_mib": bank, "touched_mib": touched, "touched_pct": touched / bank * 100,
        "dense_mib": dense_bytes / MIB,
        "decode_hit_pct": float((decode["residency"] != 0).mean()) * 100,
        "pred_random_pct": k / n_expert * 100,
        "pred_temporal_pct": _overlap_lag(member, 1, k),
        "pred_static_pct": _score(_hot_lists(ids, n_expert, k), member, 1, k),
    }
    prefill = rows[rows["phase"] == 0]
    for key, size in (("pred_prompt_static_pct", k), ("pred_prompt_static_k24_pct", PROMPT_LIST)):
        figures[key] = _prompt_static(prefill, layers, member, n_expert, size, k)
    figures["prompt_static_k24_budget_gib"] = PROMPT_LIST * float(expert_bytes.sum()) / GIB
    for lag in LAGS:
        figures[f"overlap_lag{lag}_pct"] = _overlap_lag(member, lag, k) if lag < n else None
    figures.update(
        top8_share_layer0_pct=float(top8[at[0]]) if 0 in at else None,
        top8_share_layer5_pct=float(top8[at[5]]) if 5 in at else None,
        top8_share_mean_pct=float(top8.mean()),
        experts_for_80pct_median=float(np.median(for_80)),
        experts_for_80pct_min=int(for_80.min()), experts_for_80pct_max=int(for_80.max()))
    return figures


def _prompt_static(prefill: pd.DataFrame, layers: list[int], member: np.ndarray,
                   n_expert: int, size: int, k: int) -> float | None:
    """Hot list from each layer's prefill cells (they differ in number between layers: the
    last MoE layer may keep only the last prompt token), scored on every decode cell."""
    if prefill.empty:
        return None
    ordered = prefill.sort_values(["layer", "turn", "step", "slot"], kind="stable")
    hot = []
    for layer in layers:
        ids = ordered.loc[ordered["layer"] == layer, "expert"].to_numpy().reshape(1, -1, k)
        hot.append(_hot_lists(ids, n_expert, size)[0] if ids.size else np.array([], dtype=int))
    return _score(hot, member, 0, k)


def metrics_figures(tokens: pd.DataFrame) -> dict[str, Any]:
    """From the run's per-token rows (the `.metrics` CSV): major faults and wall time in four
    contiguous equal blocks, and their correlation."""
    out: dict[str, Any] = {}
    if len(tokens) < 4:
        return out
    blocks = np.array_split(np.arange(len(tokens)), 4)
    for column in ("majflt", "wall_ms"):
        values = pd.to_numeric(tokens[column], errors="coerce").to_numpy(dtype=float)
        means = [float(np.nanmean(values[b])) if np.isfinite(values[b]).any() else None
                 for b in blocks]
        if column == "majflt":
            out.update({f"majflt_q{i + 1}": m for i, m in enumerate(means)})
        else:
            out.update(wall_ms_q1=means[0], wall_ms_q4=means[3],
                       wall_q4_vs_q1_pct=(means[3] / means[0] - 1) * 100
                       if means[0] and means[3] is not None else None)
    pair = tokens[["majflt", "wall_ms"]].apply(pd.to_numeric, errors="coerce").dropna()
    out["corr_majflt_wall_ms"] = float(pair["majflt"].corr(pair["wall_ms"])) \
        if len(pair) > 2 else None
    return out


def summary_figures(trailer: dict[str, Any], figures: dict[str, Any]) -> dict[str, Any]:
    """From the `# summary` line, verbatim, and the cache budget against the trace's figures."""
    def number(key: str) -> float | None:
        value = trailer.get(key)
        return float(value) if isinstance(value, (int, float)) else None

    s_tok, compute, budget = number("s/tok"), number("compute_s/tok"), number("cache_budget_MiB")
    out: dict[str, Any] = {"summary_tok_s": number("tok/s"),
                           "summary_cache_hit_pct": number("cache_hit_pct"),
                           "summary_compute_s_per_tok": compute,
                           "compute_share_pct": compute / s_tok * 100 if compute is not None
                           and s_tok else None}
    if budget is not None and figures.get("one_expert_mib"):
        experts = round_half_away(budget / figures["one_expert_mib"], 0)
        out.update(cache_budget_experts=int(experts),
                   cache_budget_experts_per_layer=experts / figures["n_moe_layers"],
                   cache_budget_pct_of_touched=budget / figures["touched_mib"] * 100)
    return out


def route_figures(trace: RouteTrace, tokens: pd.DataFrame | None = None,
                  trailer: dict[str, Any] | None = None) -> dict[str, Any]:
    """Every figure of docs/routes.md §3 that the inputs allow, under its JSON key."""
    figures = routing_figures(trace)
    if tokens is not None:
        figures.update(metrics_figures(tokens))
    if trailer:
        figures.update(summary_figures(trailer, figures))
    return figures


# ---- a stored run --------------------------------------------------------------------------

def stored_trace(store: Any, run_id: int) -> tuple[RouteTrace, Any]:
    """(the run's trace, its RunRecord) from the store; NotFound when the run does not
    exist or carries no route trace."""
    row = Runs(store).get(run_id)
    if row is None:
        raise NotFound(f"run {run_id}: no such run")
    record = load_record(row.summary)
    meta = record.route_trace
    rows = store.route_frame(run_id)
    if not meta or rows.empty:
        raise ConfigError(f"run {run_id} ({row.config}) has no route trace: import a "
                          f"<tag>.route.csv with its run, or run with route_trace: true")
    return RouteTrace.from_stored(meta, rows), record


def run_figures(store: Any, run_id: int) -> tuple[dict[str, Any], RouteTrace]:
    """Every docs/routes.md §3 figure of a stored run: its trace, its token rows and its
    `# summary` line."""
    trace, record = stored_trace(store, run_id)
    tokens = store.frame("token", [run_id])
    trailer = record.extra.get("trailer") or {}
    return route_figures(trace, tokens if not tokens.empty else None, trailer), trace


# ---- display -------------------------------------------------------------------------------

# key, label, unit, decimals (the published precision)
ROWS: tuple[tuple[str, str, str, int], ...] = (
    ("n_moe_layers", "MoE layers", "", 0), ("n_expert", "experts per layer", "", 0),
    ("top_k", "routed per token (k)", "", 0), ("decode_tokens", "decoded tokens", "", 0),
    ("one_expert_mib", "one expert", "MiB", 2), ("bank_mib", "expert bank", "MiB", 0),
    ("touched_mib", "touched in decode", "MiB", 0), ("touched_pct", "touched in decode", "%", 0),
    ("dense_mib", "dense (non-streamed)", "MiB", 0),
    ("distinct_experts_mean", "distinct experts per layer, mean", "", 0),
    ("distinct_experts_min", "distinct experts per layer, min", "", 0),
    ("distinct_experts_max", "distinct experts per layer, max", "", 0),
    ("distinct_experts_layer0", "distinct experts, layer 0", "", 0),
    ("decode_hit_pct", "decode rows resident (trace)", "%", 1),
    ("pred_random_pct", "predictor: random", "%", 1),
    ("pred_temporal_pct", "predictor: previous token", "%", 1),
    ("pred_static_pct", "predictor: static hot list (k)", "%", 1),
    ("pred_prompt_static_pct", "predictor: prompt hot list (k)", "%", 1),
    ("pred_prompt_static_k24_pct", "predictor: prompt hot list (24)", "%", 1),
    ("prompt_static_k24_budget_gib", "prompt hot list (24) size", "GiB", 2),
    *((f"overlap_lag{g}_pct", f"overlap at lag {g}", "%", 1) for g in LAGS),
    ("top8_share_layer0_pct", "top-8 share, layer 0", "%", 1),
    ("top8_share_layer5_pct", "top-8 share, layer 5", "%", 1),
    ("top8_share_mean_pct", "top-8 share, mean", "%", 1),
    ("experts_for_80pct_median", "experts for 80% of activations, median", "", 1),
    ("experts_for_80pct_min", "experts for 80% of activations, min", "", 0),
    ("experts_for_80pct_max", "experts for 80% of activations, max", "", 0),
    *((f"majflt_q{q}", f"major faults per token, quarter {q}", "", 1) for q in range(1, 5)),
    ("wall_ms_q1", "wall time per token, first quarter", "ms", 1),
    ("wall_ms_q4", "wall time per token, last quarter", "ms", 1),
    ("wall_q4_vs_q1_pct", "last vs first quarter", "%", 1),
    ("corr_majflt_wall_ms", "corr(major faults, wall time)", "", 2),
    ("summary_tok_s", "decode (summary)", "tok/s", 3),
    ("summary_cache_hit_pct", "cache hit (summary)", "%", 1),
    ("summary_compute_s_per_tok", "compute (summary)", "s/token", 3),
    ("compute_share_pct", "compute share of decode time", "%", 1),
    ("cache_budget_experts", "cache budget", "experts", 0),
    ("cache_budget_experts_per_layer", "cache budget per layer", "experts", 1),
    ("cache_budget_pct_of_touched", "cache budget vs touched", "%", 1),
)


def display(value: Any, decimals: int) -> str:
    """A figure at its published precision, half away from zero; "—" when not measured."""
    if is_missing(value):
        return DASH
    return f"{round_half_away(value, decimals):.{decimals}f}"


# ---- cache replay (docs/routes.md §5, results/replay.py) -----------------------------------

def replay_trace(trace: RouteTrace, budgets: list[float], policies: list[str],
                 seed: int = 0) -> dict[str, Any]:
    """`orch routes --replay`'s data: {"replay": [...], "token_cycle_mib": T}. An unknown
    policy raises ValueError naming the known ones."""
    from orchestrator.results.replay import POLICIES, replay, token_cycle_mib

    bad = [p for p in policies if p not in POLICIES]
    if bad or not policies:
        raise ValueError(f"unknown polic(ies) {', '.join(bad) or '(none)'}; "
                         f"choose from {', '.join(POLICIES)}")
    expert_bytes = {layer: size for layer, (size, _) in trace.layer_bytes.items()}
    return {"replay": replay(trace.rows, expert_bytes, budgets, policies, seed=seed),
            "token_cycle_mib": token_cycle_mib(expert_bytes, trace.top_k)}
