"""What the terminal views show (`orch run`'s session table, `orch runs`, `orch show`), read
once for report/terminal/runs.py to render: the runs, their stored figures (Runs.figures), and
what else each view prints (a session's comparability caveats, a failed run's stderr tail).
"""
from __future__ import annotations

from dataclasses import dataclass, field

# re-exported: the rows and the date-only clock the views are given (report/ imports no db/)
from orchestrator.db.rows import DATE_ONLY as DATE_ONLY
from orchestrator.db.rows import RunRow as RunRow
from orchestrator.db.rows import SessionRow as SessionRow
from orchestrator.db.runs import Runs
from orchestrator.db.store import Store
from orchestrator.errors import NotFound
from orchestrator.stats.figures import RunFigures
from orchestrator.stats.status import Status

STDERR_TAIL = 10   # lines of the engine's stderr `orch show` prints for a run that failed


@dataclass(frozen=True)
class Listing:
    """Runs with their figures (by run id); `where`: the store's URL, for "no runs in ..."."""

    rows: list[RunRow]
    figures: dict[int, RunFigures]
    where: str = ""
    session_id: int | None = None
    caveats: list = field(default_factory=list)     # results/drift.py Caveat (a session's)


@dataclass(frozen=True)
class RunDetail:
    """One run as `orch show` prints it."""

    row: RunRow
    figures: RunFigures
    stderr_tail: list[str]       # the engine's last stderr lines, for a run that did not end ok


def session_listing(store: Store, session_id: int) -> Listing:
    """A session's runs in run order, their figures and its comparability caveats."""
    from orchestrator.results.drift import session_warnings

    rows = Runs(store).current(session_id)
    return Listing(rows, Runs(store).figures(rows), str(store.url), session_id,
                   session_warnings(store, session_id))


def runs_listing(store: Store, session_id: int | None, limit: int) -> Listing:
    """The newest runs (of a session), newest first, with their stored figures."""
    rows = Runs(store).current(session_id, limit=limit)
    return Listing(rows, Runs(store).figures(rows) if rows else {}, str(store.url), session_id)


def run_detail(store: Store, run_id: int) -> RunDetail:
    """One run, its figures (those kept with it) and, when it did not end ok, the tail of its
    engine's stderr (the record's, else the stored output)."""
    row = Runs(store).get(run_id)
    if row is None:
        raise NotFound(f"no run {run_id} in {store.url}")
    tail: list[str] = []
    if row.status != Status.OK:
        tail = list((row.summary or {}).get("stderr_tail") or []) \
            or Runs(store).output_lines(row.id, "E", last=STDERR_TAIL)
    return RunDetail(row, Runs(store).figures([row])[row.id], tail[-STDERR_TAIL:])
