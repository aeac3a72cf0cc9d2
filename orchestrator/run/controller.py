"""The controller's identity for a session's provenance: orch's git revision, Python, host."""
from __future__ import annotations

import getpass
import platform
import socket
import subprocess
from pathlib import Path


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
