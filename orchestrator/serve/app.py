"""The Starlette app of `orch serve` (docs/serve.md): the lab page, the JSON endpoints and,
where orch has its site package, the site's pages.

Routes (GET only; anything else is 404 or 405):

    /lab                 the lab page: it polls /api/lab every poll_s seconds
    /api/lab             lab/live.py lab_view: devices, state, running cells, queues, failures
    /api/devices         every device the store knows
    /api/sessions        the newest sessions with their status counts (?limit=N, at most 500)
    /api/runs/{id}       one run: columns, figures, tokens stored, newest sample
    /_serve/...          the lab page's script and style (this package's static/)
    /...                 the site (orchestrator.site.build_site), else / redirects to /lab

Every file route is Starlette's StaticFiles, which refuses a path that resolves outside its
directory (`..`, encoded or not, absolute paths, symlinks out) with 404.
"""
from __future__ import annotations

import contextlib
import math
import shutil
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from orchestrator.db.store import Store
from orchestrator.errors import NotFound
from orchestrator.lab.live import lab_view
from orchestrator.results import live
from orchestrator.serve.site_pages import SitePages, site_builder

HERE = Path(__file__).resolve().parent
# The lab page loads only this server's script and style, and fetches only its own API.
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
       "img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
SESSIONS_MAX = 500


def _finite(value: Any) -> Any:
    """JSON has no NaN or infinity: such a figure is null ("not measured")."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


class ApiResponse(JSONResponse):
    def render(self, content: Any) -> bytes:
        return super().render(_finite(content))


def create_app(store_url: str, site_dir: Path | None = None, poll_s: float = 1.0,
               allowed_hosts: list[str] | None = None) -> Starlette:
    """The app over the store at `store_url` (opened now: a StoreError if it cannot be).
    `site_dir`: where the site's pages are built (default a temporary folder, removed when
    the app stops); `poll_s`: how often the lab page asks /api/lab; `allowed_hosts`: the
    only Host headers answered (others get 400: a web page whose name was made to resolve
    to 127.0.0.1, DNS rebinding, cannot read the store through the browser), None for any."""
    store = Store.open(store_url, create=False)
    templates = Jinja2Templates(directory=HERE / "templates")
    build = site_builder()
    temporary = site_dir is None and build is not None
    root = Path(tempfile.mkdtemp(prefix="orch-serve-")) if temporary else site_dir

    def lab_page(request: Request) -> Response:
        response = templates.TemplateResponse(
            request, "lab.html.j2",
            {"initial": _finite(lab_view(store)), "poll_ms": int(poll_s * 1000),
             "store": store.url, "has_site": build is not None})
        response.headers["Content-Security-Policy"] = CSP
        return response

    def api_lab(request: Request) -> Response:
        return ApiResponse(lab_view(store))

    def api_devices(request: Request) -> Response:
        return ApiResponse(live.devices(store))

    def api_sessions(request: Request) -> Response:
        raw = request.query_params.get("limit", "50")
        if not raw.isdigit() or not 0 < int(raw) <= SESSIONS_MAX:
            raise HTTPException(400, f"limit: a whole number from 1 to {SESSIONS_MAX}")
        return ApiResponse(live.sessions(store, int(raw)))

    def api_run(request: Request) -> Response:
        try:
            return ApiResponse(live.run(store, request.path_params["run_id"]))
        except NotFound as exc:
            raise HTTPException(404, str(exc)) from None

    def no_icon(request: Request) -> Response:
        return Response(status_code=204)     # a browser asks; a 404 would be a console error

    def home(request: Request) -> Response:
        return RedirectResponse("/lab", status_code=307)

    routes: list[Any] = [
        Route("/lab", lab_page),
        Route("/favicon.ico", no_icon),
        Route("/api/lab", api_lab),
        Route("/api/devices", api_devices),
        Route("/api/sessions", api_sessions),
        Route("/api/runs/{run_id:int}", api_run),
        Mount("/_serve", StaticFiles(directory=HERE / "static"), name="serve-static"),
    ]
    if build is not None and root is not None:
        routes.append(Mount("/", SitePages(store, root, build)))
    else:
        # without the `site` extra (Plotly) orchestrator.site cannot render pages: there are
        # no site pages to mount, and / is the lab page
        routes.append(Route("/", home))

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            if temporary and root is not None:
                shutil.rmtree(root, ignore_errors=True)

    middleware = [] if allowed_hosts is None else [
        Middleware(TrustedHostMiddleware, allowed_hosts=allowed_hosts)]
    app = Starlette(routes=routes, lifespan=lifespan, middleware=middleware)
    app.state.store = store
    return app
