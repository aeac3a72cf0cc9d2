"""`orch site`: the store as a static website (docs/site.md).

The API (stable; `orch serve` serves the same pages live):

    build_site(store, out, plots=True, progress=None, jobs=1) -> SiteBuild
        Write the site into the directory `out`, rewriting only the pages whose inputs
        changed (out/manifest.json); `progress(done, total, path)` is called per page
        written; `jobs` > 1: pages render in that many forked processes (only from a
        single-threaded caller: `orch site` does, a server should not).
    render_page(store, path, plots=True) -> bytes | None
        One page as build_site writes it, by its path in the site ("index.html",
        "sessions/<id>.html", "history/<key>.html", "compare/<key>.html"); None when the
        store has no such page.
    pages(store, plots=True) -> list[Page]
        Every page: `.path`, `.inputs` (digest of what it shows), `.render()` -> bytes.
        It reads and computes the whole site's data once (every config's history with its
        change points: seconds on a store of 1,000 sessions); `render_page` calls it per
        call, so a server that serves many pages keeps the list (and refreshes it when the
        store changes) rather than calling render_page per request.
    ASSETS, plotly_js()
        The folder of the site's script and style, and Plotly's plotly.min.js: a page
        loads them as `assets/<name>` relative to the site's root.

Pages read nothing themselves: results/site_data.py reads and computes, this package renders
(the session page is `orch report`'s HTML). Every string from the store is escaped, in HTML
and in the chart data (site/charts.py).
"""
from __future__ import annotations

from orchestrator.site.build import ASSETS, SiteBuild, build_site, pages, plotly_js, render_page

__all__ = ["ASSETS", "SiteBuild", "build_site", "pages", "plotly_js", "render_page"]
