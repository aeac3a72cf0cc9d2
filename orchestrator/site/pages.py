"""The site's pages: where each is written (its path in the site), the digest of its inputs
(results/site_data.py) and how it is rendered. Every page renders from the data results/
read and computed; the session page is `orch report`'s HTML document
(report/document/render.py) through this package's page.html.j2, the others this package's
templates, all autoescaped.

Paths (relative to the site's root, each page links the others relatively, so the site works
from file:// and from any static host):

    index.html                     devices, matrices, sessions, latest regressions
    sessions/<id>.html             a session's report
    history/<key>.html             one (device, matrix, model, config) history
    compare/<key>.html             a matrix's newest session on each of its devices, compared
"""
from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from importlib import resources
from pathlib import Path
from typing import Any

from markupsafe import Markup

from orchestrator.db.store import Store
from orchestrator.report.document import compare as compare_doc
from orchestrator.report.document.feed import regressions_feed
from orchestrator.report.document.render import environment, markdown_to_html, render_report
from orchestrator.report.document.request import ReportRequest
from orchestrator.report.format.labels import series_title
from orchestrator.report.format.markdown import md_escape
from orchestrator.results.history import Series
from orchestrator.results.regression_feed import RegressionEntry
from orchestrator.results.site_data import (
    SeriesKey,
    SiteData,
    comparison_inputs,
    device_comparison,
    digest,
    report_inputs,
    session_report,
)
from orchestrator.site import charts

TEMPLATES = Path(str(resources.files("orchestrator.site") / "templates"))


@dataclass(frozen=True)
class Page:
    path: str                              # relative to the site's root, "/"-separated
    inputs: str                            # digest of what it shows
    render: Callable[[], bytes]


def session_path(sid: int) -> str:
    return f"sessions/{sid}.html"


def history_path(key: SeriesKey) -> str:
    return f"history/{digest(*key)[:16]}.html"


def compare_path(matrix: str) -> str:
    return f"compare/{digest(matrix)[:16]}.html"


def plan(store: Store, data: SiteData, plots: bool = True) -> list[Page]:
    """Every page of the site, index first, with its inputs' digest; nothing rendered yet."""
    compared = [m for m, devices in data.matrices.items() if len(devices) >= 2]
    pages = [Page("index.html", digest(_index_context(data, compared, digest_only=True)),
                  lambda: _render("site_index.html.j2", "", **_index_context(data, compared)))]
    for s in data.sessions:
        sid = s.session.id
        if sid in data.runs:
            pages.append(Page(session_path(sid), digest(report_inputs(data, sid), plots),
                              partial(_session_page, store, data, sid, plots)))
    for key in data.series:
        pages.append(Page(history_path(key),
                          digest(key, [(m, [p.record() for p in s.points],
                                        [c.record() for c in s.change_points])
                                       for m, s in _metrics(data, key).items()]),
                          partial(_history_page, data, key)))
    for matrix in compared:
        pages.append(Page(compare_path(matrix), comparison_inputs(data, matrix),
                          partial(_compare_page, store, data, matrix)))
    # the regressions feed (docs/regressions.md), each entry linking to its history page
    pages.append(Page(FEED_PATH, digest("feed", [repr(f) for f in data.flagged]),
                      partial(_feed, store, data)))
    return pages


FEED_PATH = "regressions.xml"


def _feed(store: Store, data: SiteData) -> bytes:
    def link(entry: RegressionEntry) -> str:
        key = (entry.device, entry.matrix, entry.model, entry.config)
        return history_path(key) if key in data.series else "index.html"

    by_matrix: dict[str, list[Series]] = {}
    for key, series in data.series.items():        # computed once for the whole site
        by_matrix.setdefault(key[1], []).append(series)
    return regressions_feed(store, None, link, by_matrix).encode()


def _render(template: str, root: str, **context: Any) -> bytes:
    env, _ = environment(TEMPLATES)
    env.filters.update(short_when=short_when, facts_line=facts_line)
    env.globals.update(series_title=series_title)
    return env.get_template(template).render(root=root, **context).encode()


def _index_context(data: SiteData, compared: list[str],
                   digest_only: bool = False) -> dict[str, Any]:
    matrices = [{"name": m, "devices": devices,
                 "compare": compare_path(m) if m in compared else None,
                 "series": [(k, history_path(k)) for k in data.series if k[1] == m]}
                for m, devices in data.matrices.items()]
    context: dict[str, Any] = {"devices": data.devices, "sessions": data.sessions, "matrices": matrices,
               "flagged": [(f, history_path(f.key) if f.key in data.series else None)
                           for f in data.flagged],
               "session_path": session_path, "has_page": set(data.runs)}
    if digest_only:      # what the index shows, as plain values
        return {"devices": [(d.name, d.kind, d.facts, d.last_seen) for d in data.devices],
                "sessions": [(s.session.id, s.session.name, s.session.matrix_name,
                              s.session.started_at, s.devices, s.counts)
                             for s in data.sessions],
                "matrices": matrices, "flagged": [f.__dict__ for f, _ in context["flagged"]]}
    return context


def _session_page(store: Store, data: SiteData, sid: int, plots: bool) -> bytes:
    report = session_report(store, data, sid, plots)
    return render_report(report, ReportRequest(fmt="html", template=TEMPLATES,
                                               plots=plots)).encode()


def _metrics(data: SiteData, key: SeriesKey) -> dict[str, Series]:
    """The series in each metric that has a value at some point, mean first (the page's
    chosen metric: `orch history --metric`)."""
    each = {"mean": data.series[key], **data.metrics.get(key, {})}
    return {m: s for m, s in each.items()
            if m == "mean" or any(p.interval.mean is not None for p in s.points)}


def _history_page(data: SiteData, key: SeriesKey) -> bytes:
    series = data.series[key]
    steps = {c.session: c for c in series.change_points}
    href = lambda sid: "../" + session_path(sid)     # noqa: E731
    others = {m: Markup(charts.embed(charts.history_chart(s, href)))
              for m, s in _metrics(data, key).items() if m != "mean"}
    chart = charts.history_chart(series, href)
    return _render("site_history.html.j2", "../", key=key, series=series, steps=steps,
                   chart=Markup(charts.embed(chart)), others=others,
                   session_path=session_path, has_page=set(data.runs))


def _compare_page(store: Store, data: SiteData, matrix: str) -> bytes:
    comp = device_comparison(store, data, matrix)
    env, _ = environment(TEMPLATES)
    # `orch compare`'s document, its figure the page's chart (drawn by the browser)
    body = markdown_to_html(env.get_template("compare.md.j2").render(
        title=md_escape(compare_doc.title(comp)),
        comparison={**compare_doc.section(comp), "figure": None, "figure_note": None},
        left_out=[md_escape(x) for x in compare_doc.left_out_lines(comp)]))
    chart = charts.comparison_chart(comp)
    return _render("site_compare.html.j2", "../", matrix=matrix, title=compare_doc.title(comp),
                   body=body, chart=Markup(charts.embed(chart)),
                   sessions=[(side.device, side.session.id) for side in comp.sides],
                   session_path=session_path)


def facts_line(facts: dict[str, Any]) -> str:
    """A device's facts in a line: the ones a reader compares first, when known."""
    keys = [k for k in facts if any(w in k.lower() for w in ("cpu", "model", "ram", "mem",
                                                             "kernel", "soc", "cores"))]
    return "; ".join(f"{k}={facts[k]}" for k in keys[:6])


def short_when(when: dt.datetime | None) -> str:
    return when.strftime("%Y-%m-%d %H:%M") if when is not None else "-"
