"""The static site's pages (orchestrator.site, `orch site`) mounted live: built into a
directory when the server starts and rebuilt when the store changed (a new session or run,
a run that ended), checked at most every `check_s` seconds on a page request. build_site is
incremental and writes each page whole (a reader never sees half a page), so requests are
served from the directory while it is rebuilt."""
from __future__ import annotations

import importlib
import threading
import time
from pathlib import Path
from typing import Any, Callable

from starlette.concurrency import run_in_threadpool
from starlette.staticfiles import StaticFiles
from starlette.types import Receive, Scope, Send

from orchestrator.db.store import Store
from orchestrator.results.live import store_mark


def site_builder() -> Callable[[Store, Path], Any] | None:
    """orchestrator.site.build_site, or None where it cannot be imported (an install without
    the `site` extra): then the server serves the lab page and the API only."""
    # imported by name, so that `orch serve` starts without the site's dependencies
    try:
        module = importlib.import_module("orchestrator.site")
    except ImportError:
        return None
    return getattr(module, "build_site", None)


class SitePages:
    """An ASGI app: the site's files under `root`, kept as fresh as the store."""

    def __init__(self, store: Store, root: Path, build: Callable[[Store, Path], Any],
                 check_s: float = 2.0) -> None:
        self.store, self.root, self.build, self.check_s = store, root, build, check_s
        self._lock = threading.Lock()
        self._mark: tuple[Any, ...] | None = None
        self._checked = 0.0
        self.refresh()
        self.files = StaticFiles(directory=root, html=True)

    def refresh(self) -> None:
        """Rebuild when the store changed since the last build (one rebuild at a time)."""
        with self._lock:
            if time.monotonic() - self._checked < self.check_s and self._mark is not None:
                return
            self._checked = time.monotonic()
            mark = store_mark(self.store)
            if mark != self._mark:
                self.build(self.store, self.root)
                self._mark = mark

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await run_in_threadpool(self.refresh)
        await self.files(scope, receive, send)
