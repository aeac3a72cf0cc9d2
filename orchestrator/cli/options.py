"""What every `orch` command shares: the consoles, the --db and --inventory options, and the
handler that turns user-facing errors into one line and an exit code."""
from __future__ import annotations

import functools
import sys
from typing import Any, Callable

import click
from rich.console import Console

from orchestrator.config.yamlfile import ConfigError

# Piped output (logs, CI) gets wide tables instead of rich's 80-column default with "…" cells.
console = Console() if sys.stdout.isatty() else Console(width=220)
errors = Console(stderr=True) if sys.stderr.isatty() else Console(stderr=True, width=220)


def db_option(func: Callable[..., Any]) -> Callable[..., Any]:
    func = click.option("--db", envvar="ORCH_DB", metavar="URL",
                        help="Store: a SQLAlchemy URL or a SQLite file path "
                             "(default ./orch.db; env ORCH_DB).")(func)
    return func


def inventory_option(func: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--inventory", "-i", metavar="FILE",
                        help="Device inventory (default ./devices.yaml, then "
                             "~/.config/orch/devices.yaml; `local` always exists).")(func)


def friendly(func: Callable[..., Any]) -> Callable[..., Any]:
    """Turn the library's user-facing errors into a message and an exit code, not a trace."""
    from orchestrator.transports.base import TransportError

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except ConfigError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(2)
        except TransportError as exc:
            click.echo(f"device error: {exc}", err=True)
            sys.exit(1)
    return wrapper


