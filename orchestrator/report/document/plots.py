"""The report's figures (matplotlib, Agg), per (model, device) group.

- trajectory: the per-token decode rate over the run, one line per config: the first tokens
  unsmoothed (warm-up), then a rolling rate; one panel per config (shared y) past 6 configs.
- distribution: the per-token rate per config (box p25-p75, whiskers p5-p95, median) with the
  tables' headline mean marked, which a skewed distribution can put far from the median.
- device: process RSS, free RAM and, only where a sensor was read, temperatures and power
  (docs/energy.md) over each run from the agent's samples; for runs without samples
  (imports), RSS and free RAM per token from the engine's per-token memory columns.

Every figure has its legend outside the axes, wraps long labels instead of cutting them, and
gives each config its own colour + line style, the same in all figures of the group. A PNG is
written to `<doc>_files/` for markdown, or embedded as a data: URI for a self-contained HTML page.
"""
from __future__ import annotations

import base64
import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np
import pandas as pd

from orchestrator.report.document import plot_data, session_plots
from orchestrator.report.document.plot_text import legend_outside as _legend_outside
from orchestrator.report.document.plot_text import wrap
from orchestrator.report.format.labels import group_title
from orchestrator.results.report_data import Group, ReportData

WARM_TOKENS = 32        # tokens drawn one by one: warm-up lasts a few to a few dozen tokens
WINDOW = 16             # tokens per point of the rolling rate after them
PANEL_LIMIT = 6         # more configs than this: one panel per config
LINESTYLES = ("-", "--", ":", "-.")


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

    # tab10 at 0..n-1 is its first n listed colours; turbo is sampled evenly
    at = np.arange(n) if n <= 10 else np.linspace(0.05, 0.95, n)
    rgba = np.asarray(colormaps["tab10" if n <= 10 else "turbo"](at))
    return [Style((float(r), float(g), float(b), float(a)),
                  LINESTYLES[i % len(LINESTYLES)] if n > 10 else "-")
            for i, (r, g, b, a) in enumerate(rgba)]


def _png(fig: Any, plt: Any) -> bytes:
    buf = io.BytesIO()
    # "tight" grows the canvas to what is drawn: legends outside the axes and long labels
    fig.savefig(buf, format="png", dpi=96, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def _labels(data: ReportData) -> dict[str, str]:
    """config -> the matrix's human-readable label (`labels:`), where one was given."""
    out: dict[str, str] = {}
    for m in data.matrices.values():
        if isinstance(m.get("labels"), dict):
            out.update({str(k): str(v) for k, v in m["labels"].items()})
    return out


# ---- per-token rate over the run ---------------------------------------------------------

def _clip(ax_values: list[np.ndarray]) -> float | None:
    """A top for the y axis when a few single tokens (1000 / a tiny wall time) would set the
    scale and flatten every line; None when nothing stands out."""
    vals = np.concatenate([v[np.isfinite(v)] for v in ax_values]) if ax_values else np.empty(0)
    if vals.size < 20:
        return None
    p99 = float(np.percentile(vals, 99))
    return p99 * 1.15 if vals.max() > 1.6 * p99 else None


def _trajectory(group: Group, rates: pd.DataFrame, names: dict[str, str],
                style_of: dict[str, Style], plt: Any) -> tuple[Any, str] | None:
    order = [a.config for a in group.configs if a.config in set(rates["config"])]
    if not order:
        return None
    lines = {c: plot_data.trajectory(rates[rates["config"] == c], WARM_TOKENS, WINDOW)
             for c in order}
    small = len(order) > PANEL_LIMIT
    if small:
        ncols = 3 if len(order) <= 9 else 4
        nrows = -(-len(order) // ncols)
        fig, axes = plt.subplots(nrows, ncols, figsize=(3.3 * ncols, 2.3 * nrows + 0.6),
                                 sharex=True, sharey=True, squeeze=False)
        for ax in axes.flat[len(order):]:
            ax.set_visible(False)
        panel_of = dict(zip(order, axes.flat))
    else:
        fig, ax = plt.subplots(figsize=(8, 4))
        panel_of = {c: ax for c in order}
    for config in order:
        x, y, head = lines[config]
        ax = panel_of[config]
        st = style_of[config]
        ax.plot(x, y, color=st.color, linestyle=st.linestyle, lw=1.3, marker="o", ms=2.6,
                markevery=slice(0, head), label=wrap(names.get(config, config), 30), gid=config)
        if small:
            ax.set_title(wrap(names.get(config, config), 34), fontsize="small")
    top = _clip([lines[c][1] for c in order])
    rolled = any(head < len(x) for x, _, head in lines.values())
    for ax in dict.fromkeys(panel_of.values()):
        ax.set_ylim(bottom=0, top=top)
        ax.grid(alpha=0.3)
        if rolled:
            # where single tokens end and the rolling rate begins
            ax.axvline(WARM_TOKENS + 0.5, color="0.55", lw=0.8, ls=(0, (1, 2)), gid="warm-up")
        if top is not None:
            over = sum(int((lines[c][1] > top).sum()) for c in order if panel_of[c] is ax)
            if over:
                ax.text(0.01, 0.98, f"{over} point(s) above the scale", transform=ax.transAxes,
                        va="top", fontsize="x-small", color="0.35")
    what = f"first {WARM_TOKENS} tokens one by one, then a {WINDOW}-token rolling rate"
    if small:
        for ax in axes[-1]:
            ax.set_xlabel("token")
        for ax in axes[:, 0]:
            ax.set_ylabel("tok/s")
        fig.suptitle(wrap(f"Per-token decode rate: {group_title(group)}", 90)
                     + (f"\n(markers: {what})" if rolled else ""), fontsize="medium")
    else:
        ax.set_xlabel("token")
        ax.set_ylabel("tok/s (1000 / wall_ms)")
        ax.set_title(wrap(f"Per-token decode rate: {group_title(group)}", 70), fontsize="medium")
        _legend_outside(ax)
    repeats = any(len(a.runs) > 1 for a in group.configs)
    caption = ("Per-token decode rate over the run, tok/s (the tables' unit)"
               + (" over the ok repeats of each config at each token" if repeats else "")
               + (f": markers = each of the first {WARM_TOKENS} tokens (the warm-up, "
                  f"unsmoothed), after the dotted line, the rate over the trailing "
                  f"{WINDOW} tokens (tokens / Σ decode time, the tables' mean over a window)"
                  if rolled else ": every token, unsmoothed")
               + ("; one panel per config, shared y axis" if small else ""))
    return fig, caption


# ---- distribution ------------------------------------------------------------------------

def _distribution(group: Group, tokens: pd.DataFrame, names: dict[str, str],
                  plt: Any) -> tuple[Any, str] | None:
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    rows = [(a, plot_data.per_token_tps(tokens, a.ids)) for a in group.configs if a.runs]
    rows = [(a, v) for a, v in rows if v.size]
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(8, 0.42 * len(rows) + 1.4))
    pos = np.arange(1, len(rows) + 1)
    # whiskers at p5/p95, the tables' columns; single fast tokens would otherwise set the scale
    ax.boxplot([v for _, v in rows], positions=pos, orientation="horizontal", whis=(5, 95),
               showfliers=False, widths=0.6, medianprops={"color": "C1", "lw": 1.8})
    means = [a.values.get("mean") for a, _ in rows]
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
               label=wrap("mean = tokens / Σ decode time (the tables' bold figure)", 30))])
    caption = ("Per-token rate per config, tok/s, ok runs pooled: box = p25–p75, whiskers = "
               "p5–p95, orange line = median, red diamond = the tables' mean (tokens / Σ "
               "decode time: slow tokens weigh more, so it can sit far from the median)")
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


def _device(group: Group, series: list[plot_data.Series], by_token: bool,
            names: dict[str, str], style_of: dict[str, Style], plt: Any) -> tuple[Any, str]:
    from matplotlib.collections import LineCollection
    from matplotlib.lines import Line2D

    runs = {r.id: r for r in group.runs}
    keys = [k for k in PANEL_NAMES if any(k in s.values and np.isfinite(s.values[k]).any()
                                          for s in series)]
    fig, axes = plt.subplots(len(keys), 1, figsize=(8, 2.3 * len(keys) + 0.7), sharex=True,
                             squeeze=False)
    members = {a.config: [s for s in series
                          if runs[s.run_id].ok and runs[s.run_id].row.config == a.config]
               for a in group.configs}
    members = {c: m for c, m in members.items() if m}
    present = list(members)
    failed = [s for s in series if not runs[s.run_id].ok]
    if failed:
        members["†"] = failed
    for ax, key in zip(axes[:, 0], keys):
        unit, div = _scaled(key, [s.values[key] for s in series if key in s.values])
        for config, mine in members.items():
            segs = [np.column_stack([s.x, s.values[key] / div])[np.isfinite(s.values[key])]
                    for s in mine if key in s.values]
            segs = [p for p in segs if len(p)]
            if not segs:
                continue
            # one collection per config (its repeats), not one plot() per run: 1,000 runs
            # draw in a blink, and a config is one style however often it ran
            st = Style((0.45, 0.45, 0.45, 1.0), ":") if config == "†" else style_of[config]
            ax.add_collection(LineCollection(segs, colors=[st.color], linestyles=st.linestyle,
                                             linewidths=1.2, gid=config))
            pts = np.concatenate(segs)
            if len(pts) <= 40 * len(segs):      # points only where they can be told apart
                ax.plot(pts[:, 0], pts[:, 1], ls="none", marker="x" if config == "†" else ".",
                        ms=3, color=st.color, gid=f"{config} samples")
        ax.autoscale_view()
        ax.set_ylabel(wrap(f"{PANEL_NAMES[key]} ({unit})", 22), fontsize="small")
        # plain tick values: an offset ("+2.2758e1" above the axis) hides what free RAM was
        ax.ticklabel_format(axis="y", useOffset=False, style="plain")
        ax.grid(alpha=0.3)
    handles = [Line2D([], [], color=style_of[c].color, ls=style_of[c].linestyle,
                      label=wrap(names.get(c, c), 30)) for c in present]
    if failed:
        handles.append(Line2D([], [], color="0.45", ls=":", marker="x",
                              label="† runs (left out of the tables)"))
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
    if failed:
        caption += "; dotted grey with ×: runs left out (†)"
    return fig, caption


# ---- entry point -------------------------------------------------------------------------

def figures(data: ReportData, group: Group) -> list[tuple[str, Any, str]]:
    """(kind, matplotlib figure, caption) of each figure of one group; the caller closes them."""
    plt = _pyplot()
    names = _labels(data)
    style_of = dict(zip((a.config for a in group.configs), styles(len(group.configs))))
    out: list[tuple[str, Any, str]] = []
    tokens = data.tokens if data.tokens is not None and len(data.tokens) else None
    if tokens is not None:
        config_of = {r.id: a.config for a in group.configs for r in a.runs}
        rates = plot_data.token_rates(tokens, config_of)
        for kind, drawn in (("trajectory", _trajectory(group, rates, names, style_of, plt)),
                            ("distribution", _distribution(group, tokens, names, plt))):
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
        out.append(("device", *_device(group, series, by_token, names, style_of, plt)))
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
