"""The one place orch turns an error into one line on stderr and an exit code.

Every command runs under `handle_errors` (the `orch` group's invoke; @friendly for a command
invoked on its own). Library code raises an OrchError (orchestrator/errors.py) whose class
carries the exit code; this module maps it, once. No other module of orch calls sys.exit
(tests/test_structure.py, test_only_the_error_handler_exits): the exceptions to that are
orchestrator/entry.py's Ctrl-C outside a command and the lab consumer's own process.
"""
from __future__ import annotations

import contextlib
import functools
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any, NoReturn

import click

# imported here, not at the error: importing under a MemoryError may fail again
from orchestrator.address_space import is_out_of_memory, memory_line
from orchestrator.errors import Failed, Interrupted, OrchError

# Exit codes besides the OrchError classes' own (README, "Exit codes"; `orch --help`)
EXIT_OK, EXIT_FAILED, EXIT_INT = 0, Failed.exit_code, 130

# `orch --debug ...`: unexpected errors show their traceback (set by the group's option)
DEBUG = {"on": False}


def _fail(message: str, code: int) -> NoReturn:
    """Print `message` (if any) as one line on stderr and exit with `code`: the only exit."""
    if message:
        # a device's or a file's text in the message
        from orchestrator.escape import visible

        click.echo(visible(message), err=True)
    sys.exit(code)


def _line(exc: OrchError) -> str:
    """An OrchError's one line; nothing for one without a message (reported already)."""
    text = str(exc)
    return f"{exc.prefix}{text}" if text else ""


def handle_errors(call: Callable[[], Any]) -> Any:
    """Run `call`; every error a user can meet ends as one line on stderr and an exit code.
    Click's own exits and usage errors pass through (click prints them); anything unexpected
    names its type and message and points at --debug, which re-raises it instead."""
    try:
        return call()
    except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
        raise
    except OrchError as exc:
        _fail(_line(exc), exc.exit_code)
    except KeyboardInterrupt:
        _fail("interrupted", Interrupted.exit_code)
    except BrokenPipeError:   # the reader went away: nothing to tell it (entry.py exits 141)
        _fail("", EXIT_FAILED)
    except Exception as exc:
        _unexpected(exc)


def _unexpected(exc: Exception) -> NoReturn:
    """An error no OrchError announced: out of memory (a MemoryError, a library that could not
    be mapped) names the address-space limit; an OSError its file; anything else its type, and
    --debug re-raises it."""
    if DEBUG["on"]:
        raise exc
    if is_out_of_memory(exc):
        _fail(f"error: {memory_line()}", EXIT_FAILED)
    if isinstance(exc, OSError):   # an unwritable -o, a full disk, a file that vanished
        where = f"{exc.filename}: " if exc.filename else ""
        _fail(f"error: {where}{exc.strerror or exc}", EXIT_FAILED)
    text = str(exc).strip().splitlines()
    _fail(f"error: {type(exc).__name__}: {text[0] if text else '(no message)'} "
          f"(run with --debug for the traceback)", EXIT_FAILED)


def friendly(func: Callable[..., Any]) -> Callable[..., Any]:
    """Turn the library's user-facing errors into a message and an exit code, not a trace."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return handle_errors(lambda: func(*args, **kwargs))
    return wrapper


@contextlib.contextmanager
def python_sigint() -> Iterator[None]:
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
