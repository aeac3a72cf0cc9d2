"""`orch serve`: the store's pages served live, a lab page and JSON endpoints (docs/serve.md).

    create_app(store_url, site_dir=None, poll_s=1.0) -> Starlette

Read-only: every route is a GET (HEAD) of a page, an asset or /api/...; nothing writes the
store. The data comes from results/live.py and lab/live.py; this package only routes and
renders (the lab page's script fills it from /api/lab)."""
from __future__ import annotations

from orchestrator.serve.app import create_app

__all__ = ["create_app"]
