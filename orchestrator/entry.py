"""The `orch` console script: signal handling first, then the command line.

Importing the click group takes a few tenths of a second (rich, click, the command modules).
Python's own SIGINT handler would turn a Ctrl-C in that window into a KeyboardInterrupt with a
full traceback; here Ctrl-C before or after a command (importing, parsing options, exiting)
prints the one line `interrupted` and exits 130. While a command runs, the group gives SIGINT
back to Python (KeyboardInterrupt: handle_errors' one line, `orch run`'s clean stop).

This module imports only the standard library (and orchestrator.address_space, which does too),
and lives outside orchestrator.cli so that importing it does not import the commands (a
package's __init__ runs first). Before the commands are imported (and after the SIGINT
handler), the numeric libraries' thread pools are bounded and their first imports guarded
against an address-space limit (address_space.py; docs/reliability.md, "Low memory").
SIGTERM and SIGHUP keep their default here (nothing to clean up yet); `orch run` and
`orch lab worker` handle both the same way (run/lifecycle.py, lab/supervisor.py).

The standard streams are made safe first, for every command (docs/reliability.md, "Closed and
broken standard streams"): a closed stdin, stdout or stderr (`orch runs >&-`, a service started
without one) is /dev/null on its descriptor before anything opens a file (a store opened as
descriptor 1 would receive the output) and before rich or click look at it; a reader that went
away (`orch runs | head -1`) ends the command silently with exit 141 (128 + SIGPIPE, as the
shell reports a process killed by it), after `orch run` stopped its engines and closed its
session (the write that failed is the stop). On a terminal the bidirectional controls
(U+202E, ...) are shown escaped (escape.py), whoever prints.
"""
from __future__ import annotations

import os
import signal
import sys
from typing import Any

EXIT_INT = 130
EXIT_PIPE = 141     # 128 + SIGPIPE: the reader of orch's output went away (README, "Exit codes")
_seen = {"int": False}


def _interrupted(_signum: int, _frame: object) -> None:
    """SIGINT outside a command: one line, exit 130; a second Ctrl-C while exiting is ignored."""
    if _seen["int"]:
        return
    _seen["int"] = True
    os.write(2, b"interrupted\n")
    # The one exit outside cli/handler.py: no command runs here (Python is importing the
    # commands, or exiting), so no handler is there to map an Interrupted.
    raise SystemExit(EXIT_INT)


def _reopen_closed() -> None:
    """Each closed standard descriptor (0, 1, 2) opened on /dev/null, and its Python stream
    (None when the descriptor was closed at start-up) made again."""
    for fd, flags, name in ((0, os.O_RDONLY, "stdin"), (1, os.O_WRONLY, "stdout"),
                            (2, os.O_WRONLY, "stderr")):
        try:
            os.fstat(fd)
            if getattr(sys, name) is not None:
                continue
        except OSError:
            null = os.open(os.devnull, flags)   # the lowest free descriptor: this one
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
        mode = "r" if fd == 0 else "w"
        setattr(sys, name, open(fd, mode, buffering=1 if fd else -1, encoding="utf-8",
                                errors="backslashreplace", closefd=False))


class _Guarded:
    """stdout or stderr as orch writes it: a broken pipe is noted (main exits 141 silently),
    and on a terminal the bidi controls are shown escaped (escape.bidi_visible)."""

    broken = False

    def __init__(self, stream: Any, terminal: bool) -> None:
        self._stream, self._terminal = stream, terminal

    def write(self, text: str) -> int:
        if self._terminal and isinstance(text, str):
            from orchestrator.escape import bidi_visible

            text = bidi_visible(text)
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            _Guarded.broken = True
            raise

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            _Guarded.broken = True
            raise

    def __getattr__(self, name: str) -> Any:   # encoding, buffer, fileno, isatty, ...
        return getattr(self._stream, name)


def _guard_streams() -> None:
    _reopen_closed()
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        setattr(sys, name, _Guarded(stream, stream.isatty()))


def _silence_output() -> None:
    """After a broken pipe: stdout and stderr to /dev/null, so the interpreter's flush at exit
    finds nothing to complain about."""
    null = os.open(os.devnull, os.O_WRONLY)
    for fd in (1, 2):
        os.dup2(null, fd)
    os.close(null)


def main() -> None:
    _guard_streams()
    try:
        try:
            _main()
        finally:
            sys.stdout.flush()   # a broken pipe shows here when the output fit the buffer
    except SystemExit:
        if not _Guarded.broken:
            raise
    except BrokenPipeError:
        pass
    if _Guarded.broken:
        _silence_output()
        raise SystemExit(EXIT_PIPE)


def _main() -> None:
    # A SIGINT ignored by the caller (`nohup`, a background job of a non-interactive shell)
    # stays ignored: Python installs its handler only where SIGINT was not ignored.
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _interrupted)
    # after the SIGINT handler (a Ctrl-C here is one line too), before any numeric library
    from orchestrator.address_space import prepare

    prepare()
    from orchestrator.cli import main as group

    group(prog_name="orch")


if __name__ == "__main__":  # pragma: no cover
    main()
