"""A run's row label as every view prints it: its config (its matrix's `labels:` entry, else
its name), its repeat, and a dagger when it did not end ok (in no figure of its config)."""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from orchestrator.stats.status import Status
from orchestrator.stats.values import DAGGER

if TYPE_CHECKING:
    from orchestrator.config.matrix import Matrix
    from orchestrator.db.runs import RunRow


def labelled(rows: Iterable[RunRow]) -> dict[int, str]:
    """Row labels: the config name (and repeat), with a dagger on runs that did not end ok."""
    out = {}
    for row in rows:
        label = row.config + (f" #{row.repeat_index + 1}" if row.repeat_index else "")
        out[row.id] = label if row.status == Status.OK else f"{label} {DAGGER}"
    return out


def row_labels(rows: Sequence[RunRow], matrix: Matrix | None) -> dict[int, str]:
    """`labelled`'s labels (repeat, dagger) with the config's `labels:` entry for its name."""
    base = labelled(rows)
    if matrix is None:
        return base
    return {r.id: matrix.label(r.config) + base[r.id][len(r.config):] for r in rows}
