"""The one line per group of failed lab cells (results/lab_failures.py groups them), as
`orch lab status`, `orch lab wait` and the report print it: `4 cells failed: CAUSE (on d1)`,
naming the cells themselves when there are three or fewer."""
from __future__ import annotations

from orchestrator.results.lab_failures import FailureGroup

NAMED = 3   # up to this many cells are named; more: their devices


def failure_group_line(group: FailureGroup) -> str:
    cells = "cell" if group.count == 1 else "cells"
    if group.count <= NAMED:
        where = ", ".join(f"{c.device} {c.cell_key}" for c in group.cells)
    else:
        where = "on " + ", ".join(group.devices)
    return f"{group.count} {cells} failed: {group.cause} ({where})"


def failure_lines(groups: list[FailureGroup]) -> list[str]:
    return [failure_group_line(g) for g in groups]
