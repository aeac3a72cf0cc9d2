"""Commands that publish results: `orch report` (a benchmark document) and `orch compare`."""
from __future__ import annotations

import sys
from pathlib import Path

import click

from orchestrator.cli.options import console, db_option, friendly


@click.command()
@click.argument("session", required=False)
@click.option("--matrix", "-m", help="The latest session of this matrix (per device).")
@click.option("--device", "-d", "devices", multiple=True,
              help="Only these devices (repeatable).")
@click.option("--out", "-o", type=click.Path(dir_okay=False),
              help="Write the document here; figures go to <name>_files/ beside it "
                   "(default: print to stdout, no figures).")
@click.option("--format", "fmt", type=click.Choice(["md", "html"]), default="md",
              show_default=True, help="Markdown, or the same document as a standalone HTML page.")
@click.option("--template", "-t", type=click.Path(exists=True),
              help="A template file (the main document) or a directory whose templates "
                   "replace the built-in ones of the same name (report.md.j2, header.md.j2, "
                   "group.md.j2, left_out.md.j2, provenance.md.j2, page.html.j2).")
@click.option("--baseline", "-b", help="Config to compare the others against (default: the "
                                       "matrix's `baseline:`).")
@click.option("--no-plots", is_flag=True, help="Skip the figures.")
@click.option("--quantile", type=click.Choice(["linear", "lower"]), default="linear",
              show_default=True, help="p5/p95 method (see `orch table --help`).")
@db_option
@friendly
def report(session: str | None, matrix: str | None, devices: tuple[str, ...], out: str | None,
           fmt: str, template: str | None, baseline: str | None, no_plots: bool,
           quantile: str, db: str | None) -> None:
    """Render a benchmark document of a session (id or name; default: the newest) or of the
    latest session of --matrix on each device: what was measured, per model and device the
    throughput, device pressure and A/B tables, figures, the runs left out (†) and the
    provenance of every number."""
    from orchestrator.db.store import Store
    from orchestrator.report import render_report, select_runs

    store = Store.open(db)
    rows = select_runs(store, session, matrix, devices)
    text = render_report(store, rows, out=Path(out) if out else None, fmt=fmt, template=template,
                  baseline=baseline, plots=not no_plots, quantile=quantile)
    if out:
        console.print(f"wrote {out}", highlight=False)
    else:
        sys.stdout.write(text)


@click.command()
@click.argument("session", required=False)
@click.option("--device", "-d", "devices", multiple=True, required=True,
              help="A device to compare (give two or more; the first is the reference A).")
@click.option("--matrix", "-m", help="Matrix name (default: the newest one these devices ran).")
@click.option("--out", "-o", type=click.Path(dir_okay=False), help="Also write markdown here.")
@click.option("--template", "-t", type=click.Path(exists=True),
              help="A template file or directory replacing compare.md.j2.")
@db_option
@friendly
def compare(session: str | None, devices: tuple[str, ...], matrix: str | None, out: str | None,
            template: str | None, db: str | None) -> None:
    """The same matrix on two or more devices side by side: per config each device's mean
    tok/s, p50, p95, read/token and peak RSS, and the ratios to the first device (B/A). Uses
    the latest session of the matrix per device, or SESSION's runs across devices."""
    from orchestrator.db.store import Store
    from orchestrator.report.compare import compare as run_compare

    store = Store.open(db)
    run_compare(store, list(devices), session=session, matrix=matrix,
                out=Path(out) if out else None, console=console, template=template)
    if out:
        console.print(f"wrote {out}", highlight=False)
