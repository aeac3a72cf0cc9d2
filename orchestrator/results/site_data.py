"""What `orch site` shows, read and computed once (the site's pages render, they do not
compute): the devices with their facts and when they last ran, the sessions with their status
counts, every config's history per matrix (results/history.py, with its change points), the
significant steps of each matrix's newest session on each device against the one before
(results/regressions.py), and the device comparisons (results/comparison.py, as
`orch compare -d A -d B -m MATRIX` makes them).

Each page's inputs have a digest (`digest`): `orch site` rewrites a page only when the digest
of what it shows changed (orchestrator/site/build.py).
"""
from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from orchestrator.db.rows import RunRow, SessionRow
from orchestrator.db.runs import Runs, Sessions, all_devices
from orchestrator.db.store import Store
from orchestrator.errors import NotFound
from orchestrator.results.comparison import SideComparison, build
from orchestrator.results.history import METRICS, ChangePoint, Series, histories
from orchestrator.results.query import Side
from orchestrator.results.regressions import regressions
from orchestrator.results.report_data import ReportData
from orchestrator.results.report_data import build as report_data

SeriesKey = tuple[str, str, str, str]          # (device, matrix, model, config as measured)


def digest(*parts: Any) -> str:
    """A short digest of JSON-able parts (datetimes and the like by their str)."""
    text = json.dumps(parts, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def runs_digest(rows: Sequence[RunRow]) -> str:
    """What of a session's runs its pages show: which runs count, their status and figures."""
    return digest([(r.id, r.status, r.superseded, r.ended_at, r.config, r.model, r.figures)
                   for r in rows])


@dataclass(frozen=True)
class DeviceSummary:
    name: str
    kind: str
    facts: dict[str, Any]
    last_seen: dt.datetime | None        # the newest start of a run on it


@dataclass(frozen=True)
class SessionSummary:
    session: SessionRow
    devices: list[str]
    counts: dict[str, int]               # status -> runs (current runs only)
    inputs: str                          # digest of its runs (runs_digest)


@dataclass(frozen=True)
class Flagged:
    """A regression the index lists: a change point of a config's history, or a significant
    step of a session against the one before it (Holm-corrected, as `orch compare`)."""

    kind: str                            # "change point" | "step"
    key: SeriesKey
    session: int                         # the first session after the change
    before: float | None
    after: float | None
    delta_pct: float | None
    p_value: float | None
    builds: str                          # "A → B"
    id: str = ""                         # a change point's id (`orch ack ID`)
    acknowledged: str | None = None      # its acknowledgement's text (`orch ack`)


@dataclass
class SiteData:
    devices: list[DeviceSummary]
    sessions: list[SessionSummary]                       # newest first
    matrices: dict[str, list[str]]                       # matrix -> devices that ran it
    series: dict[SeriesKey, Series]
    flagged: list[Flagged]                               # newest session first
    runs: dict[int, list[RunRow]] = field(default_factory=dict)   # session -> its runs
    # (matrix, device) -> the sessions that ran the matrix on the device, oldest first
    ran: dict[tuple[str, str], list[int]] = field(default_factory=dict)
    # each series in every metric `orch history --metric` offers (the history page's choice)
    metrics: dict[SeriesKey, dict[str, Series]] = field(default_factory=dict)

    @cached_property
    def _inputs(self) -> dict[int, str]:
        return {s.session.id: s.inputs for s in self.sessions}

    def session_inputs(self, sid: int) -> str:
        return self._inputs[sid]


def site_data(store: Store) -> SiteData:
    """Everything the index, history and comparison pages show, from one read of the runs."""
    rows = Runs(store).current()
    by_session: dict[int, list[RunRow]] = {}
    for r in reversed(rows):                       # oldest first: each session in run order
        by_session.setdefault(r.session_id, []).append(r)
    for session_rows in by_session.values():       # as Runs.current(session) orders them
        session_rows.sort(key=lambda r: (r.order_index, r.id))
    sessions = [_session_summary(s, by_session.get(s.id, [])) for s in Sessions(store).all()]
    matrices: dict[str, list[str]] = {}
    ran: dict[tuple[str, str], list[int]] = {}
    for r in reversed(rows):
        if r.matrix_name:
            devs = matrices.setdefault(r.matrix_name, [])
            if r.device not in devs:
                devs.append(r.device)
            sids = ran.setdefault((r.matrix_name, r.device), [])
            if r.session_id not in sids[-1:]:
                sids.append(r.session_id)
    for sids in ran.values():
        sids.sort()
    series: dict[SeriesKey, Series] = {}
    by_metric: dict[SeriesKey, dict[str, Series]] = {}
    for matrix in matrices:
        try:
            found = histories(store, matrix, metrics=METRICS)
        except NotFound:
            continue
        for metric, each in found.items():
            for s in each:
                key = (s.device, matrix, s.model, s.config)
                by_metric.setdefault(key, {})[metric] = s
                if metric == "mean":
                    series[key] = s
    flagged = [f for key, s in series.items() for f in _change_points(key, s)]
    flagged += _steps(store, by_session, ran)
    flagged.sort(key=lambda f: (-f.session, f.key))
    return SiteData(_devices(store, rows), sessions, matrices, series, flagged, by_session, ran,
                    by_metric)


def _session_summary(session: SessionRow, rows: list[RunRow]) -> SessionSummary:
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.status] = counts.get(r.status, 0) + 1
    return SessionSummary(session, list(dict.fromkeys(r.device for r in rows)), counts,
                          digest(session.values, runs_digest(rows)))


def _devices(store: Store, rows: Sequence[RunRow]) -> list[DeviceSummary]:
    last: dict[str, dt.datetime] = {}
    for r in rows:
        when = r.started_at or r.session_started
        if when is not None and (r.device not in last or _utc(when) > _utc(last[r.device])):
            last[r.device] = when
    return [DeviceSummary(d.name, d.kind, dict(d.facts or {}), last.get(d.name))
            for d in all_devices(store)]


def _utc(when: dt.datetime) -> dt.datetime:
    return when if when.tzinfo else when.replace(tzinfo=dt.UTC)


def _change_points(key: SeriesKey, s: Series) -> list[Flagged]:
    return [Flagged("change point", key, c.session, c.step.before, c.step.after,
                    c.step.delta_pct, c.step.p_value, _builds(c), c.id,
                    c.ack.text if c.ack else None)
            for c in s.change_points if c.slowdown]


def _builds(c: ChangePoint) -> str:
    return f"{c.build_before or '-'} → {c.build_after or '-'}"


def _steps(store: Store, by_session: dict[int, list[RunRow]],
           ran: dict[tuple[str, str], list[int]]) -> list[Flagged]:
    """The significant slowdowns of each matrix's newest session on each device against the
    session before it (results/regressions.py's first comparison)."""
    out = []
    for (matrix, device), sids in sorted(ran.items()):
        if len(sids) < 2:
            continue
        sid = sids[-1]
        current = [r for r in by_session[sid] if r.device == device]
        for reg in regressions(store, current, by_session, ran):
            side, builds, comp = reg.against[0]
            for row in comp.rows:
                cmp = row.vs_reference[0] if row.vs_reference else None
                if cmp is None or not cmp.significant or cmp.ratio is None or cmp.ratio >= 1:
                    continue
                before, after = row.means[0], row.means[1]
                out.append(Flagged(
                    "step", (device, matrix, row.model, row.config), sid,
                    before.mean if before else None, after.mean if after else None,
                    cmp.delta_pct, cmp.p_adjusted, f"{builds} → {reg.builds}"))
    return out


def device_comparison(store: Store, data: SiteData, matrix: str) -> SideComparison:
    """The newest session of `matrix` on each device that ran it, compared (the first device
    the reference), as `orch compare -d A -d B ... -m MATRIX`."""
    sides = []
    for device in data.matrices[matrix]:
        sid = data.ran[(matrix, device)][-1]
        rows = [r for r in data.runs[sid] if r.device == device]
        sides.append(Side(device, device, Sessions(store).one(sid), rows))
    return build(store, sides)


def comparison_inputs(data: SiteData, matrix: str) -> str:
    """The digest of what `device_comparison` reads: each device's newest session's runs."""
    parts = []
    for device in data.matrices[matrix]:
        sid = data.ran[(matrix, device)][-1]
        parts.append((device, sid, runs_digest([r for r in data.runs[sid]
                                                if r.device == device])))
    return digest(matrix, parts)


def session_report(store: Store, data: SiteData, sid: int, plots: bool) -> ReportData:
    """The data of `orch report SID` (results/report_data.py), for the session page."""
    return report_data(store, data.runs.get(sid, []), keep_frames=plots, runs_of=data.runs,
                       ran=data.ran)


def report_inputs(data: SiteData, sid: int) -> str:
    """The digest of a session page's inputs: its runs, and the earlier sessions of its
    matrix on its devices that its regressions section compares it with (the last and the
    first)."""
    rows = data.runs.get(sid, [])
    earlier = []
    for device in dict.fromkeys(r.device for r in rows):
        matrix = next(r.matrix_name for r in rows if r.device == device)
        ids = [s for s in data.ran.get((matrix or "", device), []) if s < sid]
        earlier += [(s, runs_digest(data.runs[s])) for s in dict.fromkeys(ids[-1:] + ids[:1])]
    return digest(data.session_inputs(sid), earlier)
