"""The report's trajectory figure: the per-token decode rate over the run, one line per config
(its ok repeats pooled at each token), drawn from plot_data.trajectory.

The first WARM_TOKENS tokens are drawn one by one and the rest as a rolling rate. On a plain
token axis the warm-up is a sliver at the left where every config's line crosses the others,
so it gets room of its own: with up to PANEL_LIMIT configs, a broken x axis (a left panel of
the first WARM_TOKENS tokens, the rest of the run to its right, one y axis); past that, one
panel per config on a log x axis (a line per panel, the warm-up as wide as the rest). A trim
is shaded over the tokens it leaves out, and every caption states it.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from orchestrator.report.document import plot_data
from orchestrator.report.document.plot_text import (
    legend_outside,
    shade_trim,
    trim_caption,
    trim_handle,
    wrap,
)
from orchestrator.report.format.labels import group_title
from orchestrator.results.report_data import Group

WARM_TOKENS = 32        # tokens drawn one by one: warm-up lasts a few to a few dozen tokens
WINDOW = 16             # tokens per point of the rolling rate after them
PANEL_LIMIT = 6         # more configs than this: one panel per config
WARM_GID = "warm-up"    # the line where single tokens end (small multiples)

Line = tuple[np.ndarray, np.ndarray, int]     # token numbers, tok/s, leading single tokens


def _clip(values: list[np.ndarray]) -> float | None:
    """A top for the y axis when a few single tokens (1000 / a tiny wall time) would set the
    scale and flatten every line; None when nothing stands out."""
    vals = np.concatenate([v[np.isfinite(v)] for v in values]) if values else np.empty(0)
    if vals.size < 20:
        return None
    p99 = float(np.percentile(vals, 99))
    return p99 * 1.15 if vals.max() > 1.6 * p99 else None


def _plot(ax: Any, x: np.ndarray, y: np.ndarray, singles: int, style: Any, **kw: Any) -> None:
    """A config's line, its first `singles` points (single tokens) as markers."""
    if len(x):
        kw = {"lw": 1.3, "ms": 2.8, **kw}
        ax.plot(x, y, color=style.color, linestyle=style.linestyle, marker="o",
                markevery=slice(0, singles), **kw)


def _broken(order: list[str], lines: dict[str, Line], names: dict[str, str],
            style_of: dict[str, Any], plt: Any) -> tuple[Any, list[Any]]:
    """The warm-up panel (tokens 1..WARM_TOKENS) and the run panel (the rest), one y axis."""
    fig, (warm, run) = plt.subplots(1, 2, figsize=(9.5, 4), sharey=True,
                                    gridspec_kw={"width_ratios": [1, 2.2], "wspace": 0.05})
    last = 0.0
    for config in order:
        x, y, head = lines[config]
        cut = int(np.searchsorted(x, WARM_TOKENS, side="right"))
        label = wrap(names.get(config, config), 30)
        # thinner lines, bigger markers: the warm-up's points, not its zigzag, are the data
        _plot(warm, x[:cut], y[:cut], cut, style_of[config], label=label, gid=config,
              lw=0.8, ms=3.6)
        _plot(run, x[cut:], y[cut:], max(head - cut, 0), style_of[config], gid=config)
        last = max(last, float(x[-1]))
    warm.set_xlim(0.5, WARM_TOKENS + 0.5)
    run.set_xlim(WARM_TOKENS + 0.5, max(last, WARM_TOKENS + 1.0) + 0.5)
    warm.set_xticks([1, 8, 16, 24, 32])
    # the break: no spine between the panels, a pair of slashes on each side
    warm.spines["right"].set_visible(False)
    run.spines["left"].set_visible(False)
    run.tick_params(axis="y", left=False)
    marks = {"marker": [(-1, -1.5), (1, 1.5)], "markersize": 9, "linestyle": "none",
             "color": "k", "mec": "k", "mew": 1, "clip_on": False}
    warm.plot([1, 1], [0, 1], transform=warm.transAxes, gid="break", **marks)
    run.plot([0, 0], [0, 1], transform=run.transAxes, gid="break", **marks)
    warm.set_title(f"first {WARM_TOKENS} tokens, one by one", fontsize="small")
    run.set_title(f"then the rate over the trailing {WINDOW} tokens", fontsize="small")
    warm.set_ylabel("tok/s (1000 / wall_ms)")
    for ax in (warm, run):
        ax.set_xlabel("token")
    return fig, [warm, run]


def _multiples(order: list[str], lines: dict[str, Line], names: dict[str, str],
               style_of: dict[str, Any], plt: Any) -> tuple[Any, list[Any]]:
    """One panel per config, shared axes, log x: the warm-up as wide as the rest."""
    from matplotlib.ticker import FormatStrFormatter, NullFormatter

    ncols = 3 if len(order) <= 9 else 4
    nrows = -(-len(order) // ncols)
    # constrained: long (wrapped) panel titles push the rows apart instead of into the title
    fig, axes = plt.subplots(nrows, ncols, figsize=(3.3 * ncols, 2.3 * nrows + 0.8),
                             sharex=True, sharey=True, squeeze=False, layout="constrained")
    for ax in axes.flat[len(order):]:
        ax.set_visible(False)
    for config, ax in zip(order, axes.flat):
        x, y, head = lines[config]
        _plot(ax, x, y, head, style_of[config], gid=config)
        ax.set_title(wrap(names.get(config, config), 34), fontsize="small")
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(FormatStrFormatter("%g"))   # 1, 10, 100: not 10^0
        ax.xaxis.set_minor_formatter(NullFormatter())
    last = max(float(lines[c][0][-1]) for c in order)
    axes.flat[0].set_xlim(0.8, last * 1.1)
    for ax in axes[-1]:
        ax.set_xlabel("token (log scale)")
    for ax in axes[:, 0]:
        ax.set_ylabel("tok/s")
    return fig, list(axes.flat[:len(order)])


def trajectory_figure(group: Group, rates: pd.DataFrame, names: dict[str, str],
                      style_of: dict[str, Any], trim: int, plt: Any) -> tuple[Any, str] | None:
    """(figure, caption) of the group's per-token rate over the run; None without tokens."""
    order = [a.config for a in group.configs if a.config in set(rates["config"])]
    if not order:
        return None
    lines = {c: plot_data.trajectory(rates[rates["config"] == c], WARM_TOKENS, WINDOW)
             for c in order}
    rolled = any(head < len(x) for x, _, head in lines.values())
    small = len(order) > PANEL_LIMIT
    title = f"Per-token decode rate: {group_title(group)}"
    if small:
        fig, panels = _multiples(order, lines, names, style_of, plt)
    elif rolled:
        fig, panels = _broken(order, lines, names, style_of, plt)
    else:
        fig, ax = plt.subplots(figsize=(8, 4))
        for config in order:
            x, y, head = lines[config]
            _plot(ax, x, y, head, style_of[config], label=wrap(names.get(config, config), 30),
                  gid=config)
        ax.set_xlabel("token")
        ax.set_ylabel("tok/s (1000 / wall_ms)")
        ax.set_title(wrap(title, 70), fontsize="medium")
        panels = [ax]
    top = _clip([lines[c][1] for c in order])
    for ax in panels:
        ax.set_ylim(bottom=0, top=top)
        ax.grid(alpha=0.3)
        if small and rolled:
            # where single tokens end and the rolling rate begins
            ax.axvline(WARM_TOKENS + 0.5, color="0.55", lw=0.8, ls=(0, (1, 2)), gid=WARM_GID)
        shade_trim(ax, trim)
        if top is not None:
            over = sum(int((y > top).sum()) for line in ax.get_lines()
                       if line.get_gid() in lines for y in [np.asarray(line.get_ydata())])
            if over:
                ax.text(0.01, 0.98, f"{over} point(s) above the scale", transform=ax.transAxes,
                        va="top", fontsize="x-small", color="0.35")
    if small:
        what = (f"markers: the first {WARM_TOKENS} tokens one by one, then a {WINDOW}-token "
                f"rolling rate" if rolled else "every token, unsmoothed")
        shaded = f"; shaded: the first {trim} tokens, left out (trim {trim})" if trim else ""
        fig.suptitle(wrap(title, 90) + f"\n({what}{shaded})", fontsize="medium")
    else:
        if len(panels) > 1:
            fig.suptitle(wrap(title, 80), fontsize="medium")
        handles, _ = panels[0].get_legend_handles_labels()
        legend_outside(panels[-1], handles + ([trim_handle(trim)] if trim else []))
    repeats = any(len(a.runs) > 1 for a in group.configs)
    caption = ("Per-token decode rate over the run, tok/s (the tables' unit)"
               + (" over the ok repeats of each config at each token" if repeats else "")
               + ": " + _how(rolled, small) + "; " + trim_caption(trim)
               + (" (shaded)" if trim else ""))
    return fig, caption


def _how(rolled: bool, small: bool) -> str:
    if not rolled:
        how = "every token, unsmoothed"
    elif small:
        how = (f"markers = each of the first {WARM_TOKENS} tokens (the warm-up, unsmoothed), "
               f"after the dotted line the rate over the trailing {WINDOW} tokens (tokens / "
               f"Σ decode time, the tables' mean over a window); the x axis is logarithmic, "
               f"so the warm-up is as wide as the rest")
    else:
        how = (f"left, each of the first {WARM_TOKENS} tokens (the warm-up, unsmoothed) on an "
               f"axis of its own so the configs' warm-ups can be told apart; right, from "
               f"token {WARM_TOKENS + 1} on, the rate over the trailing {WINDOW} tokens "
               f"(tokens / Σ decode time, the tables' mean over a window)")
    return how + ("; one panel per config, shared axes" if small else "")
