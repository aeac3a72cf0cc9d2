"""`orch tokens RUN`: a run's chosen tokens, as the engine recorded them."""
from __future__ import annotations

import sys

import click

from orchestrator.cli.handler import friendly
from orchestrator.cli.options import db_option

DEFAULT_STEPS = "1-10,50,100,-1"     # results/tokens.py's; a literal so the CLI starts light


@click.command()
@click.argument("run_id", type=int, metavar="RUN")
@click.option("--steps", default=DEFAULT_STEPS, show_default=True,
              help="Which tokens, by position in the run (1 = the first decode token): "
                   "single steps, ranges a-b, and -1 for the last.")
@click.option("--format", "fmt", type=click.Choice(["md", "csv", "json"]), default="md",
              show_default=True)
@db_option
@friendly
def tokens(run_id: int, steps: str, fmt: str, db: str | None) -> None:
    """Print a run's chosen tokens: step, wall_ms, compute_ms, io_ms, stall_ms, cache hit %
    and read MiB (read_bytes / 2^20). An unknown run or bad --steps exits 2."""
    from orchestrator.db.store import Store
    from orchestrator.report.table.tokens import text
    from orchestrator.results.tokens import run_tokens

    store = Store.open(db, create=False)
    sys.stdout.write(text(run_tokens(store, run_id, steps), fmt, run_id))
