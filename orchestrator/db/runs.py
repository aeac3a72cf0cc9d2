"""The read model: stored runs and sessions as frozen rows, and the one rule for which runs
count (docs/architecture.md, "The read model"): the one reader of stored results (as asv has
one); the rows themselves are db/rows.py's.

Every layer above db/ reads runs through here, never through db/schema.py:

- **Current runs.** A run is *current* unless a later run of the same cell superseded it
  (`orch run --resume` re-runs a failed cell as a new row and keeps the failure for the
  record). Every table, statistic and comparison reads current runs only; `Runs.current` is
  the one place that rule is written.
- **`RunRow`** carries every column of the run table, its device's and session's names, and
  `.record`, the engine's `RunRecord` parsed once from `run.summary` (any schema version);
  `.clock` says what timed `started_at` (orch's clock in UTC, the study's local wall-clock
  record, or a file's mtime) so no view labels a study's local time UTC.
- **`SessionRow`** carries the session's columns; its `matrix_text` is the matrix as it was
  stored, text: the reader parses it (config/stored_matrix.py), db/ knows no matrix.
- **Per-run figures** (`Runs.figures`, stats/figures.py RunFigures) belong to the read model as
  pyperf's result model owns its statistics: every view and the adaptive-repeat judgement in
  run/ read the same figures. pandas and the statistics are imported only when figures must be
  computed (another trim or quantile method), so listing runs stays light.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import Select, func, select

from orchestrator.db import schema
from orchestrator.db.access import StoreAccess
from orchestrator.db.rows import RunRow, SessionRow
from orchestrator.errors import NotFound
from orchestrator.stats.figures import RunFigures
from orchestrator.stats.status import Status

if TYPE_CHECKING:
    pass

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

    def __init__(self, store: StoreAccess) -> None:
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

    def builds(self, matrix: str | None = None, device: str | None = None) -> list[Any]:
        """The distinct (binary_path, engine_build) of the current runs (of `matrix`, on
        `device`) with the newest session that has each (`newest`), newest first: one query
        for `--builds` to name the known builds (results/build_names.py)."""
        run, ses = schema.run, schema.session
        stmt = current_only(select(run.c.binary_path, run.c.engine_build,
                                   func.max(run.c.session_id).label("newest"))
                            .join(ses, ses.c.id == run.c.session_id)
                            .join(schema.device, schema.device.c.id == run.c.device_id)
                            .group_by(run.c.binary_path, run.c.engine_build))
        if matrix is not None:
            stmt = stmt.where(ses.c.matrix_name == matrix)
        if device is not None:
            stmt = stmt.where(schema.device.c.name == device)
        return sorted(self.store.fetch(stmt), key=lambda r: -r.newest)

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

    def __init__(self, store: StoreAccess) -> None:
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

    def all(self) -> list[SessionRow]:
        """Every stored session, newest (highest id) first (`orch site`'s index)."""
        return self._fetch(select(schema.session).order_by(schema.session.c.id.desc()))

    def by_ids(self, ids: Iterable[int]) -> list[SessionRow]:
        return self._fetch(select(schema.session).where(schema.session.c.id.in_(list(ids)))
                           .order_by(schema.session.c.id))

    def latest_run_session(self, matrix_name: str, device_id: int) -> int | None:
        """The newest `orch run` session of the matrix with a run on the device (--resume)."""
        stmt = (select(func.max(schema.run.c.session_id))
                .join(schema.session)
                .where(schema.session.c.matrix_name == matrix_name,
                       schema.session.c.kind == "run", schema.run.c.device_id == device_id))
        return self.store.fetch(stmt)[0][0]

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


def all_devices(store: StoreAccess) -> list[Any]:
    """Every device row (name, kind, facts, facts_at), by name."""
    return store.fetch(select(schema.device).order_by(schema.device.c.name))


def devices_by_name(store: StoreAccess, names: Iterable[str]) -> dict[str, Any]:
    """Device rows (name, kind, facts, ...) of these names."""
    rows = store.fetch(select(schema.device).where(schema.device.c.name.in_(list(names))))
    return {d.name: d for d in rows}
