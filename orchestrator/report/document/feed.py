"""The regressions feed (Atom): one entry per slowdown of the store's histories
(results/regression_feed.py computes them), newest first, each naming its id, Δ and p, its
builds and the `orch compare` that shows it; an acknowledged one says so (category
`acknowledged` instead of `new`). `orch feed -o FILE` writes it; `orch site` writes it as
DIR/regressions.xml.

Rendered by `feedgenerator` (Django's feed writer as a standalone, pure-Python package): it
writes valid Atom 1.0 (ids, dates in RFC 3339, every text escaped) that a template would have
to get right by hand.
"""
from __future__ import annotations

import datetime as dt
import html
from collections.abc import Callable, Mapping, Sequence

from orchestrator.results.history import Series
from orchestrator.results.regression_feed import RegressionEntry, Store, regression_entries

FEED_ID = "urn:orch:regressions"


def _title(e: RegressionEntry) -> str:
    delta = f"{e.delta_pct:+.1f}%" if e.delta_pct is not None else "slower"
    title = (f"{delta} {e.metric} tok/s: {e.model} {e.config} on {e.device} ({e.matrix}), "
             f"session {e.session}")
    return title + (" [acknowledged]" if e.ack else "")


def entry_summary(e: RegressionEntry) -> str:
    """The entry's text, as HTML (Atom's summary type="html", what feedgenerator writes):
    each line escaped, so a config named `<b>` reads as text in a feed reader."""
    return "<br/>".join(html.escape(line) for line in summary_lines(e))


def summary_lines(e: RegressionEntry) -> list[str]:
    """The figures on each side, the test, the builds, the id and how to acknowledge it."""
    figures = (f"{e.before:.2f} → {e.after:.2f} tok/s" if e.before is not None
               and e.after is not None else "")
    p = f"p={e.p_value:.2g}" if e.p_value is not None else ""
    what = "change point" if e.kind == "change_point" else "significant step"
    lines = [f"{what} {e.id}: {figures} ({e.delta_pct:+.1f}%, {p}) from session "
             f"{e.session_before} to {e.session}" if e.delta_pct is not None else f"{what} {e.id}",
             f"engine builds {e.build_before or '-'} → {e.build_after or '-'}",
             f"see: {e.compare_command}",
             f"acknowledge: orch ack {e.id} \"REASON\""]
    if e.ack:
        lines[-1] = f"acknowledged: {e.ack.text} ({_date(e.ack.created_at)}" + \
                    (f", {e.ack.author})" if e.ack.author else ")")
    return lines


def _date(when: dt.datetime | None) -> str:
    return when.strftime("%Y-%m-%d") if when else "-"


def _aware(when: dt.datetime | None) -> dt.datetime:
    if when is None:
        return dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    return when if when.tzinfo else when.replace(tzinfo=dt.UTC)


def render_feed(entries: list[RegressionEntry], base_url: str | None = None,
                link: Callable[[RegressionEntry], str] | None = None) -> str:
    """Atom XML of these entries. base_url: the site's address (the feed's and the entries'
    links are absolute under it); without it links are relative to the feed's own place (the
    site's folder). link: an entry's page in the site (default: the index)."""
    import feedgenerator

    root = (base_url.rstrip("/") + "/") if base_url else ""
    feed = feedgenerator.Atom1Feed(
        title="orch: regressions", link=root + "index.html",
        description="Slowdowns found in the store's histories",
        feed_url=root + "regressions.xml" if root else None,
        feed_guid=root + "regressions.xml" if root else FEED_ID)
    for e in entries:
        updated = _aware(e.ack.created_at if e.ack else e.when)
        feed.add_item(
            title=_title(e), link=root + (link(e) if link else "index.html"),
            description=entry_summary(e), unique_id=f"{FEED_ID}:{e.id}",
            pubdate=_aware(e.when), updateddate=updated,
            categories=["regression", "acknowledged" if e.ack else "new", e.kind])
    return feed.writeString("utf-8")


def regressions_feed(store: Store, base_url: str | None = None,
                     link: Callable[[RegressionEntry], str] | None = None,
                     series: Mapping[str, Sequence[Series]] | None = None) -> str:
    """The store's regressions feed (Atom XML): what `orch site` writes as
    DIR/regressions.xml and `orch feed` prints. `series`: each matrix's histories when
    already computed (the site's)."""
    return render_feed(regression_entries(store, series=series), base_url, link)
