"""A config's history across sessions: one point per (session, engine build) with its interval,
and the steps in it (changepoints.py). The numbers of `orch history` and the report's
regressions section (report/document/regressions.py).

A series is one (device, model, config as measured): a config edited under the same name, or
run on another model file, is a series of its own, labelled by what differs
(results/measured.py). A point is the mean of the metric over the session's ok runs of the
config on the device, with
a 95% interval over those runs; a session with a single run whose engine reported repetitions
(llama-bench's samples_ts, for the `mean` metric) takes its interval from the repetitions.
Points are ordered by time (the session's start), or by engine build (a version like 0.3.30
sorts numerically; other builds in the order they first ran), then time.

An engine build is named by the llama.cpp build cache's version when the binary came from it
(…/llama.cpp/<version>/bin/…), else by what the engine reported (run.engine_build).
"""
from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from orchestrator.db.rows import RunRow
from orchestrator.db.runs import Runs
from orchestrator.db.store import Store
from orchestrator.errors import ConfigError, NotFound
from orchestrator.results.annotations import Note, acknowledgements, changepoint_id, notes_of
from orchestrator.results.measured import config_labels
from orchestrator.stats import config_key
from orchestrator.stats.changepoints import Step, detect
from orchestrator.stats.config_figures import ConfigFigures, RunResult, combine
from orchestrator.stats.figures import RunFigures
from orchestrator.stats.status import Status
from orchestrator.stats.uncertainty import Interval, mean_interval

METRICS = ("mean", "median", "p5", "p95", "min", "max", "prefill_tps", "steady_mean")


def build_label(row: RunRow) -> str | None:
    """The engine build a run measured (stats/config_key.py build_label)."""
    return config_key.build_label(row.binary_path, row.engine_build)


def base_config(row: RunRow) -> str:
    """The config a run measured without its build (stats/config_key.py: ConfigKey.name)."""
    return row.config_key.name


def build_matches(row: RunRow, build: str) -> bool:
    """Whether `build` (a cache version, an engine_build string or a commit prefix) names the
    build this run measured."""
    return names_build(row.binary_path, row.engine_build, build)


def names_build(binary_path: str | None, engine_build: str | None, build: str) -> bool:
    """build_matches, of a run's binary path and engine build."""
    label = config_key.build_label(binary_path, engine_build)
    if build == label or build == (engine_build or ""):
        return True
    commit = (engine_build or "").split(" ")[0]
    return len(build) >= 7 and len(commit) >= 7 and (commit.startswith(build)
                                                     or build.startswith(commit))


def version_key(label: str | None) -> tuple[int, ...] | None:
    """(0, 3, 30) for "0.3.30"; None for a label that is not a dotted version."""
    if label and re.fullmatch(r"\d+(\.\d+)*", label):
        return tuple(int(p) for p in label.split("."))
    return None


@dataclass(frozen=True)
class Point:
    session: int
    session_name: str | None
    started_at: Any
    build: str | None
    interval: Interval               # mean, 95% interval, n
    basis: str                       # "runs" | "repetitions" | "run"
    run_ids: list[int]
    failed: int                      # runs of it in the session that did not end ok
    log_se: float | None = None      # standard error of the mean on the log scale
    notes: tuple[Note, ...] = ()     # `orch note` on its session or its runs

    def record(self) -> dict[str, Any]:
        iv = self.interval
        return {"session": self.session, "session_name": self.session_name,
                "started_at": self.started_at.isoformat() if self.started_at else None,
                "build": self.build, "value": iv.mean, "ci_low": iv.low, "ci_high": iv.high,
                "n": iv.n, "basis": self.basis, "runs": self.run_ids, "failed": self.failed,
                "notes": [n.record() for n in self.notes]}


@dataclass(frozen=True)
class ChangePoint:
    step: Step
    session: int                     # the first session after the step
    build_before: str | None         # the build of the last point before it
    build_after: str | None          # the build of the first point after it
    session_before: int | None = None    # the last session before the step
    id: str = ""                     # results/annotations.py changepoint_id
    ack: Note | None = None          # its acknowledgement (`orch ack`)

    @property
    def slowdown(self) -> bool:
        """A regression: every history metric is a rate, higher is better."""
        return self.step.after < self.step.before

    def record(self) -> dict[str, Any]:
        return {"id": self.id, "session": self.session, "session_before": self.session_before,
                "before": self.step.before, "after": self.step.after,
                "delta_pct": self.step.delta_pct, "p_value": self.step.p_value,
                "build_before": self.build_before, "build_after": self.build_after,
                "acknowledged": self.ack.record() if self.ack else None}


@dataclass
class Series:
    device: str
    model: str
    config: str
    metric: str
    points: list[Point] = field(default_factory=list)
    change_points: list[ChangePoint] = field(default_factory=list)


def _runs(store: Store, matrix: str, device: str | None, config: str | None) -> list[RunRow]:
    rows = Runs(store).current(matrix=matrix, device=device)
    return [r for r in rows if config in (None, r.config, base_config(r))]


def config_of(rows: Sequence[RunRow], figures: Mapping[int, RunFigures]) -> ConfigFigures:
    """The config figures of these runs (stats/config_figures.py)."""
    return combine([RunResult(r.id, r.status, figures[r.id]) for r in rows])


def history(store: Store, matrix: str, config: str | None = None, device: str | None = None,
            metric: str = "mean", order: str = "time") -> list[Series]:
    """Every (device, model, config) series of `matrix` in the store, with its change points.
    order: "time" or "build". Raises NotFound when nothing matches."""
    return histories(store, matrix, config, device, (metric,), order)[metric]


def histories(store: Store, matrix: str, config: str | None = None, device: str | None = None,
              metrics: Sequence[str] = ("mean",), order: str = "time"
              ) -> dict[str, list[Series]]:
    """`history` for each of `metrics` (metric -> its series, in the same order), from one
    read of the runs and one combination of each point's runs."""
    for metric in metrics:
        if metric not in METRICS:
            raise ConfigError(f"--metric {metric}: one of {', '.join(METRICS)}")
    rows = _runs(store, matrix, device, config)
    if not rows:
        what = " ".join(x for x in (f"matrix {matrix!r}", config and f"config {config!r}",
                                    device and f"on {device}") if x)
        raise NotFound(f"no runs of {what} in {store.url}")
    figures = Runs(store).figures(rows)
    groups: dict[tuple[str, str, str], dict[tuple[int, str | None], list[Any]]] = {}
    # one series per config *as measured*: an edited config under the same name is another
    # series (results/measured.py), never a step in this one
    labels = config_labels(rows, base_config)
    for r in rows:
        key = (r.device, r.model or "-", labels[r.id])
        groups.setdefault(key, {}).setdefault((r.session_id, build_label(r)), []).append(r)
    first_seen: dict[str | None, int] = {}
    for r in rows:
        first_seen.setdefault(build_label(r), r.session_id)
    notes = notes_of(store, (r.session_id for r in rows), (r.id for r in rows))
    acks = acknowledgements(store)
    out: dict[str, list[Series]] = {metric: [] for metric in metrics}
    for (dev, model, cfg), by_point in groups.items():
        each = {metric: Series(dev, model, cfg, metric) for metric in metrics}
        for (sid, build), point_rows in by_point.items():
            combined = config_of(point_rows, figures)
            first = point_rows[0]
            ok = [r.id for r in point_rows if r.status == Status.OK]
            failed = sum(1 for r in point_rows if r.status != Status.OK)
            point_notes = tuple(notes.of_point(sid, (r.id for r in point_rows)))
            for metric, series in each.items():
                samples, basis = combined.samples(metric)
                series.points.append(Point(
                    sid, first.session_name, first.session_started, build,
                    mean_interval(samples), basis, ok, failed, _log_se(samples),
                    point_notes))
        for metric, series in each.items():
            series.points.sort(key=lambda p: _order_key(p, order, first_seen))
            series.change_points = [_located(c, series, matrix, acks)
                                    for c in change_points(series.points)]
            out[metric].append(series)
    return out


def _located(c: ChangePoint, s: Series, matrix: str, acks: Mapping[str, Note]) -> ChangePoint:
    """The change point with its id, the session before it and its acknowledgement."""
    cid = changepoint_id(s.device, matrix, s.model, s.config, c.session)
    sessions = [p.session for p in s.points]
    at = sessions.index(c.session)
    return replace(c, id=cid, session_before=sessions[at - 1] if at else None,
                   ack=acks.get(cid))


def _log_se(samples: list[float]) -> float | None:
    logs = [math.log(v) for v in samples if v > 0]
    if len(logs) < 2:
        return None
    mean = sum(logs) / len(logs)
    var = sum((v - mean) ** 2 for v in logs) / (len(logs) - 1)
    return math.sqrt(var / len(logs))


def _order_key(p: Point, order: str, first_seen: dict[str | None, int]) -> tuple:
    t = (p.started_at.timestamp() if p.started_at else 0.0, p.session)
    if order != "build":
        return t
    v = version_key(p.build)
    return ((0, v, 0) if v is not None else (1, (), first_seen.get(p.build, 0))) + t


def change_points(points: Sequence[Point]) -> list[ChangePoint]:
    """The steps in the points that have a value (changepoints.detect)."""
    known: list[Point] = []
    means: list[float] = []
    for p in points:
        mean = p.interval.mean
        if mean is not None and mean > 0:
            known.append(p)
            means.append(mean)
    steps = detect(means, [p.log_se for p in known])
    return [ChangePoint(s, known[s.index].session, known[s.index - 1].build,
                        known[s.index].build) for s in steps]


def records(series: Sequence[Series]) -> dict[str, Any]:
    """`orch history --format json`: {"points": [...], "change_points": [...]}, each record
    naming its device, model, config and metric."""
    points, steps = [], []
    for s in series:
        key = {"device": s.device, "model": s.model, "config": s.config, "metric": s.metric}
        points += [{**key, **p.record()} for p in s.points]
        steps += [{**key, **c.record()} for c in s.change_points]
    return {"points": points, "change_points": steps}
