"""The site's figures as Plotly figure specs (data + layout), from orch's own numbers: the
history of a config (results/history.py: points, intervals, change points) and the ratios of a
device comparison (results/comparison.py). The browser only draws them (assets/site.js): no
figure is computed in JavaScript.

Plotly reads its text (names, hover text, tick labels, annotations) as a small HTML subset,
so every string from the store is HTML-escaped here: a config named `<b>x</b>` shows as
that text, never as markup. The spec is then embedded as JSON with `<`, `>` and `&` escaped
(`embed`), so no string can close the script element that holds it.
"""
from __future__ import annotations

import html
import json
from collections.abc import Callable
from typing import Any

from orchestrator.report.format.labels import series_title
from orchestrator.results.comparison import SideComparison
from orchestrator.results.history import Series

COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")


def text(value: Any) -> str:
    """A store string as Plotly text: escaped, so it shows as written."""
    return html.escape(str(value), quote=True)


def embed(spec: dict[str, Any]) -> str:
    """JSON for a `<script type="application/json">` element: nothing in it can end the
    element or start markup."""
    return (json.dumps(spec, ensure_ascii=False, allow_nan=False, default=str)
            .replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e"))


def history_chart(s: Series, session_href: Callable[[int], str]) -> dict[str, Any]:
    """A config's points with their 95% intervals, the fitted level on each side of every
    change point, and a dashed line at it annotated with its Δ and p. Each point carries its
    session page's address (customdata): a click opens it."""
    xs, ys, lo, hi, hover, links, ticks = [], [], [], [], [], [], []
    index = {}
    for x, p in enumerate(s.points):
        index[p.session] = x
        iv = p.interval
        ticks.append(text(f"{p.session}" + (f" · {p.build}" if p.build else "")))
        if iv.mean is None:
            continue
        xs.append(x)
        ys.append(iv.mean)
        lo.append(iv.mean - iv.low if iv.low is not None else 0.0)
        hi.append(iv.high - iv.mean if iv.high is not None else 0.0)
        ci = f"{iv.low:.2f}–{iv.high:.2f}" if iv.low is not None else "no interval"
        hover.append(text(f"session {p.session}" + (f" ({p.session_name})" if p.session_name
                                                     else "")) + "<br>"
                     + text(f"build {p.build or '-'}") + "<br>"
                     + text(f"{s.metric} {iv.mean:.2f} (95% CI {ci}, n={iv.n} {p.basis})")
                     + "".join("<br>" + text(f"note: {n.text}") for n in p.notes))
        links.append(session_href(p.session))
    shapes, notes = [], []
    cuts = [index[c.session] for c in s.change_points]
    bounds = [0, *cuts, len(s.points)]
    for j, c in enumerate(s.change_points):
        cut = cuts[j] - 0.5
        shapes.append({"type": "line", "x0": cut, "x1": cut, "yref": "paper", "y0": 0, "y1": 1,
                       "line": {"color": COLORS[1], "dash": "dash", "width": 1.5}})
        for level, x0, x1 in ((c.step.before, bounds[j] - 0.4, cut),
                              (c.step.after, cut, bounds[j + 2] - 0.6)):
            shapes.append({"type": "line", "x0": x0, "x1": x1, "y0": level, "y1": level,
                           "line": {"color": COLORS[1], "width": 1}})
        notes.append({"x": cut, "yref": "paper", "y": 1.0, "yanchor": "bottom",
                      "showarrow": False, "font": {"color": COLORS[1]},
                      "text": text(f"Δ {c.step.delta_pct:+.1f}%, p={c.step.p_value:.2g}"
                                   + (" (acknowledged)" if c.ack else ""))})
    noted = [x for x, p in enumerate(s.points) if p.notes and p.interval.mean is not None]
    notes += [{"x": x, "y": s.points[x].interval.mean, "text": "✎", "showarrow": True,
               "arrowhead": 0, "ay": -22, "hovertext": text("; ".join(
                   n.text for n in s.points[x].notes))} for x in noted]
    trace = {"type": "scatter", "mode": "lines+markers", "x": xs, "y": ys,
             "name": text(s.metric), "customdata": links, "hovertext": hover,
             "hoverinfo": "text", "marker": {"color": COLORS[0], "size": 7},
             "line": {"color": COLORS[0], "width": 1},
             "error_y": {"type": "data", "symmetric": False, "array": hi, "arrayminus": lo,
                         "color": COLORS[0], "thickness": 1}}
    step = max(1, len(s.points) // 30)                # at most ~30 tick labels
    layout = {"title": {"text": text(series_title(s.model, s.config, s.device))},
              "xaxis": {"title": {"text": "session · engine build"},
                        "tickvals": list(range(0, len(s.points), step)),
                        "ticktext": ticks[::step], "range": [-0.7, len(s.points) - 0.3],
                        "zeroline": False},
              "yaxis": {"title": {"text": text(f"{s.metric} (tok/s)" if "tps" not in s.metric
                                               else s.metric)}},
              "shapes": shapes, "annotations": notes, "showlegend": False,
              "height": 460, "margin": {"t": 60}, "hovermode": "closest"}
    return {"data": [trace], "layout": layout}


def comparison_chart(comp: SideComparison) -> dict[str, Any]:
    """Per other device: each config's ratio to the reference with its 95% interval, and a
    line at 1 (no difference)."""
    traces = []
    for i, side in enumerate(comp.others):
        ys, xs, lo, hi, hover = [], [], [], [], []
        for row in comp.matched:
            cmp = row.vs_reference[i] if i < len(row.vs_reference) else None
            if cmp is None or cmp.ratio is None:
                continue
            label = text(f"{row.model} {row.config}")
            ys.append(label)
            xs.append(cmp.ratio)
            lo.append(cmp.ratio - cmp.low if cmp.low is not None else 0.0)
            hi.append(cmp.high - cmp.ratio if cmp.high is not None else 0.0)
            ci = f"{cmp.low:.3f}–{cmp.high:.3f}" if cmp.low is not None else "no interval"
            p = f", p(Holm)={cmp.p_adjusted:.2g}" if cmp.p_adjusted is not None else ""
            hover.append(label + "<br>" + text(f"{side.label} / {comp.reference.label}: "
                                               f"{cmp.ratio:.3f} (95% CI {ci}{p})"))
        traces.append({"type": "scatter", "mode": "markers", "orientation": "h", "x": xs,
                       "y": ys, "name": text(side.label), "hovertext": hover,
                       "hoverinfo": "text", "marker": {"size": 8,
                                                       "color": COLORS[i % len(COLORS)]},
                       "error_x": {"type": "data", "symmetric": False, "array": hi,
                                   "arrayminus": lo, "thickness": 1}})
    rows = max(1, len(comp.matched))
    layout = {"title": {"text": text(f"mean tok/s ratio to {comp.reference.label}")},
              "xaxis": {"title": {"text": "ratio (95% CI)"}, "type": "log"},
              "yaxis": {"automargin": True, "autorange": "reversed"},
              "shapes": [{"type": "line", "x0": 1, "x1": 1, "yref": "paper", "y0": 0,
                          "y1": 1, "line": {"color": "#888", "dash": "dot"}}],
              "height": 160 + 28 * rows, "margin": {"t": 50}, "hovermode": "closest"}
    return {"data": traces, "layout": layout}
