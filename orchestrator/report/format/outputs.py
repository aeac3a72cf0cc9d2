"""Checks of an output path (`orch report -o`, `orch export`) before anything is rendered or
written: a refusal is one line and exit 2 (a ConfigError), and no figure folder or partial
file is left behind."""
from __future__ import annotations

import os
import stat
from pathlib import Path

from orchestrator.errors import ConfigError


def _existing_ancestor(path: Path) -> Path:
    """The nearest ancestor of `path` that exists (what a mkdir -p would create folders in)."""
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    return parent


def check_out_file(path: Path) -> None:
    """`path` may receive a document: a regular file or a new file, in a folder that is (or can
    be created in) a writable directory."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        info = None
    except OSError as exc:
        raise ConfigError(f"cannot write {path}: {exc.strerror or exc}") from None
    if info is not None and not stat.S_ISREG(info.st_mode):
        raise ConfigError(f"cannot write {path}: not a regular file")
    parent = _existing_ancestor(path)
    if not parent.is_dir():
        raise ConfigError(f"cannot write {path}: {parent} is not a directory")
    if not os.access(parent if info is None else path, os.W_OK):
        raise ConfigError(f"cannot write {path}: permission denied")


def check_out_dir(path: Path, option: str = "-o") -> None:
    """`path` may receive files: a directory, or a new one under a writable directory."""
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{option} {path}: not a directory")
    parent = path if path.exists() else _existing_ancestor(path)
    if not parent.is_dir():
        raise ConfigError(f"{option} {path}: {parent} is not a directory")
    if not os.access(parent, os.W_OK):
        raise ConfigError(f"{option} {path}: permission denied")
