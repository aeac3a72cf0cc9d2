"""The report's figures (matplotlib, Agg), per (model, device) group.

- trajectory (trajectory_plot.py): the per-token decode rate over the run, one line per
  config: the first tokens unsmoothed (warm-up) on an axis of their own, then a rolling rate.
- distribution: the per-token rate per config (box p25-p75, whiskers p5-p95, median) with the
  tables' headline mean marked, which a skewed distribution can put far from the median.
- device: process RSS, free RAM and, only where a sensor was read, temperatures and power
  (docs/energy.md) over each run from the agent's samples; for runs without samples
  (imports), RSS and free RAM per token from the engine's per-token memory columns. Each run
  is a line: its config's colour, its repeat's marker.

Every figure has its legend outside the axes, names configs by their labels (plot_data.
config_names), wraps long labels instead of cutting them, gives each config its own colour
(+ line style past 10 configs), the same in all figures of the group, shades the tokens a
trim leaves out where its x axis is the token, and states the trim in its caption. A PNG is
written to `<doc>_files/` for markdown, or embedded as a data: URI for a self-contained HTML page.
"""
from __future__ import annotations

import base64
import io
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np
import pandas as pd

from orchestrator.report.document import plot_data, session_plots
from orchestrator.report.document.plot_text import legend_outside as _legend_outside
from orchestrator.report.document.plot_text import (
    shade_trim,
    trim_caption,
    trim_handle,
    wrap,
)
from orchestrator.report.document.trajectory_plot import trajectory_figure
from orchestrator.report.format.labels import group_title
from orchestrator.results.report_data import Group, ReportData

LINESTYLES = ("-", "--", ":", "-.")
# a repeat's marker (and, while colour alone tells the configs apart, its line style) in the
# figures that draw each run: the device figure
REPEAT_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
REPEAT_MARKS = 8        # markers per run line when its samples are too dense to mark each


@dataclass
class Plot:
    kind: str           # trajectory | distribution | device
    caption: str
    link: str           # relative to the document (URL-quoted), or a data: URI
    path: Path | None = None


@dataclass(frozen=True)
class Style:
    color: tuple[float, float, float, float]    # RGBA
    linestyle: str


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")         # no display; also safe when called from a worker thread
    import matplotlib.pyplot as plt

    return plt


def styles(n: int) -> list[Style]:
    """n styles, no colour used twice: tab10 up to 10, else n hues of a continuous map, with
    the line style cycling so that neighbouring (similar) hues still look different."""
    from matplotlib import colormaps

    # tab10 at 0..n-1 is its first n listed colours; turbo is sampled evenly, neighbours in
    # the config order a stride apart on the map: configs listed next to each other (often
    # the ones compared) get hues far apart
    at = np.arange(n) if n <= 10 else np.linspace(0.05, 0.95, n)[_stride_order(n)]
    rgba = np.asarray(colormaps["tab10" if n <= 10 else "turbo"](at))
    return [Style((float(r), float(g), float(b), float(a)),
                  LINESTYLES[i % len(LINESTYLES)] if n > 10 else "-")
            for i, (r, g, b, a) in enumerate(rgba)]


def _stride_order(n: int) -> np.ndarray:
    """0..n-1 visited with a stride coprime to n near 0.38 n (a permutation)."""
    stride = next(k for k in range(max(1, round(0.38 * n)), n + 1) if math.gcd(k, n) == 1)
    return (np.arange(n) * stride) % n


def _png(fig: Any, plt: Any) -> bytes:
    buf = io.BytesIO()
    # "tight" grows the canvas to what is drawn: legends outside the axes and long labels
    fig.savefig(buf, format="png", dpi=96, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


# ---- distribution ------------------------------------------------------------------------

def _distribution(group: Group, tokens: pd.DataFrame, names: dict[str, str], trim: int,
                  plt: Any) -> tuple[Any, str] | None:
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    rows = [(a, plot_data.per_token_tps(tokens, a.ids, trim)) for a in group.configs if a.runs]
    rows = [(a, v) for a, v in rows if v.size]
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(8, 0.42 * len(rows) + 1.4))
    pos = np.arange(1, len(rows) + 1)
    # whiskers at p5/p95, the tables' columns; single fast tokens would otherwise set the scale
    ax.boxplot([v for _, v in rows], positions=pos, orientation="horizontal", whis=(5, 95),
               showfliers=False, widths=0.6, medianprops={"color": "C1", "lw": 1.8})
    # the diamond is over the box's tokens: with a trim, the tables' "mean after trim"
    key = "mean_after_trim" if trim else "mean"
    means = [a.values.get(key) for a, _ in rows]
    shown = [(m, p) for m, p in zip(means, pos) if isinstance(m, (int, float))]
    if shown:
        ax.plot([m for m, _ in shown], [p for _, p in shown], ls="none", marker="D", ms=6,
                color="C3", zorder=3, gid="mean")
    ax.set_yticks(pos, [wrap(names.get(a.config, a.config), 26) for a, _ in rows],
                  fontsize="small")
    ax.invert_yaxis()               # the tables' order, top to bottom
    ax.set_xlim(left=0)
    ax.set_xlabel("tok/s of single tokens (1000 / wall_ms)")
    ax.grid(alpha=0.3, axis="x")
    ax.set_title(wrap(f"Per-token rate per config: {group_title(group)}", 70), fontsize="medium")
    _legend_outside(ax, [
        Patch(facecolor="none", edgecolor="k", label="p25–p75 of the tokens"),
        Line2D([], [], color="k", lw=1, label="whiskers: p5–p95"),
        Line2D([], [], color="C1", lw=1.8, label="median"),
        Line2D([], [], color="C3", ls="none", marker="D",
               label=wrap("mean after trim = tokens / Σ decode time, over the box's tokens"
                          if trim else "mean = tokens / Σ decode time (the tables' bold figure)",
                          30))])
    diamond = (f"the tables' mean after trim {trim}" if trim else "the tables' mean")
    caption = ("Per-token rate per config, tok/s, ok runs pooled: box = p25–p75, whiskers = "
               f"p5–p95, orange line = median, red diamond = {diamond} (tokens / Σ "
               "decode time: slow tokens weigh more, so it can sit far from the median); "
               + trim_caption(trim) + (", as in the tables" if trim else ""))
    return fig, caption


# ---- device: memory and temperature ------------------------------------------------------

PANEL_NAMES = {"rss": "process RSS", "avail": "free RAM",
               "cpu_temp": "CPU temperature", "batt_temp": "battery temperature",
               "power": "power"}


def _scaled(key: str, values: list[np.ndarray]) -> tuple[str, float]:
    """(unit, divisor) of a panel: memory in GiB from 1 GiB up, else MiB; temperatures °C."""
    if key in ("cpu_temp", "batt_temp"):
        return "°C", 1.0
    if key == "power":
        return "W", 1.0
    top = max((float(np.nanmax(v)) for v in values if np.isfinite(v).any()), default=0.0)
    return ("GiB", 1024.0) if top >= 1024.0 else ("MiB", 1.0)


def _repeat_look(k: int, many: bool, by_colour: bool, config_style: Style) -> tuple[str, str]:
    """(marker, line style) of a config's k-th ok run: with repeats, its own marker and, while
    colour alone tells the configs apart (no line style of styles()), its own line style."""
    if not many:
        return ".", config_style.linestyle
    return (REPEAT_MARKERS[k % len(REPEAT_MARKERS)],
            LINESTYLES[k % len(LINESTYLES)] if by_colour else config_style.linestyle)


def _marks(segs: list[np.ndarray], k: int, repeats: int, many: bool) -> np.ndarray | None:
    """The points a run's line marks: every sample where they can be told apart (≤ 40 a
    run); else, with repeats, REPEAT_MARKS spread along each line, shifted by the repeat so
    repeats' markers do not sit on each other; else none."""
    if sum(len(p) for p in segs) <= 40 * len(segs):
        return np.concatenate(segs)
    if not many:
        return None
    picked = []
    for p in segs:
        step = max(1, len(p) // REPEAT_MARKS)
        picked.append(p[np.arange((k * step) // max(repeats, 1), len(p), step)])
    return np.concatenate(picked)


def _device(group: Group, series: list[plot_data.Series], by_token: bool, trim: int,
            names: dict[str, str], style_of: dict[str, Style], plt: Any) -> tuple[Any, str]:
    from matplotlib.collections import LineCollection
    from matplotlib.lines import Line2D

    runs = {r.id: r for r in group.runs}
    keys = [k for k in PANEL_NAMES if any(k in s.values and np.isfinite(s.values[k]).any()
                                          for s in series)]
    fig, axes = plt.subplots(len(keys), 1, figsize=(8, 2.3 * len(keys) + 0.7), sharex=True,
                             squeeze=False)
    repeat_of = plot_data.repeat_numbers(group)
    present = [a.config for a in group.configs
               if any(runs[s.run_id].ok and runs[s.run_id].row.config == a.config
                      for s in series)]
    repeats = max((len({repeat_of[s.run_id] for s in series if s.run_id in repeat_of
                        and runs[s.run_id].row.config == c}) for c in present), default=0)
    many, by_colour = repeats > 1, len(group.configs) <= 10
    # (config, repeat) -> its runs' series: one collection each, not one plot() per run, so
    # 1,000 runs draw in a blink; the runs left out (†) are one grey dotted group
    members: dict[tuple[str, int], list[plot_data.Series]] = {}
    for s in series:
        run = runs[s.run_id]
        slot = (run.row.config, repeat_of[s.run_id] if many else 0) if run.ok else ("†", 0)
        members.setdefault(slot, []).append(s)
    order = [(c, k) for c in present for k in range(max(repeats, 1)) if (c, k) in members]
    order += [("†", 0)] if ("†", 0) in members else []
    for ax, key in zip(axes[:, 0], keys):
        unit, div = _scaled(key, [s.values[key] for s in series if key in s.values])
        for config, k in order:
            segs = [np.column_stack([s.x, s.values[key] / div])[np.isfinite(s.values[key])]
                    for s in members[(config, k)] if key in s.values]
            segs = [p for p in segs if len(p)]
            if not segs:
                continue
            if config == "†":
                st, (marker, ls), gid = Style((0.45, 0.45, 0.45, 1.0), ":"), ("x", ":"), "†"
            else:
                st = style_of[config]
                marker, ls = _repeat_look(k, many, by_colour, st)
                gid = f"{config} repeat {k + 1}" if many else config
            ax.add_collection(LineCollection(segs, colors=[st.color], linestyles=ls,
                                             linewidths=1.2, gid=gid))
            pts = _marks(segs, k, repeats, many and config != "†")
            if pts is not None:
                ax.plot(pts[:, 0], pts[:, 1], ls="none", marker=marker,
                        ms=3 if marker in ".x" else 4.5, color=st.color, gid=f"{gid} samples")
        ax.autoscale_view()
        ax.set_ylabel(wrap(f"{PANEL_NAMES[key]} ({unit})", 22), fontsize="small")
        # plain tick values: an offset ("+2.2758e1" above the axis) hides what free RAM was
        ax.ticklabel_format(axis="y", useOffset=False, style="plain")
        ax.grid(alpha=0.3)
        if by_token:
            shade_trim(ax, trim)
    handles = [Line2D([], [], color=style_of[c].color,
                      ls="-" if many and by_colour else style_of[c].linestyle,
                      lw=2.5, label=wrap(names.get(c, c), 30)) for c in present]
    for k in range(min(repeats, len(REPEAT_MARKERS)) if many else 0):
        marker, ls = _repeat_look(k, many, by_colour, Style((0.3, 0.3, 0.3, 1.0), "-"))
        again = f", {k + 1 + len(REPEAT_MARKERS)}, …" if repeats > k + len(REPEAT_MARKERS) else ""
        handles.append(Line2D([], [], color="0.3", ls=ls, marker=marker, ms=4.5,
                              label=f"repeat {k + 1}{again}"))
    if ("†", 0) in members:
        handles.append(Line2D([], [], color="0.45", ls=":", marker="x",
                              label="† runs (left out of the tables)"))
    if by_token and trim:
        handles.append(trim_handle(trim))
    _legend_outside(axes[0, 0], handles)
    panels = [PANEL_NAMES[k] for k in keys]
    shown = (", ".join(panels[:-1]) + " and " if len(panels) > 1 else "") + panels[-1]
    shown = shown[0].upper() + shown[1:]
    axes[0, 0].set_title(wrap(f"{shown}: {group_title(group)}", 70), fontsize="medium")
    avail = " (free RAM = MemAvailable)" if "avail" in keys else ""
    if by_token:
        axes[-1, 0].set_xlabel("token")
        cols = " and ".join({"rss": plot_data.TOKEN_RSS, "avail": plot_data.TOKEN_AVAIL}[k]
                            for k in keys)
        caption = (f"{shown} at each token of each run, from the engine's per-token {cols} "
                   f"column{'s' if len(keys) > 1 else ''}{avail}; these runs have no timed "
                   f"samples, so the x axis is the token")
    else:
        axes[-1, 0].set_xlabel("seconds since the run started")
        gaps = [np.median(np.diff(s.x)) for s in series if len(s.x) > 1]
        every = f", every ≈{np.median(gaps):.1f} s" if gaps else ""
        caption = f"{shown} over each run, from the agent's samples{every}{avail}"
    if many:
        caption += (f"; one colour per config, and each repeat its own marker"
                    f"{' and line style' if by_colour else ''} (repeat 1 = the config's first "
                    f"ok run)")
    if ("†", 0) in members:
        caption += "; dotted grey with ×: runs left out (†)"
    caption += "; " + trim_caption(trim) + (
        (" (shaded)" if trim else "") if by_token
        else " (this figure shows whole runs: its x axis is time, not tokens)" if trim else "")
    return fig, caption


# ---- entry point -------------------------------------------------------------------------

def figures(data: ReportData, group: Group) -> list[tuple[str, Any, str]]:
    """(kind, matplotlib figure, caption) of each figure of one group; the caller closes them."""
    plt = _pyplot()
    names = plot_data.config_names(data, group)
    style_of = dict(zip((a.config for a in group.configs), styles(len(group.configs))))
    out: list[tuple[str, Any, str]] = []
    tokens = data.tokens if data.tokens is not None and len(data.tokens) else None
    if tokens is not None:
        config_of = {r.id: a.config for a in group.configs for r in a.runs}
        rates = plot_data.token_rates(tokens, config_of)
        for kind, drawn in (
                ("trajectory", trajectory_figure(group, rates, names, style_of, data.trim, plt)),
                ("distribution", _distribution(group, tokens, names, data.trim, plt))):
            if drawn is not None:
                out.append((kind, *drawn))
    ids = {r.id for r in group.runs}
    series: list[plot_data.Series] = []
    if data.samples is not None and len(data.samples):
        series = plot_data.sample_series(data.samples, ids)
    by_token = False
    if not series and tokens is not None:
        # imported runs: no agent, but bmoe v1 CSVs carry memory at every token
        series, by_token = plot_data.token_memory_series(tokens, ids), True
    # a quantity not measured (NaN on every row: an all-zero RSS column the importer
    # dropped, say) gets no panel; with none measured there is no device figure at all
    if any(np.isfinite(v).any() for s in series for v in s.values.values()):
        out.append(("device", *_device(group, series, by_token, data.trim, names, style_of, plt)))
    out += session_plots.figures(group, data.samples, plt)
    return out


def draw(data: ReportData, doc: Path | None) -> dict[str, list[Plot]]:
    """The figures of every group: group slug -> its plots. With `doc` (a markdown file) the
    PNGs are written to `<doc stem>_files/` and linked; without, they are embedded as data:
    URIs (a self-contained HTML page)."""
    plt = _pyplot()
    out_dir = figure_dir(doc)
    result: dict[str, list[Plot]] = {}
    for group in data.groups:
        result[group.slug] = [emit(fig, plt, out_dir, f"{group.slug}-{kind}", kind, caption)
                              for kind, fig, caption in figures(data, group)]
    return result


def figure_dir(doc: Path | None) -> Path | None:
    """Where a markdown document's PNGs go (`<doc stem>_files/`, made); None: embed them."""
    if doc is None:
        return None
    out_dir = doc.parent / f"{doc.stem}_files"
    out_dir.mkdir(parents=True, exist_ok=True)
    return out_dir


def emit(fig: Any, plt: Any, out_dir: Path | None, name: str, kind: str,
         caption: str) -> Plot:
    """A drawn figure as a Plot (and closed): `<out_dir>/<name>.png` linked relative to the
    document, or without out_dir a data: URI (a self-contained HTML page)."""
    png = _png(fig, plt)
    if out_dir is None:
        return Plot(kind, caption, "data:image/png;base64," + base64.b64encode(png).decode("ascii"))
    path = out_dir / f"{name}.png"
    path.write_bytes(png)
    return Plot(kind, caption, quote(f"{out_dir.name}/{path.name}"), path)
