"""The data of a report, read and computed once for report/ to render (a view reads no
store): which runs, their figures, each config's runs combined (stats/config_figures.py
`combine`: the one place repeats and failures are combined), and what each (model, device)
group's sections show beside them (model facts, ceilings, quality probes), the route traces
and the regressions against earlier sessions. Nothing here is text: labels, titles and
verdicts are the views' words.

Everything is read with a fixed number of queries (runs per session, one token read, one sample
read, devices, sessions), never one per run: a report over 1,000 runs must cost about what
reading their token rows costs (bench/report).
"""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from orchestrator.config.design import Design, session_design
from orchestrator.config.matrix import Matrix
from orchestrator.config.stored_matrix import stored_matrix, stored_matrix_data
from orchestrator.db.quality import newest_probed_session
from orchestrator.db.rows import RunRow, SessionRow
from orchestrator.db.runs import Runs, Sessions, devices_by_name
from orchestrator.db.store import Store
from orchestrator.errors import ConfigError, NotFound
from orchestrator.results import drift
from orchestrator.results.ab import ABGroup, Baselines, ab_groups, store_repeats
from orchestrator.results.ceilings import Judgement, judge, nearest
from orchestrator.results.drift import Caveat
from orchestrator.results.exclude import Excluded, split
from orchestrator.results.lab_failures import FailureGroup, lab_failures, without_runs
from orchestrator.results.model_facts import ModelFacts, facts_for_group
from orchestrator.results.quality import ModelQuality, summarise
from orchestrator.results.query import by_model_and_device
from orchestrator.results.annotations import Notes, notes_of
from orchestrator.results.regressions import Regression, regressions
from orchestrator.results.routes import run_figures
from orchestrator.results.rows import LeftOut, config_label, in_order, left_out, listed_configs
from orchestrator.results.trim import resolve_trim
from orchestrator.stats.config_figures import ConfigFigures, RunResult, Spread, combine
from orchestrator.stats.figures import RunFigures
from orchestrator.stats.status import Status


@dataclass
class RunView:
    row: RunRow
    config_label: str             # its config as the reader sees it (results/rows.py)
    figures: RunFigures           # the run's figures (Runs.figures)

    @property
    def id(self) -> int:
        return self.row.id

    @property
    def ok(self) -> bool:
        return self.row.status == Status.OK

    @property
    def result(self) -> RunResult:
        return RunResult(self.row.id, self.row.status, self.figures)


@dataclass
class ConfigAgg:
    """One config of one (model, device) group: its runs combined (ConfigFigures)."""

    config: str
    figures: ConfigFigures        # every run of the config, combined over its ok ones
    runs: list[RunView]           # ok runs only: failed ones are in no figure of the config
    bad: list[RunView] = field(default_factory=list)
    label: str = ""               # the config's label (matrix, else design), else its name

    @property
    def values(self) -> Any:
        """The config's combined figures, by RunFigures name."""
        return self.figures.values

    @property
    def spread(self) -> Spread:
        return self.figures.spread

    @property
    def ids(self) -> list[int]:
        return [r.id for r in self.runs]


@dataclass
class Group:
    model: str
    device: str
    engine: str | None            # the engine of its first run (names a group without model)
    slug: str
    runs: list[RunView]
    configs: list[ConfigAgg]
    ab: ABGroup | None = None      # its A/B rows against its model's baseline (results/ab.py)
    facts: ModelFacts | None = None   # the model's facts (results/model_facts.py)
    pivot_matrix: Matrix | None = None  # the matrix whose two-flag grid the pivot lays out
    ceilings: Any = None          # the device's ceilings nearest its first run (results/ceilings)
    judgements: dict[str, Judgement] = field(default_factory=dict)  # config -> against them
    quality: ModelQuality | None = None  # its newest session's quality probes (results/quality)
    left_out: list[LeftOut] = field(default_factory=list)  # configs not run on purpose

    @property
    def failed(self) -> list[RunView]:
        return [r for r in self.runs if not r.ok]

    def config(self, name: str) -> ConfigAgg | None:
        return next((c for c in self.configs if c.config == name), None)


@dataclass
class ReportData:
    sessions: list[SessionRow]
    devices: dict[str, DeviceView]
    runs: list[RunView]
    groups: list[Group]
    matrices: dict[int, dict[str, Any]]   # session id -> parsed matrix YAML ({} for imports)
    imported_files: dict[int, Any]  # session id -> {stem: imported_file row}
    tokens: pd.DataFrame | None = None     # kept for the plots (None when not read)
    samples: pd.DataFrame | None = None
    # session id -> the design file its import applied (config/design.py), None without one
    designs: dict[int, Design | None] = field(default_factory=dict)
    trim: int = 0                          # first tokens left out of the per-token figures
    caveats: list[Caveat] = field(default_factory=list)     # results/drift.py, every group's
    regressions: list[Regression] = field(default_factory=list)  # results/regressions.py
    # traced runs' route figures: run id -> (results/routes.py run_figures) or why not
    routes: dict[int, Any] = field(default_factory=dict)
    quantile: str = "linear"               # the p5/p95 quantile method of the figures
    # every config of the runs in the author's order (results/rows.py): the groups' rows and
    # the legend follow it
    config_order: list[str] = field(default_factory=list)
    excluded: list[Excluded] = field(default_factory=list)   # left out on purpose, with why
    notes: Notes = field(default_factory=Notes)   # `orch note` on its sessions and runs
    # lab cells of its sessions that failed before a run of theirs started, by cause (a
    # failed run is in `runs`, with its own cause)
    lab_failed: list[FailureGroup] = field(default_factory=list)

    @property
    def failed(self) -> list[RunView]:
        return [r for r in self.runs if not r.ok]

    @property
    def title(self) -> str:
        """The sessions' matrices (or names) the report is about, in order (templates read
        `data.title`)."""
        return ", ".join(dict.fromkeys(s.matrix_name or s.name or f"session {s.id}"
                                       for s in self.sessions))

    @property
    def baselines(self) -> dict[str, str]:
        """model -> the labels of its baseline configs (the A/B rows' baselines), joined."""
        return {g.model: " and ".join(dict.fromkeys(r.label for r in g.ab.rows
                                                     if r.is_baseline))
                for g in self.groups if g.ab is not None and g.ab.rows}


# ---- which runs --------------------------------------------------------------------------

def select_runs(store: Store, session: str | None, matrix: str | None,
                devices: Sequence[str] = ()) -> list[Any]:
    """Runs of SESSION (on --device D only, when given); else of the latest session of the
    matrix per device (every device that ran it, or the --device ones); else the newest
    session. `--device` alone means the matrix of the newest session on those devices."""
    if session is not None or (matrix is None and not devices):
        sid = Sessions(store).resolve(session, matrix)
        rows: list[RunRow] = Runs(store).current(sid)
        if not rows:
            _no_runs(store, sid)
        if devices:
            missing = [d for d in devices if d not in {r.device for r in rows}]
            if missing:
                raise ConfigError(f"session {sid} has no runs on {', '.join(missing)}")
            rows = [r for r in rows if r.device in devices]
        return rows
    sessions = Sessions(store)
    if matrix is None:
        matrix = sessions.newest_matrix(devices)
        if matrix is None:
            raise NotFound(f"no runs on {', '.join(devices)} in {store.url}")
    latest = sessions.latest_per_device(matrix, devices or None)
    missing = [d for d in devices if d not in latest]
    if missing or not latest:
        raise NotFound(f"no session of matrix {matrix!r} on "
                       f"{', '.join(missing) or 'any device'} in {store.url}")
    order = list(devices) or sorted(latest)
    rows = []
    by_session: dict[int, list[Any]] = {}
    for name in order:
        sid = latest[name]
        if sid not in by_session:
            by_session[sid] = Runs(store).current(sid)
        rows += [r for r in by_session[sid] if r.device == name]
    return rows


def _no_runs(store: Store, sid: int) -> None:
    """A session without runs: a lab session whose every cell failed before its run started
    says why (results/lab_failures.py), once per cause; any other is `build`'s to refuse."""
    groups = lab_failures(store, [sid])
    if groups:
        causes = "; ".join(f"{g.count} cell{'s' if g.count != 1 else ''} failed: {g.cause}"
                           for g in groups)
        raise ConfigError(f"session {sid} has no runs to report; in the lab, {causes}")


def _slug(*parts: str) -> str:
    text = "-".join(parts).lower()
    return re.sub(r"[^a-z0-9]+", "-", text).strip("-")[:60] or "group"


def _label(row: RunRow, matrices: dict[int, Matrix | None],
           designs: dict[int, Design | None]) -> str:
    """A run's config as the reader sees it (results/rows.py config_label)."""
    return config_label(row.config, matrices.get(row.session_id), designs.get(row.session_id))


def _groups(runs: list[RunView], ab: list[ABGroup], order: list[str],
            designs: dict[int, Design | None]) -> list[Group]:
    """The (model, device) groups, each's configs in the author's `order`, with the configs
    its sessions' designs left out on purpose."""
    by_key = {(g.model, g.device): g for g in ab}
    groups = []
    for i, ((model, device), members) in enumerate(by_model_and_device(runs, lambda r: r.row), 1):
        configs: dict[str, list[RunView]] = {}
        for r in members:
            configs.setdefault(r.row.config, []).append(r)
        aggs = [ConfigAgg(name, combine([r.result for r in rs]), [r for r in rs if r.ok],
                          [r for r in rs if not r.ok], rs[0].config_label)
                for name in in_order(configs, order) for rs in [configs[name]]]
        sessions = dict.fromkeys(r.row.session_id for r in members)
        groups.append(Group(model, device, members[0].row.engine,
                            f"{i}-{_slug(model, device)}", members, aggs,
                            by_key.get((model, device)),
                            left_out=left_out((designs.get(s) for s in sessions), model)))
    return groups


@dataclass(frozen=True)
class DeviceView:
    """A device as the report's sessions saw it: its facts are the snapshot its (newest)
    session took when it ran, else the device row's newest probe."""

    name: str
    kind: str
    facts: dict[str, Any]
    facts_at: Any                  # when those facts were collected (None: never)
    snapshot: bool                 # True when the facts are the session's own snapshot


def device_views(store: Store, rows: Sequence[RunRow], sessions: Sequence[SessionRow]
                 ) -> dict[str, DeviceView]:
    """Each device of the runs, in their order, with the facts of when it ran."""
    names = list(dict.fromkeys(r.device for r in rows))
    stored = devices_by_name(store, names)
    by_id = {s.id: s for s in sessions}
    out = {}
    for name in names:
        own = [by_id[sid] for sid in dict.fromkeys(r.session_id for r in rows if r.device == name)
               if sid in by_id and by_id[sid].device_facts]
        dev = stored.get(name)
        if own:
            newest = max(own, key=lambda s: s.id)
            out[name] = DeviceView(name, dev.kind if dev else "", dict(newest.device_facts),
                                   newest.started_at, True)
        else:
            out[name] = DeviceView(name, dev.kind if dev else "", dict(dev.facts or {}) if dev
                                   else {}, dev.facts_at if dev else None, False)
    return out


def _single_ok_runs(rows: Sequence[RunRow]) -> set[int]:
    """The runs that are the only ok run of their (model, device, config): those whose
    within-run interval an A/B row shows (results/ab.py groups by model and device, then
    config)."""
    ok: dict[tuple[str, str, str], list[int]] = {}
    for r in rows:
        if r.status == Status.OK:
            ok.setdefault((r.model or "-", r.device, r.config), []).append(r.id)
    return {ids[0] for ids in ok.values() if len(ids) == 1}


def build(store: Store, rows: Sequence[RunRow], baseline: str | Baselines | None = None,
          quantile: str = "linear", keep_frames: bool = True,
          trim: int | None = None, routes: bool = True,
          exclude: Sequence[str] = (),
          runs_of: Mapping[int, Sequence[RunRow]] | None = None,
          ran: Mapping[tuple[str, str], Sequence[int]] | None = None) -> ReportData:
    """Everything a report shows, from the selected runs. `trim`: `--trim N` (None: the
    sessions' own `trim:`, results/trim.py); `exclude`: `--exclude` values, which with the
    designs' `exclude:` leave runs out of every figure (results/exclude.py); `runs_of`,
    `ran`: the store's runs per session and sessions per (matrix, device), when read once
    for many reports (results/regressions.py)."""
    if not rows:
        raise ConfigError("no runs to report")
    chosen = Sessions(store).by_ids(list(dict.fromkeys(r.session_id for r in rows)))
    rows, excluded = split(rows, {s.id: session_design(s) for s in chosen}, exclude)
    if not rows:
        raise ConfigError("every run is left out (exclude): no runs to report")
    # devices in the order asked for (select_runs keeps --device order), then as the runs ran
    rank = {d: i for i, d in enumerate(dict.fromkeys(r.device for r in rows))}
    rows = sorted(rows, key=lambda r: (rank[r.device], r.session_id, r.order_index, r.id))
    trim = resolve_trim(trim, Sessions(store).by_ids(dict.fromkeys(r.session_id for r in rows)))
    # the runs' figures, as stored (or, with a trim or another quantile method, computed)
    figures = Runs(store).figures(rows, trim=trim, quantile_method=quantile)
    ids = [r.id for r in rows]
    # the plots' token rows and samples, read once
    tokens = store.frame("token", ids) if keep_frames else None
    samples = store.frame("sample", ids) if keep_frames else None
    sids = list(dict.fromkeys(r.session_id for r in rows))
    sessions = Sessions(store).by_ids(sids)
    parsed = {s.id: stored_matrix(s.matrix_text) for s in sessions}
    designs = {s.id: session_design(s) for s in sessions}
    runs = [RunView(r, _label(r, parsed, designs), figures[r.id]) for r in rows]
    devices = device_views(store, rows, sessions)
    files: dict[int, Any] = {}
    for f in Sessions(store).imported_files(sids):
        files.setdefault(f.session_id, {})[f.path] = f
    matrices = {s.id: stored_matrix_data(s.matrix_text) for s in sessions}
    # each (model, device) group against its own model's baseline; Holm across all of them
    ab = ab_groups(rows, figures, parsed, baseline, designs=designs,
                   earlier=store_repeats(store))     # noise floor of single runs
    order = in_order((r.config for r in rows),
                     listed_configs((designs.get(s) for s in sids), (parsed.get(s) for s in sids)))
    groups = _groups(runs, ab, order, designs)
    for g in groups:
        _beside(store, g, sessions)
    caveats = drift.caveats(rows, {r.id: r.figures.mean for r in runs}, matrices)
    return ReportData(sessions=sessions, devices=devices, runs=runs, groups=groups,
                      matrices=matrices, imported_files=files, designs=designs,
                      trim=trim, quantile=quantile, tokens=tokens, samples=samples,
                      caveats=caveats, config_order=order, excluded=excluded,
                      regressions=regressions(store, rows, runs_of, ran),
                      notes=notes_of(store, sids, (r.id for r in rows)),
                      lab_failed=without_runs(lab_failures(store, sids)),
                      routes=_routes(store, runs) if routes else {})


def _beside(store: Store, g: Group, sessions: Sequence[SessionRow]) -> None:
    """What a group's sections show beside its figures: the model's facts and the pivot's
    matrix, the device's ceilings nearest its first run, its newest quality probes."""
    session_ids = {r.row.session_id for r in g.runs}
    session = next((s for s in sessions if s.id in session_ids), None)
    if session is not None:
        g.facts = facts_for_group(store, session, g.model, g.device, [r.row for r in g.runs])
        g.pivot_matrix = stored_matrix(session.matrix_text) if len(session_ids) == 1 else None
    starts = [r.row.started_at for r in g.runs if r.row.started_at is not None]
    g.ceilings = nearest(store, g.device, min(starts) if starts else None)
    if g.ceilings is not None:    # each config with runs against the ceilings (its figures)
        g.judgements = {agg.config: judge(agg.values, g.ceilings)
                        for agg in g.configs if agg.runs}
    probed_in = newest_probed_session(store, sorted(session_ids, reverse=True), g.model) \
        if session_ids else None
    if probed_in is not None:
        models = summarise(store, probed_in, g.model)
        g.quality = models[0] if models else None


def traced_runs(runs: Sequence[RunView]) -> list[RunView]:
    """The ok runs whose record carries a route trace (no query: the summary is read)."""
    return [r for r in runs if r.ok and r.row.record.route_trace]


def _routes(store: Store, runs: Sequence[RunView]) -> dict[int, Any]:
    """Each traced run's (route figures, trace), or the error that kept them from being read
    (one unreadable trace does not cost the reader the rest of the document)."""
    out: dict[int, Any] = {}
    for run in traced_runs(runs):
        try:
            out[run.id] = run_figures(store, run.id)
        except (ValueError, ConfigError) as exc:
            out[run.id] = exc
    return out
