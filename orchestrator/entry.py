"""The `orch` console script: signal handling first, then the command line.

Importing the click group takes a few tenths of a second (rich, click, the command modules).
Python's own SIGINT handler would turn a Ctrl-C in that window into a KeyboardInterrupt with a
full traceback; here Ctrl-C before or after a command (importing, parsing options, exiting)
prints the one line `interrupted` and exits 130. While a command runs, OrchGroup gives SIGINT
back to Python (KeyboardInterrupt: handle_errors' one line, `orch run`'s clean stop).

This module imports only the standard library, and lives outside orchestrator.cli so that
importing it does not import the commands (a package's __init__ runs first).
SIGTERM and SIGHUP keep their default here (nothing to clean up yet); `orch run` and
`orch lab worker` handle both the same way (run/lifecycle.py, lab/supervisor.py).
"""
from __future__ import annotations

import os
import signal

EXIT_INT = 130
_seen = {"int": False}


def _interrupted(_signum: int, _frame: object) -> None:
    """SIGINT outside a command: one line, exit 130; a second Ctrl-C while exiting is ignored."""
    if _seen["int"]:
        return
    _seen["int"] = True
    os.write(2, b"interrupted\n")
    raise SystemExit(EXIT_INT)


def main() -> None:
    # A SIGINT ignored by the caller (`nohup`, a background job of a non-interactive shell)
    # stays ignored: Python installs its handler only where SIGINT was not ignored.
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _interrupted)
    from orchestrator.cli import main as group

    group(prog_name="orch")


if __name__ == "__main__":  # pragma: no cover
    main()
