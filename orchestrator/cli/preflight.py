"""The one question `orch run` and `orch lab submit` may ask before anything runs: a plan of
over ASK_CELLS cells per device needs a yes (the checks that need no answer are in
run/preflight.py)."""
from __future__ import annotations

import sys

import click

from orchestrator.config.matrix import ASK_CELLS, LoadedMatrix
from orchestrator.errors import ConfigError


def confirm_size(loaded: LoadedMatrix, devices: int, yes: bool) -> None:
    """A plan over ASK_CELLS cells (per device) runs only after a yes: --yes, or an answer at
    a terminal. Without a terminal and without --yes it is refused (exit 2)."""
    cells = loaded.matrix.planned_cells()
    if cells <= ASK_CELLS or yes:
        return
    what = f"{loaded.path} plans {cells:,} cells per device" + \
        (f" on {devices} devices" if devices > 1 else "")
    if not sys.stdin.isatty():
        raise ConfigError(f"{what} (over {ASK_CELLS:,}): give --yes to run them")
    if not click.confirm(f"{what}. Run them?", default=False, err=True):
        raise ConfigError(f"{what}: not confirmed")
