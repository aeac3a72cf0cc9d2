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
- **Per-run statistics** (`Runs.stats`) belong to the read model as pyperf's result model owns
  its statistics: every view and the adaptive-repeat judgement in run/ read the same figures.
  pandas and the statistics are imported when first asked for, so listing runs stays light.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, Select, func, select

from orchestrator.db import schema
from orchestrator.errors import ConfigError

if TYPE_CHECKING:
    import pandas as pd

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
    model: str | None
    config: str | None
    flags: str | None
    argv: Any
    repeat_index: int | None
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
    device: str = ""
    matrix_name: str | None = None
    session_name: str | None = None
    session_started: dt.datetime | None = None
    session_kind: str | None = None     # "run", "import", ... (session.kind)

    @cached_property
    def record(self) -> "RunRecord":
        """What the engine reported about the run as a whole, typed (record.py)."""
        from orchestrator.record import load_record

        return load_record(self.summary)

    @cached_property
    def record_fields(self) -> dict[str, Any]:
        """`.record`'s fields as plain values (nested models as dicts), for `orch show`: read
        without pydantic from a summary of the current format (stats/run_figures.py
        read_fields, ~100 ms of a fresh process's imports), else from `.record`."""
        from orchestrator.stats.run_figures import fields_of, read_fields

        fields = read_fields(self.summary)
        return fields if fields is not None else fields_of(self.record)

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
        """The stored columns and names, without the parsed record (export)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def replace(self, **values: Any) -> "RunRow":
        """A copy with some fields changed (a view's relabelled config, say)."""
        return dataclasses.replace(self, **values)

    @classmethod
    def of(cls, row: Any) -> "RunRow":
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
    def matrix(self) -> "Matrix | None":
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
    def of(cls, row: Any) -> "SessionRow":
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

    def __init__(self, store: "Store") -> None:
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
                                               schema.run.c.status == "running"))

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

    # -- per-run statistics ----------------------------------------------------------------
    def stats(self, rows: Sequence[Any], quantile_method: str = "linear", trim: int = 0,
              within_run: bool = False) -> "pd.DataFrame":
        """statistics.runs_table for these runs, indexed by run id (every row present).

        Each run's record is read back with `load_record` (any schema version); its device
        pressure comes from the agent's samples when orch measured the run, else from the
        record (the `.metrics` sidecar an imported run brought along). trim: per-token
        statistics over the tokens after each run's first `trim`. within_run: with the
        within-run columns (stats/within_run.py: a block bootstrap per run, and the
        not-settled rule): what a published table shows (orch table, the report, export);
        off by default since the block length needs `arch`, whose import alone costs seconds
        that `orch runs`, drift checks and adaptive repeats need not pay."""
        import pandas as pd

        from orchestrator.record import load_record
        from orchestrator.stats import statistics
        from orchestrator.stats.within_run import WITHIN_RUN_COLUMNS

        ids = [r.id for r in rows]
        if not ids:
            return pd.DataFrame(columns=list(statistics.STAT_COLUMNS)
                                + (list(WITHIN_RUN_COLUMNS) if within_run else []))
        if isinstance(getattr(self.store, "engine", None), Engine):
            tokens, totals = stat_tokens(self.store.engine, ids)
        else:   # a frame source (the report's cache, which keeps the whole frame for plots)
            tokens, totals = self.store.frame("token", ids), None
        records = {row.id: (row.record if isinstance(row, RunRow) else load_record(row.summary))
                   for row in rows}
        stats = statistics.runs_table(tokens, records,
                                      statistics.pressure_by_run(self.store.frame("sample", ids)),
                                      quantile_method=quantile_method, trim=trim,
                                      within_run=within_run, totals=totals)
        return stats.reindex(ids)

    def wall_frame(self, ids: Sequence[int]) -> "pd.DataFrame":
        """run_id and wall_ms of these runs' tokens in token order (stat_tokens' frame): what
        the within-run figures read (stats/within_run.py), without a frame of every column."""
        return stat_tokens(self.store.engine, ids)[0]

    def listing_stats(self, rows: Sequence[Any]) -> dict[int, dict[str, Any]]:
        """`orch runs`' two figures per run id, `n` and `mean` (tok/s), from one aggregate
        query: the values stats_dicts gives them (statistics.runs_table, trim 0: n is the
        run's token rows, mean n / their decode seconds, None when those sum to 0; a run
        without token rows has the engine's own decode tok/s), without reading every token
        row into a frame, so the listing imports no pandas (tests/test_startup.py checks both)."""
        import math

        tok = schema.token
        ids = [r.id for r in rows]
        found: dict[int, tuple[int, float | None]] = {}
        if ids:
            stmt = (select(tok.c.run_id, func.count(), func.sum(tok.c.wall_ms))
                    .where(tok.c.run_id.in_(ids)).group_by(tok.c.run_id))
            found = {r[0]: (int(r[1]), r[2]) for r in self.store.fetch(stmt)}
        out: dict[int, dict[str, Any]] = {}
        for row in rows:
            n, wall = found.get(row.id, (0, None))
            if n:
                mean = n / (float(wall) / 1000.0) if wall is not None and wall > 0 else None
            else:   # the engine's own figure: its record (pydantic) only for such a run
                from orchestrator.record import load_record

                record = row.record if isinstance(row, RunRow) else load_record(row.summary)
                tps = record.decode_tps
                mean = None if tps is None or math.isnan(tps) else float(tps)
            out[row.id] = {"n": n, "mean": mean}
        return out

    def stats_dicts(self, rows: Sequence[Any], trim: int = 0) -> dict[int, dict[str, Any]]:
        """Per-run statistics as plain dicts (None for missing), keyed by run id."""
        from orchestrator.stats.values import plain

        return {rid: {k: plain(v) for k, v in rec.items()}
                for rid, rec in self.stats(rows, trim=trim).to_dict("index").items()}

    # -- one run's statistics for `orch show`, from the figures kept with the run ------------
    def token_figures(self, run_id: int) -> dict[str, Any]:
        """The run's token statistics (statistics.token_figures) as Runs.stats computes them,
        for the run's record (`RunRecord.token_stats`): the runner's _finish and the
        importer's write_run keep them once the run's token rows are all stored."""
        from orchestrator.stats.statistics import token_figures

        return token_figures(*stat_tokens(self.store.engine, [run_id]))

    def walls(self, run_id: int) -> Iterable[float | None]:
        """The run's stored wall_ms values in token order, streamed (a REAL reads back as
        it was given): for a sum over a 2M-token run without a list of 2M rows."""
        token = schema.token
        with self.store.engine.connect() as conn:
            yield from conn.execute(select(token.c.wall_ms).where(token.c.run_id == run_id)
                                    .order_by(token.c.seq)).scalars()

    def token_count(self, run_id: int) -> int:
        """The run's token rows, counted over the (run_id, seq) primary key."""
        tok = schema.token
        stmt = select(func.count()).select_from(tok).where(tok.c.run_id == run_id)
        return int(self.store.fetch(stmt)[0][0])

    def pressure_of(self, run_id: int) -> dict[str, Any] | None:
        """statistics.pressure_by_run of one run, without pandas: None when it has no samples.
        The same reductions on the same values (max, min, the first reading in time order,
        ties in seq order as the stable sort keeps them, a missing t_ms last), then the same
        one division, so the figures are pressure_by_run's to the bit."""
        from orchestrator.stats.run_figures import KIB_PER_GIB   # record.py's, sans pydantic

        s = schema.sample
        rows = self.store.fetch(select(s.c.t_ms, s.c.hwm_kb, s.c.rss_kb, s.c.mem_avail_kb,
                                       s.c.cpu_temp_mC, s.c.batt_temp_dC)
                                .where(s.c.run_id == run_id).order_by(s.c.seq))
        if not rows:
            return None
        rows.sort(key=lambda r: (r.t_ms is None, r.t_ms or 0))     # stable

        def agg(column: str, how: Any, scale: float) -> float | None:
            values = [float(v) for v in (getattr(r, column) for r in rows) if v is not None]
            return how(values) / scale if values else None

        def first(values: list[float]) -> float:
            return values[0]

        peak = agg("hwm_kb", max, KIB_PER_GIB)
        return {"peak_rss_gib": peak if peak is not None else agg("rss_kb", max, KIB_PER_GIB),
                "mem_floor_gib": agg("mem_avail_kb", min, KIB_PER_GIB),
                "cpu_temp_start_c": agg("cpu_temp_mC", first, 1000),
                "cpu_temp_max_c": agg("cpu_temp_mC", max, 1000),
                "batt_temp_max_c": agg("batt_temp_dC", max, 10)}

    def show_stats(self, row: RunRow) -> dict[str, Any]:
        """stats_dicts' figures of one run (trim 0), for `orch show`: from the token figures
        its record keeps (`RunRecord.token_stats`) when they were computed from as many token
        rows as the run has now, without reading the rows (a 2M-token run: a count over the
        primary key instead of 3 s of reads) nor importing pandas; else computed as
        stats_dicts does (a run stored before the figures were kept, one still running).

        Why the kept figures cannot go stale: a run's token rows are written only while it is
        recorded (the runner's RunRecorder, an import's write_run), and its figures are
        computed after the last of them is stored, from those rows, in the same write of the
        summary that ends the run; nothing in orch changes a finished run's token rows (a
        re-import or `--resume` writes a new run; deleting a run deletes its rows). Rows added
        or removed afterwards anyway (a recorder that resumed, a store edited by hand) change
        the count, which is checked on every show, and the figures are then computed again."""
        figures = row.record_fields["token_stats"]
        if not figures or figures.get("n") != self.token_count(row.id):
            return self.stats_dicts([row])[row.id]
        # neither numpy nor pydantic: `orch show` is a fresh process (stats/run_figures.py)
        from orchestrator.stats.run_figures import one_run_stats

        return one_run_stats(figures, row.record_fields, self.pressure_of(row.id))


# ---- the token columns the statistics read ----------------------------------------------

STAT_CHUNK = 65536      # token rows per fetchmany: bounded Python objects whatever the run
_SUMMED = ("stall_ms", "majflt")      # runs_table's per-run float sums (in token order)
_EXACT_INT_SUM = 2 ** 53              # integer sums below this are exact as float sums too


def _sequential_sum(dialect: str) -> bool:
    """Whether the store's SUM() of a REAL column adds in double, one row after the other:
    SQLite before 3.43 does (3.43 brought Kahan-Babuska-Neumaier summation), which over the
    (run_id, seq) index is exactly np.bincount's sum in token order."""
    if dialect != "sqlite":
        return False
    import sqlite3

    return sqlite3.sqlite_version_info < (3, 43, 0)


def stat_tokens(engine: Engine, ids: Sequence[int]) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """What statistics.runs_table reads of these runs' token rows, without a frame of every
    column (the JSON `extra` alone made a 2M-token run 2 GB): (tokens, totals).

    tokens: run_id and wall_ms (and stall_ms, majflt, read_bytes where SQL cannot give their
    sums exactly), in (run_id, seq) order as Store.frame gives them, fetched through the DBAPI
    cursor STAT_CHUNK rows at a time into preallocated float arrays: the values read_sql
    gives, so every figure is the same to the bit. totals, per run id: runs_table's whole-run
    aggregates of the other columns from one GROUP BY: `_read_bytes` (SUM when the values are
    non-negative integers summing below 2^53, where it equals the float sum),
    `_stall_sum`/`_majflt_sum` with their counts (where SUM adds sequentially, see
    _sequential_sum), and `_last_hit` (cache_hit_pct of the run's last row). The counts and
    the rows are read in one SQLite read transaction, so a run being recorded cannot add rows
    in between."""
    import itertools

    import numpy as np
    import pandas as pd

    tok = schema.token
    if not ids:
        return pd.DataFrame({"run_id": pd.Series([], dtype="int64"),
                             "wall_ms": pd.Series([], dtype=float)}), None
    in_ids = tok.c.run_id.in_(list(ids))
    aggregates = [func.count()]
    for c in _SUMMED:
        aggregates += [func.count(tok.c[c]), func.sum(tok.c[c])]
    aggregates += [func.count(tok.c.read_bytes), func.min(tok.c.read_bytes),
                   func.sum(tok.c.read_bytes)]
    head = (select(tok.c.run_id, *aggregates).where(in_ids).group_by(tok.c.run_id)
            .order_by(tok.c.run_id))
    # the last row of each run by an index seek (a GROUP BY max(seq) would scan them all)
    last = (select(tok.c.cache_hit_pct).where(tok.c.run_id == schema.run.c.id)
            .order_by(tok.c.seq.desc()).limit(1).scalar_subquery())
    hits = select(schema.run.c.id, last).where(schema.run.c.id.in_(list(ids)))
    with engine.connect() as conn:
        dbapi = conn.connection.driver_connection
        cursor = dbapi.cursor()
        sqlite = conn.dialect.name == "sqlite"
        exact_sums = _sequential_sum(conn.dialect.name)

        def run(stmt: Any) -> Any:
            sql = stmt.compile(dialect=conn.dialect, compile_kwargs={"literal_binds": True})
            cursor.execute(str(sql))
            return cursor

        try:
            if sqlite and not dbapi.in_transaction:
                cursor.execute("BEGIN")         # one snapshot for the counts and the rows
            try:
                counts = run(head).fetchall()
            except conn.dialect.loaded_dbapi.Error:
                # SUM's integer overflow: counted again without it, read_bytes fetched
                dbapi.rollback()
                if sqlite:
                    cursor.execute("BEGIN")
                counts = [(*r, None) for r in run(head.with_only_columns(
                    *head.selected_columns[:-1])).fetchall()]
            run_ids = np.array([r[0] for r in counts], dtype=np.int64)
            n = np.array([r[1] for r in counts], dtype=np.int64)
            rb_sql = all(isinstance(r[8], int) and r[7] is not None and r[7] >= 0
                         and r[8] < _EXACT_INT_SUM for r in counts if r[6])
            fetched = ["wall_ms"] + ([] if exact_sums else
                                     [c for i, c in enumerate(_SUMMED)
                                      if any(r[2 + 2 * i] for r in counts)])
            fetched += [] if rb_sql else ["read_bytes"]
            total, width = int(n.sum()), len(fetched)
            values = np.empty(total * width)
            at = 0
            cur = run(select(*(tok.c[c] for c in fetched)).where(in_ids)
                      .order_by(tok.c.run_id, tok.c.seq))
            while rows := cur.fetchmany(STAT_CHUNK):
                if at + len(rows) * width > len(values):
                    raise RuntimeError("token rows changed while read")
                try:
                    chunk = np.fromiter(itertools.chain.from_iterable(rows), float,
                                        count=len(rows) * width)
                except TypeError:      # a NULL: NaN, as read_sql's float columns have it
                    chunk = np.array(rows, dtype=float).ravel()
                values[at:at + len(rows) * width] = chunk
                at += len(rows) * width
            if at != len(values):
                raise RuntimeError("token rows changed while read")
            last_hit = dict(run(hits).fetchall())
        finally:
            if sqlite and dbapi.in_transaction:
                dbapi.rollback()
            cursor.close()
    grid = values.reshape(total, width)
    tokens = pd.DataFrame({"run_id": np.repeat(run_ids, n),
                           **{c: np.ascontiguousarray(grid[:, j]) for j, c in enumerate(fetched)}})
    index = pd.Index(run_ids, name="run_id")
    totals = pd.DataFrame({"_last_hit": [last_hit.get(int(r)) for r in run_ids]}, index=index,
                          dtype=float)
    if rb_sql:
        totals["_read_bytes"] = [float(r[8]) if r[6] else np.nan for r in counts]
    if exact_sums:
        for i, c in enumerate(_SUMMED):
            totals[f"_{c}_count"] = [float(r[2 + 2 * i]) for r in counts]
            totals[f"_{c}_sum"] = [np.nan if r[3 + 2 * i] is None else float(r[3 + 2 * i])
                                   for r in counts]
    return tokens, totals


class Sessions:
    """Reads of stored sessions."""

    def __init__(self, store: "Store") -> None:
        self.store = store

    def _fetch(self, stmt: Select) -> list[SessionRow]:
        return [SessionRow.of(r) for r in self.store.fetch(stmt)]

    def get(self, session_id: int) -> SessionRow | None:
        rows = self._fetch(select(schema.session).where(schema.session.c.id == session_id))
        return rows[0] if rows else None

    def by_ids(self, ids: Iterable[int]) -> list[SessionRow]:
        return self._fetch(select(schema.session).where(schema.session.c.id.in_(list(ids)))
                           .order_by(schema.session.c.id))

    def resolve(self, session: str | None, matrix: str | None) -> int:
        """A session id from `SESSION` (id or name) or `--matrix NAME` (its latest session),
        else the newest session."""
        table = schema.session
        if session is not None and session.isdigit():
            if self.get(int(session)) is None:
                raise ConfigError(f"no session {session} in {self.store.url}")
            return int(session)
        stmt = select(table.c.id).order_by(table.c.id.desc())
        if session is not None:
            stmt = stmt.where(table.c.name == session)
        elif matrix is not None:
            stmt = stmt.where(table.c.matrix_name == matrix)
        rows = self.store.fetch(stmt.limit(1))
        if not rows:
            what = session or matrix or "any"
            raise ConfigError(f"no session {what!r} in {self.store.url}")
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


def devices_by_name(store: "Store", names: Iterable[str]) -> dict[str, Any]:
    """Device rows (name, kind, facts, ...) of these names."""
    rows = store.fetch(select(schema.device).where(schema.device.c.name.in_(list(names))))
    return {d.name: d for d in rows}
