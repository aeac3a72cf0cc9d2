"""`orch site -o DIR`: the store as a static website (orchestrator/site, docs/site.md)."""
from __future__ import annotations

import os
from pathlib import Path

import click

from orchestrator.cli.handler import friendly
from orchestrator.cli.options import console, db_option


@click.command()
@click.option("--out", "-o", required=True, type=click.Path(file_okay=False),
              help="The site's directory (created; a re-run rewrites only what changed).")
@click.option("--no-plots", is_flag=True,
              help="Session pages without the report's figures (faster on big stores).")
@click.option("--jobs", "-j", type=click.IntRange(min=1), metavar="N",
              help="Processes that render pages (default: one per CPU).")
@db_option
@friendly
def site(out: str, no_plots: bool, jobs: int | None, db: str | None) -> None:
    """Write the store as a static website into OUT: an index (latest regressions, devices,
    matrices, sessions), a page per session (its `orch report`), per config history (tok/s
    over sessions and builds, change points marked) and per matrix run on two or more
    devices (their comparison). It works opened from disk (file://) or from any static
    host: every script and style is in OUT (Plotly from the `site` extra), nothing is
    fetched. Pages whose inputs did not change since the last run are left as they are."""
    from orchestrator.db.store import Store
    from orchestrator.site import build_site

    store = Store.open(db, create=False)
    step = [0]

    def progress(done: int, total: int, path: str) -> None:
        if total >= 50 and done * 10 // total > step[0] or done == total:   # ~every 10%
            step[0] = done * 10 // total
            click.echo(f"{done}/{total} pages", err=True)

    result = build_site(store, Path(out), plots=not no_plots, progress=progress,
                        jobs=jobs or os.cpu_count() or 1)
    console.print(f"wrote {out}/index.html: {len(result.written)} of {result.total} pages "
                  f"written, {len(result.unchanged)} unchanged"
                  + (f", {len(result.removed)} removed" if result.removed else ""),
                  highlight=False)
