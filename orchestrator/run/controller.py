"""The controller's identity for a session's provenance: orch's version and git revision,
Python, host and the command line. `SessionProvenance.collect` is the one place a new
session's provenance is gathered (`orch run`, `orch lab submit`, `orch import`)."""
from __future__ import annotations

import getpass
import platform
import shlex
import socket
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from orchestrator import __version__


@dataclass(frozen=True)
class SessionProvenance:
    """Who made a session, with what: the session row's provenance columns."""

    orch_version: str
    git_rev: str | None
    python_version: str
    controller_host: str
    command: str

    @classmethod
    def collect(cls, command: str | None = None) -> SessionProvenance:
        """This controller's, now; `command`: the orch command line (default: this
        process's argv)."""
        return cls(__version__, git_revision(), python_version(), host(),
                   command or "orch " + shlex.join(sys.argv[1:]))

    def columns(self) -> dict[str, Any]:
        """The session row's columns (db/schema.py `session`)."""
        return asdict(self)


def git_revision() -> str | None:
    """The orch checkout's revision (with -dirty), when orch runs from a git work tree."""
    root = Path(__file__).resolve().parents[2]
    try:
        rev = subprocess.run(["git", "-C", str(root), "describe", "--always", "--dirty"],
                             capture_output=True, text=True, timeout=5, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return rev.stdout.strip() or None


def python_version() -> str:
    """e.g. "CPython 3.11.9": statistics come from scipy/numpy under this interpreter."""
    return f"{platform.python_implementation()} {platform.python_version()}"


def host() -> str:
    return f"{getpass.getuser()}@{socket.gethostname()}"
