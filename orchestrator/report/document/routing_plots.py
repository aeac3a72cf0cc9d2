"""The Routing section's figures (matplotlib, Agg), one set per traced run.

- steps: decode step × layer, each cell how many of the k experts the layer routed at that
  token it had also routed at the token before (0..k): locality at a glance, the raw material
  of the temporal predictor and of any LRU cache.
- popularity: layer × popularity rank, each cell the share of the layer's decode activations
  that its r-th most routed expert took, with the 80% point per layer marked: how concentrated
  each layer is (the Celeron study's "experts for 80%").
- lags: overlap with the token G back, G = 1..8, against the random baseline k/n.
- replay: hit % against cache budget per policy (offline replay), decode-only and cumulative,
  the token cycle T marked, measured cache hits of real runs as numbered markers.

Files and embedding go through report/document/plots.py (emit), so they behave like the group figures.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from orchestrator.report.format.labels import run_label
from orchestrator.report.document.plots import (
    Plot,
    _legend_outside,
    _pyplot,
    emit,
    figure_dir,
    wrap,
)
from orchestrator.report.document.routing import POLICIES, RoutingSection, budget_text
from orchestrator.results.routes import LAGS

POLICY_STYLE = {"belady": ("k", "-", "o"), "lru": ("C0", "-", "s"), "lfu": ("C1", "--", "^"),
                "layer": ("C2", "-.", "v"), "layerlfu": ("C4", ":", "D")}
POLICY_NAME = {"belady": "belady (optimum)", "lru": "lru (global)", "lfu": "lfu (global)",
               "layer": "layer (LRU per layer)", "layerlfu": "layerlfu (LFU per layer)"}


def _layer_ticks(ax: Any, layers: list[int]) -> None:
    step = max(1, len(layers) // 10)
    idx = list(range(0, len(layers), step))
    ax.set_yticks(idx, [str(layers[i]) for i in idx])


def _steps(s: RoutingSection, plt: Any) -> tuple[Any, str]:
    from matplotlib.colors import BoundaryNorm

    k = s.top_k
    layers = s.layers["layer"].tolist()
    n_cols = s.overlap.shape[1]
    fig, ax = plt.subplots(figsize=(10, 0.14 * len(layers) + 2.2))
    cmap = plt.get_cmap("viridis", k + 1)
    norm = BoundaryNorm(np.arange(-0.5, k + 1.5), cmap.N)
    image = ax.imshow(s.overlap, aspect="auto", interpolation="nearest", cmap=cmap, norm=norm,
                      origin="lower", extent=(1.5, n_cols + 1.5, -0.5, len(layers) - 0.5))
    bar = fig.colorbar(image, ax=ax, ticks=range(k + 1), pad=0.015)
    bar.set_label(wrap(f"experts shared with the previous token (of {k})", 28),
                  fontsize="small")
    _layer_ticks(ax, layers)
    ax.set_xlabel("decode token")
    ax.set_ylabel("layer")
    ax.set_title(wrap(f"Token-to-token expert overlap: {run_label(s.run)}", 80), fontsize="medium")
    caption = (f"Decode token × MoE layer: each cell is how many of the {k} experts the layer "
               f"routed at that token it had also routed at the token before (0 = none, {k} "
               f"= the same set; the first token has no predecessor and is not drawn); a "
               f"layer's mean over its row, ÷ {k}, is its temporal-predictor hit")
    return fig, caption


def _popularity(s: RoutingSection, plt: Any) -> tuple[Any, str]:
    from matplotlib.colors import LogNorm

    layers = s.layers["layer"].tolist()
    share = np.ma.masked_equal(s.popularity, 0)
    distinct_max = int(s.layers["distinct_experts"].max())
    fig, ax = plt.subplots(figsize=(10, 0.14 * len(layers) + 2.2))
    cmap = plt.get_cmap("magma_r").with_extremes(bad="0.93")
    positive = s.popularity[s.popularity > 0]
    image = ax.imshow(share, aspect="auto", interpolation="nearest", cmap=cmap, origin="lower",
                      norm=LogNorm(vmin=float(positive.min()), vmax=float(positive.max())),
                      extent=(0.5, s.popularity.shape[1] + 0.5, -0.5, len(layers) - 0.5))
    lo, hi = float(positive.min()), float(positive.max())
    ticks = [t for t in (0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50) if lo <= t <= hi]
    bar = fig.colorbar(image, ax=ax, pad=0.015, ticks=ticks or None)
    if ticks:
        bar.ax.set_yticklabels([f"{t:g}" for t in ticks])
        bar.ax.minorticks_off()
    bar.set_label(wrap("share of the layer's decode activations, % (log scale)", 28),
                  fontsize="small")
    y = np.arange(len(layers))
    ax.plot(s.layers["experts_for_80pct"], y, ls="none", marker="D", ms=4.5, mew=0.8,
            mfc="white", mec="k", label="experts for 80% of the activations")
    ax.plot(s.layers["distinct_experts"] + 0.5, y, ls="none", marker="|", ms=8, mew=1.2,
            color="0.3", label="distinct experts (grey after: never routed)")
    ax.set_xlim(0.5, min(s.popularity.shape[1], distinct_max + 8) + 0.5)
    _layer_ticks(ax, layers)
    ax.set_xlabel("expert popularity rank within the layer (1 = most routed)")
    ax.set_ylabel("layer")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.11), ncol=2, fontsize="small",
              frameon=False)
    ax.set_title(wrap(f"Per-layer expert popularity: {run_label(s.run)}", 80), fontsize="medium")
    caption = ("MoE layer × popularity rank: each cell is the share of the layer's decode "
               "activations (N tokens × k) taken by its r-th most routed expert, colour on a "
               "log scale, grey = never routed in decode; white diamond = the fewest experts that "
               "carry 80% of the layer's activations, dark tick = the layer's distinct experts")
    return fig, caption


def _lags(s: RoutingSection, plt: Any) -> tuple[Any, str]:
    f = s.figures
    lags = [g for g in LAGS if f.get(f"overlap_lag{g}_pct") is not None]
    fig, ax = plt.subplots(figsize=(7, 3.6))
    ax.plot(lags, [f[f"overlap_lag{g}_pct"] for g in lags], marker="o", color="C0",
            label="overlap with the token G back")
    ax.axhline(f["pred_random_pct"], color="0.4", ls="--", lw=1,
               label=f"random: k/n = {f['pred_random_pct']:.1f}%")
    if f.get("pred_static_pct") is not None:
        ax.axhline(f["pred_static_pct"], color="C1", ls=":", lw=1.2,
                   label=wrap(f"static hot list of k: {f['pred_static_pct']:.1f}%", 30))
    ax.set_xticks(lags)
    ax.set_ylim(0, max(100 * 0.5, max(f[f"overlap_lag{g}_pct"] for g in lags) * 1.15))
    ax.set_xlabel("lag G (tokens)")
    ax.set_ylabel("experts shared, % of k")
    ax.grid(alpha=0.3)
    ax.set_title(wrap(f"Lag profile: {run_label(s.run)}", 60), fontsize="medium")
    _legend_outside(ax)
    caption = ("Mean over layers of the share of a token's k experts that the token G "
               "decode steps earlier also routed (lag 1 = the temporal predictor), against "
               "random guessing (k / n experts) and the static hot list")
    return fig, caption


def _annotate(ax: Any, points: list[tuple[float, float, str]], color: str) -> None:
    """Numbered markers; points that coincide (to the drawn precision) share one label."""
    merged: dict[tuple[float, float], list[str]] = {}
    for x, y, label in points:
        merged.setdefault((round(x, 0), round(y, 1)), []).append(label)
    for (x, y), labels in merged.items():
        ax.plot([x], [y], ls="none", marker="*", ms=13, mec="k", mew=0.7, color=color,
                zorder=5)
        ax.annotate(",".join(labels), (x, y), xytext=(0, -9), textcoords="offset points",
                    ha="center", va="top", fontsize="small", fontweight="bold", zorder=6,
                    bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "0.6", "lw": 0.6})


def _replay(s: RoutingSection, plt: Any) -> tuple[Any, str]:
    from matplotlib.lines import Line2D

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.4), sharex=True, sharey=True)
    by = {p: [r for r in s.replay if r["policy"] == p] for p in POLICIES}
    for ax, key, title in ((axes[0], "hit_pct_decode", "decode lookups only"),
                           (axes[1], "hit_pct_cum", "cumulative (prefill included)")):
        for policy, rows in by.items():
            color, ls, marker = POLICY_STYLE[policy]
            ax.plot([r["budget_mib"] for r in rows], [r[key] for r in rows], color=color,
                    ls=ls, marker=marker, ms=4, lw=1.4, label=POLICY_NAME[policy])
        ax.axvline(s.token_cycle_mib, color="0.5", ls=(0, (1, 2)), lw=1)
        ax.text(s.token_cycle_mib, 98, f"T = {s.token_cycle_mib:.0f} MiB ", fontsize="small",
                color="0.35", va="top", ha="right", rotation=90)
        ax.set_title(title, fontsize="medium")
        ax.set_xlabel("cache budget, MiB")
        ax.grid(alpha=0.3)
        ax.set_xlim(left=0)
    axes[0].set_ylim(0, 100)
    axes[0].set_ylabel("cache hit %")
    own = s.figures.get("decode_hit_pct")
    if s.budget_mib and own is not None:
        traced = next((p for p in s.measured if p.traced), None)
        _annotate(axes[0], [(s.budget_mib, own, str(traced.number) if traced else "trace")],
                  "gold")
    if s.measured:
        _annotate(axes[1], [(p.budget_mib, p.hit_pct, str(p.number)) for p in s.measured],
                  "gold")
    handles, _ = axes[1].get_legend_handles_labels()
    handles.append(Line2D([], [], ls="none", marker="*", ms=11, mec="k", color="gold",
                          label=wrap("measured (numbers: the table below)", 26)))
    _legend_outside(axes[1], handles)
    fig.suptitle(wrap(f"Expert-cache replay: {run_label(s.run)}", 90), fontsize="medium")
    caption = (f"Hit % of an expert cache against its budget, replayed offline from this trace "
               f"through each policy (deterministic: no interval); left decode lookups only, "
               f"right cumulative with the prefill (bmoe's summary figure). Dotted line: one "
               f"token cycle T = {s.token_cycle_mib:.0f} MiB (k experts in every layer); a "
               f"global LRU smaller than T gets almost no decode hits. Stars are measured on "
               f"the device in real runs, numbered as in the table: left, the traced run's own "
               f"decode hit at {budget_text(s.budget_mib) if s.budget_mib else '?'} MiB; right, "
               f"each config's summary cache hit at its budget (runs with another prompt or "
               f"length need not fall on this trace's curves)")
    return fig, caption


def figures(s: RoutingSection) -> list[tuple[str, Any, str]]:
    """(kind, figure, caption) of one traced run; the caller closes them."""
    plt = _pyplot()
    out = [("steps", *_steps(s, plt))] if s.overlap.shape[1] else []   # one token: no pairs
    out.append(("popularity", *_popularity(s, plt)))
    if any(s.figures.get(f"overlap_lag{g}_pct") is not None for g in LAGS):
        out.append(("lags", *_lags(s, plt)))
    out.append(("replay", *_replay(s, plt)))
    return out


def draw(sections: list[RoutingSection], doc: Path | None) -> None:
    """Each section's figures into its `plots`: PNGs in `<doc stem>_files/` with `doc` (a
    markdown file), else embedded."""
    if not sections:
        return
    plt = _pyplot()
    out_dir = figure_dir(doc)
    for s in sections:
        s.plots = [emit(fig, plt, out_dir, f"{s.slug}-{kind}", kind, caption)
                   for kind, fig, caption in figures(s)]


__all__ = ["Plot", "draw", "figures"]
