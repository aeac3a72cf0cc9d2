"""orch's own error classes, at the bottom of the layers so that every layer can raise them
(docs/architecture.md, "Layers", "Errors and exit codes").

Code that cannot go on raises an OrchError whose class says what went wrong; the CLI's one
error handler (orchestrator/cli/handler.py) prints it as one line and exits with the class's
`exit_code`. No other module decides an exit code or exits. The codes (README, "Exit
codes"; `orch --help`):

    0    ok
    1    Failed, DeviceError, BuildError, StoreWriteError: the work failed (message says why;
         a store server that cannot be reached too: db/faults.py StoreUnreachable)
    2    ConfigError, StoreError: bad input (matrix, inventory, options, --db), nothing written
    3    NotFound: no session / run / device of that id or name
    4    Busy: a session, device or import is held by another live orch (or the store is
         locked past its busy timeout: db/faults.py StoreLocked)
    5    Regression: `orch compare --fail-on` found a significant slowdown (the CI gate)
    130  Interrupted (Ctrl-C; 128 + the signal for SIGTERM 143, SIGHUP 129)
"""
from __future__ import annotations

from typing import ClassVar


class OrchError(Exception):
    """An error meant for the user: its message is printed as is, after `prefix`, as one
    line, and orch exits with `exit_code`. An OrchError without a message was reported
    already (the command printed its table or its lines): the handler only exits."""

    exit_code: int = 1        # per class; Interrupted's is per instance (per signal)
    prefix: ClassVar[str] = "error: "


class Failed(OrchError):
    """The work failed (a run, a device, an import that imported nothing): exit 1."""


class ConfigError(OrchError):
    """A user file (matrix, inventory, design) or option is wrong. The message is meant to be
    printed as is; the CLI exits 2."""

    exit_code = 2


class StoreError(ConfigError):
    """`--db` names no usable store (a directory, a bad URL, a missing driver, a file that is
    no database): one line and exit 2, before anything runs. A server that cannot be reached
    is not bad input: db/faults.py StoreUnreachable, exit 1."""


class NotFound(ConfigError):
    """The user named a session, run or device that is not there: exit 3. A ConfigError (a
    wrong name is bad input, and code that refuses bad input catches it too) with its own
    code, so a script can tell "no such thing" from "bad matrix"."""

    exit_code = 3


class Busy(OrchError):
    """A session, device or import folder is held by another live orch process (a lock that
    dies with its holder, db/session_lock.py): exit 4; waiting and trying again helps."""

    exit_code = 4


class Regression(OrchError):
    """`orch compare --fail-on regression[:PCT]`: the comparison holds a significant slowdown
    beyond PCT (results/gate.py): exit 5, so a CI job tells a regression from a typo'd
    session (3) or a bad option (2)."""

    exit_code = 5
    prefix = "regression: "


class StoreWriteError(OrchError):
    """The store failed while a run streamed into it (a full disk, a server gone): printed
    as one line, exit 1. The engine was stopped first; the cell is left to `--resume`."""


class DeviceError(OrchError):
    """A device could not be reached or did not do what it was asked (the transports' errors
    derive from it): `device error: ...`, exit 1."""

    prefix = "device error: "


class BuildError(OrchError):
    """A build that cannot go on (missing tool, failed step): exit 1. The tools' builds
    (llama.cpp, the ceiling probes) raise it or a subclass."""


class Interrupted(OrchError):
    """orch was stopped by a signal after cleaning up: the message is the whole line (no
    prefix), the exit code 128 + the signal (130 for Ctrl-C, 143 for SIGTERM)."""

    exit_code = 130
    prefix = ""

    def __init__(self, message: str, signum: int = 2) -> None:
        super().__init__(message)
        self.signum = signum
        self.exit_code = 128 + signum
