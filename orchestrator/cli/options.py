"""What every `orch` command shares: the consoles, the --db and --inventory options, and the
handler that turns user-facing errors into one line and an exit code."""
from __future__ import annotations

import contextlib
import functools
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import click
from rich.console import Console

from orchestrator.errors import ConfigError, StoreWriteError

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


# Exit codes (README "Exit codes"; `orch --help`): 0 ok, 1 a failed run or device or an
# unexpected error, 2 bad input (matrix, inventory, options, --db; nothing written), 130 Ctrl-C,
# 143 SIGTERM.
EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_INT, EXIT_TERM = 0, 1, 2, 130, 143

# `orch --debug ...`: unexpected errors show their traceback (set by the group's option)
DEBUG = {"on": False}


def _fail(message: str, code: int) -> None:
    # a device's or a file's text in the message
    from orchestrator.escape import visible

    click.echo(visible(message), err=True)
    sys.exit(code)


def _transport_error() -> type[BaseException] | tuple[()]:
    """TransportError once a transport was imported, else nothing to catch: a command that
    touched no device (`orch runs`) cannot have raised one, and need not import the transports
    (pydantic, tenacity) to know it. Evaluated when an exception reaches the clause."""
    base = sys.modules.get("orchestrator.transports.base")
    return base.TransportError if base is not None else ()


def handle_errors(call: Callable[[], Any]) -> Any:
    """Run `call`; every error a user can meet ends as one line on stderr and an exit code.
    Click's own exits and usage errors pass through (click prints them); anything unexpected
    names its type and message and points at --debug, which re-raises it instead."""
    try:
        return call()
    except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
        raise
    except ConfigError as exc:
        _fail(f"error: {exc}", EXIT_BAD_INPUT)
    except StoreWriteError as exc:
        _fail(f"error: {exc}", EXIT_FAILED)
    except _transport_error() as exc:
        _fail(f"device error: {exc}", EXIT_FAILED)
    except KeyboardInterrupt:
        _fail("interrupted", EXIT_INT)
    except OSError as exc:   # an unwritable -o, a full disk, a file that vanished
        if DEBUG["on"]:
            raise
        where = f"{exc.filename}: " if exc.filename else ""
        _fail(f"error: {where}{exc.strerror or exc}", EXIT_FAILED)
    except Exception as exc:
        if DEBUG["on"]:
            raise
        text = str(exc).strip().splitlines()
        _fail(f"error: {type(exc).__name__}: {text[0] if text else '(no message)'} "
              f"(run with --debug for the traceback)", EXIT_FAILED)


def friendly(func: Callable[..., Any]) -> Callable[..., Any]:
    """Turn the library's user-facing errors into a message and an exit code, not a trace."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return handle_errors(lambda: func(*args, **kwargs))
    return wrapper


class OrchGroup(click.Group):
    """The `orch` group: every command runs under handle_errors, with or without @friendly."""

    def invoke(self, ctx: click.Context) -> Any:
        with _python_sigint():
            return handle_errors(lambda: super(OrchGroup, self).invoke(ctx))


@contextlib.contextmanager
def _python_sigint() -> Iterator[None]:
    """While a command runs, Ctrl-C is Python's KeyboardInterrupt (handle_errors' one line,
    `orch run`'s clean stop); before and after it, orchestrator/entry.py's handler (one line,
    130, no traceback) is back. Only in the main thread, and an ignored SIGINT stays ignored."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)
    if previous in (signal.SIG_IGN, None):
        yield
        return
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


TRIM_HELP = ("Leave each run's first N tokens out of every per-token statistic (mean, median, "
             "percentiles, latency, steady state, within-run intervals); the engine's "
             "summary figures (prefill, TTFT, cache hit) are the whole run's. A run with N "
             "tokens or fewer has none (—). [default: the matrix's or design file's `trim:`, "
             "else 0]")


def trim_option(func: Callable[..., Any]) -> Callable[..., Any]:
    """`--trim N` (None when not given: the session's own `trim:` applies, results/trim.py)."""
    return click.option("--trim", type=click.IntRange(min=0), default=None, metavar="N",
                        help=TRIM_HELP)(func)
