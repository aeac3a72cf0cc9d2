"""What every `orch` command shares: the consoles, the --db, --inventory and --trim options.
The error handler every command runs under is cli/handler.py."""
from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import click
from rich.console import Console



class _Console(Console):
    """rich's Console, except that a reader gone away (`orch runs | head -1`) is the
    BrokenPipeError itself, not rich's own exit with code 1: `orch run` stops its engines and
    closes its session first (run/progress.py Board.print), and the console script exits 141
    for every command (orchestrator/entry.py)."""

    def on_broken_pipe(self) -> None:
        raise BrokenPipeError(32, "Broken pipe")


# Piped output (logs, CI) gets wide tables instead of rich's 80-column default with "…" cells.
console = _Console() if sys.stdout.isatty() else _Console(width=220)
errors = _Console(stderr=True) if sys.stderr.isatty() else _Console(stderr=True, width=220)


def db_option(func: Callable[..., Any]) -> Callable[..., Any]:
    func = click.option("--db", envvar="ORCH_DB", metavar="URL",
                        help="Store: a SQLAlchemy URL or a SQLite file path "
                             "(default ./orch.db; env ORCH_DB).")(func)
    return func


def inventory_option(func: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--inventory", "-i", metavar="FILE",
                        help="Device inventory (default ./devices.yaml, then "
                             "~/.config/orch/devices.yaml; `local` always exists).")(func)


TRIM_HELP = ("Leave each run's first N tokens out of every per-token statistic (mean, median, "
             "percentiles, latency, steady state, within-run intervals); the engine's "
             "summary figures (prefill, TTFT, cache hit) are the whole run's. A run with N "
             "tokens or fewer has none (—). [default: the matrix's or design file's `trim:`, "
             "else 0]")


EXCLUDE_HELP = ("Leave a run out of every figure (repeatable): a run id or a glob over the "
                "runs' imported files, optionally with why (`--exclude 7='cross-day run'`); "
                "listed under Left out with the reason, as a design file's `exclude:` is.")


def exclude_option(func: Callable[..., Any]) -> Callable[..., Any]:
    """`--exclude RUN[=REASON]` (repeatable): results/exclude.py."""
    return click.option("--exclude", "excludes", multiple=True, metavar="RUN[=REASON]",
                        help=EXCLUDE_HELP)(func)


def trim_option(func: Callable[..., Any]) -> Callable[..., Any]:
    """`--trim N` (None when not given: the session's own `trim:` applies, results/trim.py)."""
    return click.option("--trim", type=click.IntRange(min=0), default=None, metavar="N",
                        help=TRIM_HELP)(func)
