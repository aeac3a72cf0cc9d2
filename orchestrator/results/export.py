"""What `orch export` writes, read once (report/table/export.py writes it): a stored session's runs
(superseded ones included), each current run's stored figures (stats/figures.py RunFigures,
as the views print them), and its token and sample rows."""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from orchestrator.db.rows import RunRow, SessionRow
from orchestrator.db.runs import Runs, Sessions
from orchestrator.db.store import Store
from orchestrator.stats.figures import frame


@dataclass(frozen=True)
class SessionExport:
    session: SessionRow | None
    rows: list[RunRow]           # every run, superseded ones included
    figures: pd.DataFrame        # the current runs' figures, by run id (one column a figure)
    tokens: pd.DataFrame
    samples: pd.DataFrame


def session_export(store: Store, session_id: int) -> SessionExport:
    rows = Runs(store).current(session_id, include_superseded=True)
    current = [r for r in rows if not r.superseded]
    ids = [r.id for r in rows]
    return SessionExport(Sessions(store).one(session_id), rows,
                         frame(Runs(store).figures(current)),
                         store.frame("token", ids), store.frame("sample", ids))
