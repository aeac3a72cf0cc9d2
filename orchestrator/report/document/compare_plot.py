"""The comparison's figure: per headline figure one panel, per matched config (and other side)
a dot at its ratio to the reference (B/A, log scale) with its 95% interval as a bar, or for
temperatures the difference in °C; a dot without a bar had a single run on a side (no
interval), drawn hollow. The line at 1× (or 0 °C) is "no change". Written beside the document
(`<doc stem>_files/comparison.png`) like the report's figures, or embedded in an HTML page.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from orchestrator.report.document.compare_columns import config_text, side_names
from orchestrator.report.document.plot_text import wrap
from orchestrator.report.document.plots import Plot, _pyplot, emit, figure_dir
from orchestrator.results.comparison import SideComparison
from orchestrator.results.headline_figures import DIFFERENCE, FIGURES

NAME = "comparison"
NO_FIGURE = "No comparison figure: it is written only with `-o FILE` (next to the document)."


def _points(comp: SideComparison) -> dict[str, list[tuple[str, float, Any, Any]]]:
    """figure key -> (row label, value, low, high) for every matched config and other side."""
    names = side_names(comp.sides)
    pair = len(comp.sides) > 2
    out: dict[str, list[tuple[str, float, Any, Any]]] = {}
    for row in comp.matched:
        for j, figs in enumerate(row.figures, 1):
            label = config_text(row) + (f" ({names[j]})" if pair else "")
            for fc in figs:
                if fc.value is not None:
                    out.setdefault(fc.figure.key, []).append(
                        (label, fc.value, fc.change.low, fc.change.high))
    return out


# the ticks of a ratio axis by how far it spans (its upper end): few, and never crowded
_RATIO_TICKS = ((1.3, (0.8, 0.9, 0.95, 1.0, 1.05, 1.1, 1.25)),
                (3.0, (0.5, 0.8, 1.0, 1.25, 2.0)),
                (float("inf"), (0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0)))


def _x_axis(ax: Any, pts: list[tuple[str, float, Any, Any]], ratio: bool) -> None:
    """x symmetric around "no change" (1× on a log scale, or 0 °C), wide enough for every
    dot and bar, so a panel's left and right read alike."""
    values = [v for _, value, low, high in pts for v in (value, low, high) if v is not None]
    if ratio:
        import math

        from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

        span = max([abs(math.log(v)) for v in values if v > 0] + [math.log(1.1)]) * 1.25
        ax.set_xscale("log")
        ax.set_xlim(math.exp(-span), math.exp(span))
        tier = next(t for top, t in _RATIO_TICKS if math.exp(span) <= top)
        ticks = [t for t in tier if abs(math.log(t)) <= span]
        ax.xaxis.set_major_locator(FixedLocator(ticks))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}×"))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.axvline(1.0, color="0.4", lw=0.8, ls="--")
    else:
        span = max([abs(v) for v in values] + [1.0]) * 1.25
        ax.set_xlim(-span, span)
        ax.axvline(0.0, color="0.4", lw=0.8, ls="--")


def caption(comp: SideComparison) -> str:
    names = side_names(comp.sides)
    others = ", ".join(names[1:])
    return (f"Each headline figure of {others} against {names[0]}, per config: the ratio "
            f"(log scale; the difference in °C for temperatures) with its 95% interval; a "
            f"hollow dot has no interval (a single run on a side). Right of the line: higher "
            f"on {others}.")


def draw(comp: SideComparison, doc: Path | None) -> Plot | None:
    """The figure (None when no config has a headline figure on two sides); with `doc` a
    markdown file, the PNG beside it, else embedded (an HTML page)."""
    points = _points(comp)
    keys = [f for f in FIGURES if f.key in points]
    if not keys:
        return None
    plt = _pyplot()
    labels = list(dict.fromkeys(p[0] for k in keys for p in points[k.key]))
    ncols = min(3, len(keys))
    nrows = -(-len(keys) // ncols)
    height = max(1.6, 0.32 * len(labels) + 1.0)
    fig, axes = plt.subplots(nrows, ncols, figsize=(3.6 * ncols + 1.6, height * nrows),
                             sharey=True, squeeze=False)
    for ax in axes.flat[len(keys):]:
        ax.set_visible(False)
    y_of = {label: i for i, label in enumerate(labels)}
    for ax, fig_key in zip(axes.flat, keys):
        ratio = fig_key.kind != DIFFERENCE
        pts = points[fig_key.key]
        for label, value, low, high in pts:
            y = y_of[label]
            has = low is not None and high is not None
            if has:
                ax.plot([low, high], [y, y], color="tab:blue", lw=1.6, solid_capstyle="butt")
            ax.plot([value], [y], "o", ms=5, color="tab:blue",
                    markerfacecolor="tab:blue" if has else "white")
            ax.annotate(f"{value:.2f}×" if ratio else f"{value:+.1f}", (value, y),
                        xytext=(0, 5), textcoords="offset points", ha="center",
                        fontsize="x-small", color="0.25")
        _x_axis(ax, pts, ratio)
        unit = "ratio" if ratio else "Δ °C"
        ax.set_title(f"{fig_key.name} ({unit})", fontsize="small")
        ax.grid(alpha=0.3, axis="x")
        ax.tick_params(axis="y", labelsize="small")
    axes[0][0].set_yticks(range(len(labels)), [wrap(l, 34) for l in labels])
    axes[0][0].set_ylim(len(labels) - 0.5, -0.7)     # the first config on top
    names = side_names(comp.sides)
    fig.suptitle(wrap(f"{', '.join(names[1:])} / {names[0]}", 90), fontsize="medium")
    fig.tight_layout()
    return emit(fig, plt, figure_dir(doc), NAME, NAME, caption(comp))


def draw_figure(context: dict[str, Any], doc: Path | None, fmt: str) -> dict[str, Any]:
    """`section`'s context with its figure drawn: beside a markdown `doc`, embedded in an HTML
    page; with neither, a note saying why there is none."""
    if doc is None and fmt != "html":
        return {**context, "figure_note": NO_FIGURE}
    try:
        import matplotlib  # noqa: F401  (the `plots` extra: optional)
    except ImportError:
        return {**context, "figure_note": "No comparison figure: matplotlib is not installed."}
    plot = draw(context["comp"], None if fmt == "html" else doc)
    return {**context, "figure": plot}
