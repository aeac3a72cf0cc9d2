"""The regressions the loop reports (docs/regressions.md): the feed's entries and the lab
webhook's events, each a slowdown with its stable id (results/annotations.py).

Two kinds, from the two places orch finds a regression:
- `change_point`: a step down in a config's history (results/history.py, PELT confirmed by
  Welch's test), for every (device, matrix, model, config) of the store;
- `step`: a session that ended slower than the last earlier session of its matrix on its
  device, significantly after Holm's correction (the report's regressions section,
  results/regressions.py).
A step and a change point that start at the same session of the same config are one
regression: they have one id, and one acknowledgement covers both.
"""
from __future__ import annotations

import datetime as dt
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.db import annotations as db
from orchestrator.db.runs import Runs
from orchestrator.db.store import Store
from orchestrator.errors import NotFound
from orchestrator.results.annotations import Note, acknowledgements, changepoint_id
from orchestrator.results.history import Series, history
from orchestrator.results.regressions import regressions

__all__ = ["RegressionEntry", "Store", "regression_entries", "session_steps"]


@dataclass(frozen=True)
class RegressionEntry:
    id: str                          # results/annotations.py changepoint_id
    kind: str                        # change_point | step
    device: str
    matrix: str
    model: str
    config: str
    metric: str
    session: int                     # the first session after the step
    session_before: int | None       # the session it is measured against
    when: dt.datetime | None         # the first session's start
    before: float | None
    after: float | None
    delta_pct: float | None
    p_value: float | None            # the step's (Welch's; Holm-corrected for a `step`)
    build_before: str | None
    build_after: str | None
    ack: Note | None                 # its acknowledgement: no longer a new regression

    @property
    def compare_command(self) -> str:
        """The `orch compare` that shows it config by config."""
        if self.session_before is None:
            return f"orch history -m {_quoted(self.matrix)} -d {_quoted(self.device)}"
        return f"orch compare -s {self.session_before} -s {self.session}"

    def record(self) -> dict[str, Any]:
        return {"id": self.id, "kind": self.kind, "device": self.device,
                "matrix": self.matrix, "model": self.model, "config": self.config,
                "metric": self.metric, "session": self.session,
                "session_before": self.session_before,
                "when": self.when.isoformat() if self.when else None,
                "before": self.before, "after": self.after, "delta_pct": self.delta_pct,
                "p_value": self.p_value, "build_before": self.build_before,
                "build_after": self.build_after, "compare": self.compare_command,
                "acknowledged": self.ack.record() if self.ack else None}


def _quoted(text: str) -> str:
    return shlex.quote(text)


def regression_entries(store: Store, matrix: str | None = None,
                       device: str | None = None,
                       series: Mapping[str, Sequence[Series]] | None = None,
                       ) -> list[RegressionEntry]:
    """Every change point down in the store's histories (of one matrix, one device when
    given), newest first. `series`: each matrix's histories when already computed
    (results/site_data.py), read from the store otherwise."""
    out = []
    if series is None:
        series = {}
        for name in [matrix] if matrix else db.matrix_names(store):
            try:
                series[name] = history(store, name, device=device)
            except NotFound:
                continue
    for name, found in series.items():
        for s in found:
            when = {p.session: p.started_at for p in s.points}
            out += [RegressionEntry(
                c.id, "change_point", s.device, name, s.model, s.config, s.metric, c.session,
                c.session_before, when.get(c.session), c.step.before, c.step.after,
                c.step.delta_pct, c.step.p_value, c.build_before, c.build_after, c.ack)
                for c in s.change_points if c.slowdown]
    return sorted(out, key=lambda e: (e.when or dt.datetime.min.replace(tzinfo=dt.UTC),
                                      e.session), reverse=True)


def session_steps(store: Store, session_id: int) -> list[RegressionEntry]:
    """The configs of a session that ran significantly slower than in the last earlier
    session of its matrix on the same device (Holm-corrected, results/regressions.py)."""
    acks = acknowledgements(store)
    out = []
    for reg in regressions(store, Runs(store).current(session_id)):
        if not reg.against:
            continue
        side, builds, comp = reg.against[0]           # since the last earlier session
        for row in comp.rows:
            c = row.vs_reference[0] if row.vs_reference else None
            if c is None or not c.significant or c.ratio is None or c.ratio >= 1.0:
                continue
            then, now = row.means[0], row.means[1]
            cid = changepoint_id(reg.device, reg.matrix, row.model, row.config, session_id)
            out.append(RegressionEntry(
                cid, "step", reg.device, reg.matrix, row.model, row.config, "mean",
                session_id, side.session.id if side.session else None,
                reg.session.started_at if reg.session else None,
                then.mean if then else None, now.mean if now else None, c.delta_pct,
                c.p_adjusted if c.p_adjusted is not None else c.p_value, builds, reg.builds,
                acks.get(cid)))
    return out
