"""The numbers of the report's regressions section: for each session and device of the report
whose matrix ran on that device before, the comparison (results/comparison.py, as `orch
compare` makes it) of the session against the last earlier session, and against the first.

Each earlier session is the reference of its comparison, so a ratio is now / then; configs
pair as `orch compare` pairs them (model and config as measured), each config's figure is its
ConfigFigures' mean over its ok runs, and the tests are Holm-corrected within each
comparison. A config the earlier session did not have, or that has one run on either side, is
shown without a verdict.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from orchestrator.db.rows import RunRow, SessionRow
from orchestrator.db.runs import Runs, Sessions
from orchestrator.db.store import Store
from orchestrator.results.annotations import Note, acknowledgements, changepoint_id
from orchestrator.results.comparison import SideComparison, build
from orchestrator.results.history import build_label
from orchestrator.results.query import Side


@dataclass(frozen=True)
class Regression:
    """One (session, device) of the report against its earlier sessions of the matrix."""

    session: SessionRow | None
    session_id: int
    device: str
    matrix: str
    builds: str                          # the session's engine builds, as one label
    current: Side                        # the session's runs on the device
    against: list[tuple[Side, str, SideComparison]]   # (earlier side, its builds, the
                                                      #  comparison with it as reference)
    acks: dict[str, Note] = field(default_factory=dict)   # change point id -> `orch ack`

    def step_id(self, model: str, config: str) -> str:
        """The id of a step of (model, config) starting at this session: `orch ack` takes it
        (results/annotations.py)."""
        return changepoint_id(self.device, self.matrix, model, config, self.session_id)


def builds_of(rows: Sequence[RunRow]) -> str:
    """The engine builds of these runs as one label ("build unknown" without any)."""
    names = list(dict.fromkeys(b for b in (build_label(r) for r in rows) if b))
    return ", ".join(names) if names else "build unknown"


def regressions(store: Store, rows: Sequence[RunRow],
                runs_of: Mapping[int, Sequence[RunRow]] | None = None,
                ran: Mapping[tuple[str, str], Sequence[int]] | None = None) -> list[Regression]:
    """One Regression per (session, device) of the report's runs that has earlier sessions of
    its matrix on its device (nothing when none has: the report reads as before). `runs_of`
    (session -> its current runs) and `ran` ((matrix, device) -> the sessions that ran it,
    oldest first): the store's, when a caller that reports many sessions read them once
    (results/site_data.py); read from the store otherwise."""
    out = []
    acks = acknowledgements(store)
    groups: dict[tuple[int, str], list[RunRow]] = {}
    for r in rows:
        groups.setdefault((r.session_id, r.device), []).append(r)
    for (sid, device), current in groups.items():
        matrix = current[0].matrix_name
        if not matrix:
            continue
        if ran is not None:
            earlier = [s for s in ran.get((matrix, device), ()) if s < sid]
        else:
            earlier = sorted(Runs(store).session_ids(matrix=matrix, device=device, before=sid))
        if not earlier:
            continue
        session = Sessions(store).one(sid)
        now = Side(f"session {sid}", device, session, list(current))
        against = []
        for base in dict.fromkeys([earlier[-1], earlier[0]]):     # the last, then the first
            base_rows = runs_of[base] if runs_of is not None else Runs(store).current(base)
            side_rows = [r for r in base_rows if r.device == device]
            side = Side(f"session {base}", device, Sessions(store).one(base), side_rows)
            against.append((side, builds_of(side_rows), build(store, [side, now])))
        out.append(Regression(session, sid, device, matrix, builds_of(current), now, against,
                              acks))
    return out
