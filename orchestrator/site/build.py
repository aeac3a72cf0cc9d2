"""`orch site -o DIR`: write the site, only what changed since the last build.

DIR/manifest.json records, per page, the digest of its inputs (results/site_data.py) and the
digest of the site's own code (templates, assets, orch's version): a page is rewritten when
either changed or its file is gone; a page no longer in the store is deleted. The assets
(assets/: Plotly's plotly.min.js from the `plotly` package, the site's script and style) are
copied when they differ.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import multiprocessing as mp
import shutil
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from orchestrator import __version__
from orchestrator.db.store import Store
from orchestrator.errors import ConfigError
from orchestrator.results.site_data import site_data
from orchestrator.site.pages import TEMPLATES, Page, plan

ASSETS = Path(str(resources.files("orchestrator.site") / "assets"))
MANIFEST = "manifest.json"
Progress = Callable[[int, int, str], None]          # (done, total, path)


@dataclass
class SiteBuild:
    """What a build did: pages written, left as they were, and deleted (paths in the site)."""

    out: Path
    written: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return len(self.written) + len(self.unchanged)


def plotly_js() -> Path:
    """plotly.min.js as the `plotly` package ships it (orch's `site` extra)."""
    spec = importlib.util.find_spec("plotly")       # its file, without importing plotly
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError("orch site needs Plotly's script: pip install 'orch[site]'")
    path = Path(list(spec.submodule_search_locations)[0]) / "package_data" / "plotly.min.js"
    if not path.is_file():
        raise ConfigError(f"the plotly package has no {path}: reinstall it")
    return path


def code_digest() -> str:
    """The site's own code: a change rebuilds every page."""
    h = hashlib.sha256(__version__.encode())
    for folder in (TEMPLATES, ASSETS):
        for f in sorted(folder.iterdir()):
            h.update(f.name.encode() + f.read_bytes())
    return h.hexdigest()[:20]


def pages(store: Store, plots: bool = True) -> list[Page]:
    """Every page of the store's site (nothing rendered yet)."""
    return plan(store, site_data(store), plots)


def render_page(store: Store, path: str, plots: bool = True) -> bytes | None:
    """One page of the site as `build_site` writes it (`path`: "index.html",
    "sessions/3.html", ...), or None when the store has no such page."""
    for page in pages(store, plots):
        if page.path == path:
            return page.render()
    return None


def build_site(store: Store, out: Path, plots: bool = True,
               progress: Progress | None = None, jobs: int = 1) -> SiteBuild:
    """Write the store's site into `out`: the pages whose inputs changed since the last
    build (all of them the first time), the assets, the manifest. `jobs`: processes that
    render pages (rendering is CPU-bound Python); above 1 they are forked, which only a
    single-threaded caller may do (`orch site` passes one per CPU; a server keeps 1)."""
    out.mkdir(parents=True, exist_ok=True)
    _copy_assets(out)
    manifest_path = out / MANIFEST
    old = _read_manifest(manifest_path)
    code = code_digest()
    result = SiteBuild(out)
    every = pages(store, plots)
    new = {page.path: page.inputs for page in every}
    stale = []
    for page in every:
        if old.get("code") == code and old["pages"].get(page.path) == page.inputs \
                and (out / page.path).is_file():
            result.unchanged.append(page.path)
        else:
            stale.append(page)
    done = len(result.unchanged)
    for page, data in rendered(store, stale, jobs):
        target = out / page.path
        target.parent.mkdir(parents=True, exist_ok=True)
        _write(target, data)
        result.written.append(page.path)
        done += 1
        if progress is not None:
            progress(done, len(every), page.path)
    for path in sorted(set(old["pages"]) - set(new)):
        (out / path).unlink(missing_ok=True)
        result.removed.append(path)
    _write(manifest_path, json.dumps({"code": code, "pages": new}, indent=0).encode())
    return result


_PENDING: list[Page] = []      # what forked renderers render (inherited, never pickled)


def rendered(store: Store, todo: list[Page], jobs: int) -> Iterator[tuple[Page, bytes]]:
    """Each page with its bytes, in order. With jobs > 1, many pages render in forked
    processes (the store's connections are not shared: each child opens its own), a few in
    this one."""
    if jobs < 2 or len(todo) < PARALLEL_FROM or "fork" not in mp.get_all_start_methods():
        yield from ((page, page.render()) for page in todo)
        return
    _PENDING[:] = todo
    try:
        with ProcessPoolExecutor(jobs, mp_context=mp.get_context("fork"),
                                 initializer=_child, initargs=(store,)) as pool:
            yield from zip(todo, pool.map(_render_pending, range(len(todo)), chunksize=4))
    finally:
        _PENDING.clear()


PARALLEL_FROM = 24            # fewer pages render sooner than processes start


def _child(store: Store) -> None:
    store.forked()


def _render_pending(index: int) -> bytes:
    return _PENDING[index].render()


def _read_manifest(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {"code": None, "pages": {}}
    if not isinstance(data, dict) or not isinstance(data.get("pages"), dict):
        return {"code": None, "pages": {}}
    # only paths the site writes: a hand-edited manifest never deletes outside DIR
    data["pages"] = {p: d for p, d in data["pages"].items()
                     if isinstance(p, str) and _is_page_path(p)}
    return data


def _is_page_path(path: str) -> bool:
    parts = path.split("/")
    return path.endswith((".html", ".xml")) and len(parts) <= 2 and all(
        p and p not in (".", "..") and "\\" not in p for p in parts)


def _copy_assets(out: Path) -> None:
    assets = out / "assets"
    assets.mkdir(exist_ok=True)
    for source in [plotly_js(), *sorted(ASSETS.iterdir())]:
        target = assets / source.name
        if not target.is_file() or target.stat().st_size != source.stat().st_size \
                or target.read_bytes() != source.read_bytes():
            shutil.copyfile(source, target)


def _write(target: Path, data: bytes) -> None:
    """Write whole or not at all: a reader (a static host) never sees half a page."""
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(target)
