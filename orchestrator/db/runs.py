"""The read model: stored runs and sessions as frozen rows, and the one rule for which runs
count (docs/architecture.md, "The read model"). Over 400 lines on purpose: the rows, their
queries and their per-run statistics are one reader of stored results (as asv has one),
and splitting them would give two places that know the run table.

Every layer above db/ reads runs through here, never through db/schema.py:

- **Current runs.** A run is *current* unless a later run of the same cell superseded it
  (`orch run --resume` re-runs a failed cell as a new row and keeps the failure for the
  record). Every table, statistic and comparison reads current runs only; `Runs.current` is
  the one place that rule is written.
- **`RunRow`** carries every column of the run table, its device's and session's names, and
  `.record`, the engine's `RunRecord` parsed once from `run.summary` (any schema version);
  `.clock` says what timed `started_at` (orch's clock in UTC, the study's local wall-clock
  record, or a file's mtime) so no view labels a study's local time UTC.
- **`SessionRow`** carries the session's columns and `.matrix`, the stored matrix text parsed
  once (None for imports and for a matrix this orch can no longer read).
- **Per-run figures** (`Runs.figures`, stats/figures.py RunFigures) belong to the read model as
  pyperf's result model owns its statistics: every view and the adaptive-repeat judgement in
  run/ read the same figures. pandas and the statistics are imported only when figures must be
  computed (another trim or quantile method), so listing runs stays light.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

from sqlalchemy import Select, func, select

from orchestrator.db import schema
from orchestrator.errors import NotFound
from orchestrator.stats.config_key import ConfigKey, build_label
from orchestrator.stats.figures import RunFigures
from orchestrator.stats.overlap import overlapped
from orchestrator.stats.status import Status

if TYPE_CHECKING:
    from orchestrator.config.matrix import Matrix
    from orchestrator.db.store import Store
    from orchestrator.record import RunRecord

_RUN_COLUMNS = tuple(c.name for c in schema.run.columns)
_SESSION_COLUMNS = tuple(c.name for c in schema.session.columns)

# `run.time_source`: where an imported run's started_at came from. These are the study's own
# records of when it ran, local wall-clock times kept as written (naive: no zone is invented);
# FILE_TIME is the file's modification time in UTC, a guess when the files said nothing. A live
# run has none: orch's clock timed it, in UTC.
LOCAL_TIME_SOURCES = ("file name", "preamble", "trailer", "metrics", "log", "state", "design",
                      "option", "folder name")
DATE_ONLY = "folder name"   # only the day is known: shown as a date, never as midnight
NO_TIME = "unknown"       # an imported summary-only run whose log records no time
FILE_TIME = "mtime"


def parse_settings(flags: str | None) -> dict[str, str]:
    """An imported run's `flags` (the importer writes the engine's settings as space-separated
    `key=value` pairs) as a dict, values as written. A word without `=` continues the value
    before it, so a value holding a space survives; words before the first pair are dropped
    (the raw `flags` stay beside this in every view)."""
    settings: dict[str, str] = {}
    key = None
    for word in (flags or "").split():
        name, eq, value = word.partition("=")
        if eq and name:
            key = name
            settings[key] = value
        elif key is not None:
            settings[key] += " " + word
    return settings


@dataclass(frozen=True)
class RunRow:
    """One stored run (a cell execution) with its device's and session's names."""

    id: int
    uid: str
    session_id: int
    device_id: int
    cell_key: str
    model: str                          # always written (runner, import, lab), though
    config: str                         # the baseline schema left the columns nullable
    flags: str | None
    argv: Any
    repeat_index: int                   # always written (0-based; the schema's default 0)
    order_index: int | None
    status: str
    cause: str | None
    rc: int | None
    signal: int | None
    started_at: dt.datetime | None
    ended_at: dt.datetime | None
    cooldown_s: float | None
    cooldown_met: bool | None
    temp_start: Any
    mem_avail_start_kb: int | None
    engine: str | None
    engine_build: str | None
    binary_path: str | None
    binary_sha256: str | None
    model_size: int | None
    model_sha256: str | None
    remote_dir: str | None
    spool_lines: int | None
    summary: Any
    text: str | None
    warnings: Any
    superseded: bool
    time_source: str | None = None
    source_file: str | None = None
    figures: Any = None                 # RunFigures.stored(): read through `stored_figures`
    device: str = ""
    matrix_name: str | None = None
    session_name: str | None = None
    session_started: dt.datetime | None = None
    session_kind: str | None = None     # "run", "import", ... (session.kind)

    @cached_property
    def record(self) -> RunRecord:
        """What the engine reported about the run as a whole, typed (record.py)."""
        from orchestrator.record import load_record

        return load_record(self.summary)

    @cached_property
    def stored_figures(self) -> RunFigures | None:
        """The figures stored when the run ended or was imported (stats/figures.py), None
        while it runs or when they are of another FIGURES_VERSION (Runs.figures computes
        them then)."""
        return RunFigures.from_stored(self.figures)

    @property
    def overlapped(self) -> bool | None:
        """Whether its flash I/O ran beside compute (stats/overlap.py): an import's settings,
        else its argv and flags."""
        return overlapped(self.settings, self.argv, self.flags, self.engine)

    def overlapped_with(self, record: RunRecord) -> bool | None:
        """`overlapped` with `record` as its record (a run being ended or imported, whose
        record is not stored yet)."""
        settings = (dict(record.settings) or parse_settings(self.flags)) if self.imported \
            else None
        return overlapped(settings, self.argv, self.flags, self.engine)

    @property
    def build(self) -> str | None:
        """The engine build it measured (stats/config_key.py build_label)."""
        return build_label(self.binary_path, self.engine_build)

    @property
    def config_key(self) -> ConfigKey:
        """What config it measured (stats/config_key.py: model, name, settings, build)."""
        return ConfigKey.of(self.model, self.config, self.flags, self.model_sha256, self.build)

    @property
    def imported(self) -> bool:
        """Read from a study's files by `orch import`, not run by orch."""
        return self.session_kind == "import" or self.source_file is not None \
            or self.time_source is not None

    @property
    def clock(self) -> str:
        """What timed started_at: "orch" (a live run, UTC), "local" (the study's own record,
        local wall-clock time) or "file" (the file's mtime, UTC: the files did not record when
        it ran; also every import stored before time_source existed, which took the mtime).
        A source this orch does not know is still the study's record: local."""
        if self.time_source in (FILE_TIME, NO_TIME):
            return "file"
        if self.time_source is not None:
            return "local"
        return "file" if self.imported else "orch"

    @property
    def settings(self) -> dict[str, Any] | None:
        """An imported run's settings: the engine's resolved settings its files gave (the CSV
        preamble's key=values, kept in the record), else those parsed from `flags`; None for a
        live run, whose flags are the engine's command-line flags."""
        if not self.imported:
            return None
        return dict(self.record.settings) or parse_settings(self.flags)

    def as_dict(self) -> dict[str, Any]:
        """The stored columns and names, without the parsed record and the stored figures
        (export: its `stat_` columns are the figures, Runs.figures)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if f.name != "figures"}

    def replace(self, **values: Any) -> RunRow:
        """A copy with some fields changed (a view's relabelled config, say)."""
        return dataclasses.replace(self, **values)

    @classmethod
    def of(cls, row: Any) -> RunRow:
        m = row._mapping
        return cls(**{k: m[k] for k in _RUN_COLUMNS},
                   device=m.get("device", ""), matrix_name=m.get("matrix_name"),
                   session_name=m.get("session_name"),
                   session_started=m.get("session_started"),
                   session_kind=m.get("session_kind"))


@dataclass(frozen=True)
class SessionRow:
    """One stored session (an `orch run` on one device, an import, a lab submission's
    device part)."""

    values: dict[str, Any]

    def __getattr__(self, name: str) -> Any:
        try:
            return self.values[name]
        except KeyError:
            raise AttributeError(name) from None

    @cached_property
    def matrix(self) -> Matrix | None:
        """The stored matrix, parsed once; None for imports or text this orch cannot read."""
        from orchestrator.config.matrix import stored_matrix

        return stored_matrix(self.values.get("matrix_text"))

    @cached_property
    def matrix_data(self) -> dict[str, Any]:
        """The stored matrix as plain YAML data, parsed once ({} for imports or bad text):
        for readers that need keys the Matrix model normalises away."""
        import yaml

        try:
            data = yaml.safe_load(self.values.get("matrix_text") or "")
        except yaml.YAMLError:
            return {}
        return data if isinstance(data, dict) else {}

    @classmethod
    def of(cls, row: Any) -> SessionRow:
        return cls(dict(row._mapping))


def _run_select() -> Select:
    return (select(schema.run, schema.device.c.name.label("device"),
                   schema.session.c.matrix_name, schema.session.c.name.label("session_name"),
                   schema.session.c.started_at.label("session_started"),
                   schema.session.c.kind.label("session_kind"))
            .join(schema.device, schema.device.c.id == schema.run.c.device_id)
            .join(schema.session, schema.session.c.id == schema.run.c.session_id))


def current_only(stmt: Select) -> Select:
    """The rule for which runs count: those no later run superseded (see the module doc)."""
    return stmt.where(schema.run.c.superseded.is_(False))


class Runs:
    """Reads of stored runs; `Runs(store)` is cheap (no query until asked)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def _fetch(self, stmt: Select) -> list[RunRow]:
        return [RunRow.of(r) for r in self.store.fetch(stmt)]

    def current(self, session: int | None = None, matrix: str | None = None,
                device: str | None = None, build: str | None = None,
                sessions: Iterable[int] | None = None, cell_key: str | None = None,
                limit: int | None = None, include_superseded: bool = False) -> list[RunRow]:
        """Current runs, filtered: in a session (in run order) or any (newest first)."""
        run = schema.run
        stmt = _run_select()
        if not include_superseded:
            stmt = current_only(stmt)
        if session is not None:
            stmt = stmt.where(run.c.session_id == session)
        if sessions is not None:
            stmt = stmt.where(run.c.session_id.in_(list(sessions)))
        if matrix is not None:
            stmt = stmt.where(schema.session.c.matrix_name == matrix)
        if device is not None:
            stmt = stmt.where(schema.device.c.name == device)
        if build is not None:
            stmt = stmt.where(run.c.engine_build == build)
        if cell_key is not None:
            stmt = stmt.where(run.c.cell_key == cell_key)
        in_order = session is not None or sessions is not None or matrix is not None
        stmt = stmt.order_by(*((run.c.session_id, run.c.order_index, run.c.id) if in_order
                               else (run.c.id.desc(),)))
        if limit:
            stmt = stmt.limit(limit)
        return self._fetch(stmt)

    def of_session(self, session_id: int) -> list[RunRow]:
        """Every run of a session, superseded ones included (export, re-import)."""
        return self.current(session=session_id, include_superseded=True)

    def get(self, run_id: int) -> RunRow | None:
        rows = self._fetch(_run_select().where(schema.run.c.id == run_id))
        return rows[0] if rows else None

    def by_ids(self, ids: Iterable[int]) -> list[RunRow]:
        return self._fetch(_run_select().where(schema.run.c.id.in_(list(ids)))
                           .order_by(schema.run.c.id))

    def by_remote_dir(self, remote_dir: str) -> list[RunRow]:
        """Runs whose job directory on the device is this one (a live job's owner)."""
        return self._fetch(_run_select().where(schema.run.c.remote_dir == remote_dir))

    def running_on(self, device_id: int) -> list[RunRow]:
        """Runs of a device still marked running (a controller that died mid-run)."""
        return self._fetch(_run_select().where(schema.run.c.device_id == device_id,
                                               schema.run.c.status == Status.RUNNING))

    def latest_per_cell(self, session_id: int) -> dict[str, RunRow]:
        """The newest current run of each cell key of a session (`--resume`)."""
        out: dict[str, RunRow] = {}
        for row in sorted(self.current(session=session_id), key=lambda r: r.id):
            out[row.cell_key] = row
        return out

    def session_ids(self, matrix: str | None = None, device: str | None = None,
                    before: int | None = None) -> list[int]:
        """Sessions with at least one current run, filtered, newest first."""
        run, ses = schema.run, schema.session
        stmt = current_only(select(run.c.session_id).distinct()
                            .join(ses, ses.c.id == run.c.session_id)
                            .join(schema.device, schema.device.c.id == run.c.device_id))
        if matrix is not None:
            stmt = stmt.where(ses.c.matrix_name == matrix)
        if device is not None:
            stmt = stmt.where(schema.device.c.name == device)
        if before is not None:
            stmt = stmt.where(run.c.session_id < before)
        return sorted((r.session_id for r in self.store.fetch(stmt)), reverse=True)

    def has_any(self, session_id: int) -> bool:
        return bool(self.store.fetch(select(schema.run.c.id)
                                     .where(schema.run.c.session_id == session_id).limit(1)))

    def output_lines(self, run_id: int, stream: str, last: int | None = None) -> list[str]:
        """A run's stored lines of one stream (O stdout, E stderr, W agent warnings), in
        order; only the last `last` of them when given."""
        out = schema.output
        stmt = select(out.c.line).where(out.c.run_id == run_id, out.c.stream == stream)
        if last:
            rows = self.store.fetch(stmt.order_by(out.c.seq.desc()).limit(last))
            return [r.line for r in reversed(rows)]
        return [r.line for r in self.store.fetch(stmt.order_by(out.c.seq))]

    # -- per-run figures (stats/figures.py RunFigures) -------------------------------------
    def figures(self, rows: Sequence[RunRow], trim: int = 0,
                quantile_method: str = "linear") -> dict[int, RunFigures]:
        """Each run's figures, by run id in the rows' order: those stored when it ended or was
        imported (trim 0, linear quantiles); computed by the same function (db/figures.py,
        stats/statistics.py compute) for a run without stored figures of this version (one
        still running) and for every run when another trim or quantile method is asked for.
        A run computed here is not stored: only ending or importing a run writes figures."""
        stored = trim == 0 and quantile_method == "linear"
        out: dict[int, RunFigures | None] = {
            r.id: r.stored_figures if stored else None for r in rows}
        missing = [r for r in rows if out[r.id] is None]
        if missing:
            from orchestrator.db.figures import compute_rows

            with self.store.reading() as conn:
                out.update(compute_rows(conn, missing, trim, quantile_method))
        return {r.id: out[r.id] or RunFigures() for r in rows}

    def walls(self, run_id: int) -> Iterable[float | None]:
        """The run's stored wall_ms values in token order, streamed (a REAL reads back as
        it was given): for a sum over a 2M-token run without a list of 2M rows."""
        token = schema.token
        with self.store.reading() as conn:
            yield from conn.execute(select(token.c.wall_ms).where(token.c.run_id == run_id)
                                    .order_by(token.c.seq)).scalars()

    def token_count(self, run_id: int) -> int:
        """The run's token rows, counted over the (run_id, seq) primary key."""
        tok = schema.token
        stmt = select(func.count()).select_from(tok).where(tok.c.run_id == run_id)
        return int(self.store.fetch(stmt)[0][0])


class Sessions:
    """Reads of stored sessions."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def _fetch(self, stmt: Select) -> list[SessionRow]:
        return [SessionRow.of(r) for r in self.store.fetch(stmt)]

    def get(self, session_id: int) -> SessionRow | None:
        rows = self._fetch(select(schema.session).where(schema.session.c.id == session_id))
        return rows[0] if rows else None

    def one(self, session_id: int) -> SessionRow:
        """The session `session_id`, which the caller got from the store: NotFound if not."""
        row = self.get(session_id)
        if row is None:
            raise NotFound(f"no session {session_id} in {self.store.url}")
        return row

    def by_ids(self, ids: Iterable[int]) -> list[SessionRow]:
        return self._fetch(select(schema.session).where(schema.session.c.id.in_(list(ids)))
                           .order_by(schema.session.c.id))

    def resolve(self, session: str | None, matrix: str | None) -> int:
        """A session id from `SESSION` (id or name) or `--matrix NAME` (its latest session),
        else the newest session."""
        table = schema.session
        if session is not None and session.isdigit():
            if self.get(int(session)) is None:
                raise NotFound(f"no session {session} in {self.store.url}")
            return int(session)
        stmt = select(table.c.id).order_by(table.c.id.desc())
        if session is not None:
            stmt = stmt.where(table.c.name == session)
        elif matrix is not None:
            stmt = stmt.where(table.c.matrix_name == matrix)
        rows = self.store.fetch(stmt.limit(1))
        if not rows:
            what = session or matrix or "any"
            raise NotFound(f"no session {what!r} in {self.store.url}")
        return rows[0].id

    def imports_of(self, source_dir: str) -> list[SessionRow]:
        """Import sessions of one study folder, oldest first."""
        table = schema.session
        return self._fetch(select(table).where(table.c.kind == "import",
                                               table.c.source_dir == source_dir)
                           .order_by(table.c.id))

    def imported_files(self, session_ids: Iterable[int]) -> list[Any]:
        """(session_id, path, sha256) of the files imports brought in."""
        table = schema.imported_file
        return self.store.fetch(select(table).where(table.c.session_id.in_(list(session_ids))))

    def newest_matrix(self, devices: Iterable[str] | None = None) -> str | None:
        """The matrix name of the newest session with a current run (on these devices)."""
        run, ses, dev = schema.run, schema.session, schema.device
        stmt = current_only(select(ses.c.matrix_name).select_from(run)
                            .join(ses, ses.c.id == run.c.session_id)
                            .join(dev, dev.c.id == run.c.device_id))
        if devices is not None:
            stmt = stmt.where(dev.c.name.in_(list(devices)))
        rows = self.store.fetch(stmt.order_by(run.c.session_id.desc()).limit(1))
        return rows[0].matrix_name if rows else None

    def latest_per_device(self, matrix: str, devices: Iterable[str] | None = None
                          ) -> dict[str, int]:
        """Each device's newest session of a matrix that has a current run."""
        run, ses, dev = schema.run, schema.session, schema.device
        stmt = current_only(select(dev.c.name, func.max(run.c.session_id).label("sid"))
                            .select_from(run)
                            .join(ses, ses.c.id == run.c.session_id)
                            .join(dev, dev.c.id == run.c.device_id)
                            .where(ses.c.matrix_name == matrix)
                            .group_by(dev.c.name))
        if devices is not None:
            stmt = stmt.where(dev.c.name.in_(list(devices)))
        return {r.name: r.sid for r in self.store.fetch(stmt)}


def devices_by_name(store: Store, names: Iterable[str]) -> dict[str, Any]:
    """Device rows (name, kind, facts, ...) of these names."""
    rows = store.fetch(select(schema.device).where(schema.device.c.name.in_(list(names))))
    return {d.name: d for d in rows}
