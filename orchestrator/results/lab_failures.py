"""Why lab cells failed, grouped by cause (docs/lab.md, "A failed cell keeps its cause").

One owner for what `orch lab status`, `orch lab wait` and the report say of failed cells:
each failed cell's cause is its own stored `error` (lab_cell.error: what stopped it, run or
not), else its run's cause, else its state; cells that failed alike are one group ("32 cells
failed: TypeError ..." once, not 32 times), the biggest first. Views only print the groups.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from orchestrator.db import lab as lab_db
from orchestrator.db.runs import Runs
from orchestrator.db.store import Store

NOT_FAILED = (*lab_db.PENDING, *lab_db.GOOD, lab_db.CANCELLED)


@dataclass(frozen=True)
class FailedCell:
    device: str
    session_id: int
    cell_key: str
    state: str
    run_id: int | None


@dataclass(frozen=True)
class FailureGroup:
    cause: str                        # one line
    cells: tuple[FailedCell, ...]     # in the devices' order

    @property
    def count(self) -> int:
        return len(self.cells)

    @property
    def devices(self) -> list[str]:
        return list(dict.fromkeys(c.device for c in self.cells))

    @property
    def without_run(self) -> int:
        """Cells that failed before a run of theirs was stored (no run row says why)."""
        return sum(1 for c in self.cells if c.run_id is None)


def _one_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[0] if lines else ""


def group_failures(cells: Iterable[Any], run_causes: dict[int, str | None]
                   ) -> list[FailureGroup]:
    """The failed cells among `cells` (lab_cell rows: device, session_id, cell_key, state,
    run_id, error), grouped by cause, biggest group first (then by first appearance)."""
    groups: dict[str, list[FailedCell]] = {}
    for cell in cells:
        if cell.state in NOT_FAILED:
            continue
        run_cause = run_causes.get(cell.run_id) if cell.run_id is not None else None
        cause = _one_line(cell.error or "") or _one_line(run_cause or "") or \
            f"ended {cell.state} (no cause was stored)"
        groups.setdefault(cause, []).append(FailedCell(
            cell.device, cell.session_id, cell.cell_key, cell.state, cell.run_id))
    ordered = sorted(groups.items(), key=lambda item: -len(item[1]))   # stable: first seen
    return [FailureGroup(cause, tuple(members)) for cause, members in ordered]


def without_runs(groups: list[FailureGroup]) -> list[FailureGroup]:
    """Only the cells that failed before a run of theirs was stored (a report lists failed
    runs already, each with its cause)."""
    out = [FailureGroup(g.cause, tuple(c for c in g.cells if c.run_id is None)) for g in groups]
    return sorted((g for g in out if g.cells), key=lambda g: -g.count)


def lab_failures(store: Store, session_ids: Iterable[int]) -> list[FailureGroup]:
    """The failed lab cells of these sessions, grouped by cause ([] for sessions the lab did
    not run)."""
    cells = lab_db.cells_of_sessions(store, list(session_ids))
    asked = [c.run_id for c in cells
             if c.state not in NOT_FAILED and not c.error and c.run_id is not None]
    causes = {r.id: r.cause for r in Runs(store).by_ids(asked)} if asked else {}
    return group_failures(cells, causes)


def newest_batch_failures(store: Store) -> list[FailureGroup]:
    """The failed cells of the newest submission (what `orch lab status` shows)."""
    batch = lab_db.newest_batch(store)
    return [] if batch is None else lab_failures(store, lab_db.batch_sessions(store, batch))
