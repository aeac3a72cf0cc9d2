"""The report's figure of a session run (docs/sessions.md): the device's memory over the run —
process RSS, swap and free RAM (MemAvailable) from its samples — with each turn drawn as a
shaded span and the idle gaps between them left clear, so a reader sees the cache being
reclaimed during an idle gap and re-warmed by the next turn. Drawing only: the spans come
from the turns' recorded times, else from the samples' turn numbers (plot_data)."""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from orchestrator.report.document import plot_data
from orchestrator.report.document.plot_text import legend_outside, wrap
from orchestrator.report.format.labels import model_on_device
from orchestrator.results.report_data import Group, RunView

MAX_RUNS = 4            # session runs drawn per group (the first ones): a figure each
PANELS = (("rss_kb", "process RSS"), ("swap_kb", "swap used"), ("mem_avail_kb", "free RAM"))


def _panels(samples: pd.DataFrame) -> list[tuple[str, str, np.ndarray]]:
    out = []
    for column, name in PANELS:
        values = plot_data.sample_column(samples, column)
        if values is not None and np.isfinite(values).any():
            out.append((column, name, values))
    return out


def session_figure(run: RunView, samples: pd.DataFrame, plt: Any) -> tuple[Any, str] | None:
    """One session run's memory over time with its turns shaded; None without samples."""
    mine = samples[samples["run_id"] == run.id].sort_values("t_ms", kind="stable")
    if mine.empty:
        return None
    panels = _panels(mine)
    if not panels:
        return None
    t = mine["t_ms"].to_numpy(dtype=float) / 1000.0
    spans = plot_data.turn_spans(run.row.record.turns, mine)
    fig, axes = plt.subplots(len(panels), 1, figsize=(8, 2.2 * len(panels) + 0.8), sharex=True,
                             squeeze=False)
    for ax, (_, name, values) in zip(axes[:, 0], panels):
        top = np.nanmax(values)
        unit, div = ("GiB", 1048576.0) if top >= 1048576 else ("MiB", 1024.0)
        ax.plot(t, values / div, color="tab:blue", lw=1.2, marker="." if len(t) <= 200 else None,
                ms=3)
        for turn, start, end in spans:
            if end > start:
                ax.axvspan(start, end, color="tab:orange", alpha=0.18, lw=0)
            else:       # only where the turn began is known
                ax.axvline(start, color="tab:orange", lw=1.0, ls="--")
        if not top > 0:        # none used (swap): a flat line on 0, not an axis around it
            ax.set_ylim(0, 1)
        ax.set_ylabel(wrap(f"{name} ({unit})", 20), fontsize="small")
        ax.ticklabel_format(axis="y", useOffset=False, style="plain")
        ax.grid(alpha=0.3)
    top_ax = axes[0, 0]
    for i, (turn, start, end) in enumerate(spans):
        # turn numbers over their spans, every other one a line higher: short turns close
        # together would otherwise print over each other
        top_ax.annotate(f"turn {turn}", ((start + end) / 2, 1.0 + 0.07 * (i % 2)),
                        xycoords=("data", "axes fraction"), ha="center", va="bottom",
                        fontsize="x-small")
    from matplotlib.patches import Patch

    legend_outside(top_ax, [Patch(color="tab:orange", alpha=0.3, label="a turn (generating)"),
                             Patch(facecolor="white", edgecolor="0.6", label="idle between turns")])
    axes[-1, 0].set_xlabel("seconds since the run started")
    title = f"Session run {run.id} ({run.config_label}): memory over its turns"
    top_ax.set_title(wrap(title, 70), fontsize="medium", pad=22)
    shown = ", ".join(name for _, name, _ in panels)
    idle = [t for t in run.figures.turns or () if t.idle_before_s]
    gaps = ("; idle gaps before turn " + ", ".join(f"{t.turn} ({t.idle_before_s:.0f} s)"
                                                    for t in idle)) if idle else ""
    caption = (f"{shown[0].upper() + shown[1:]} of session run {run.id} "
               f"({model_on_device(run.row.model or '-', run.row.device, run.row.engine)}) "
               f"from the device's samples, turns shaded{gaps}; free RAM = MemAvailable")
    return fig, caption


def figures(group: Group, samples: pd.DataFrame | None, plt: Any) -> list[tuple[str, Any, str]]:
    """(kind, figure, caption) for the group's first MAX_RUNS session runs with samples."""
    if samples is None or not len(samples):
        return []
    out = []
    for run in [r for r in group.runs if r.figures.turns][:MAX_RUNS]:
        drawn = session_figure(run, samples, plt)
        if drawn is not None:
            out.append((f"session-{run.id}", *drawn))
    return out
