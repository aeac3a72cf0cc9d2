"""The store: one SQLAlchemy engine, migrated to the newest schema on open, and the writes and
reads the other layers need. Any SQLAlchemy URL works (SQLite by default, PostgreSQL for a lab).

Over 400 lines on purpose: the store's opening, migration check, transactions and its few
writes share the engine and the lock that serialises writers.
"""
from __future__ import annotations

import datetime as dt
import os
import threading
import time
from pathlib import Path
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Iterable, Iterator

from sqlalchemy import (
    Connection,
    CursorResult,
    Engine,
    create_engine,
    event,
    select,
    update,
)
from sqlalchemy import inspect as sa_inspect
from sqlalchemy.engine import make_url
from sqlalchemy.exc import (
    ArgumentError,
    DBAPIError,
    IntegrityError,
    NoSuchModuleError,
    OperationalError,
    ProgrammingError,
)

from orchestrator.db import schema
from orchestrator.db.bulk import bulk_insert  # noqa: F401 - re-exported (db/writes.py, tests)
from orchestrator.db.faults import first_line as _first_line
from orchestrator.db.faults import opening_error
from orchestrator.db.reconnect import Guard, engine_options
from orchestrator.db.storable import storable_values
from orchestrator.errors import StoreError

if TYPE_CHECKING:
    import pandas as pd


DEFAULT_DB = "orch.db"
ROUTE_COLUMNS = ("turn", "phase", "step", "layer", "slot", "expert", "weight", "residency",
                 "expert_bytes", "dropped")
MIGRATIONS = Path(__file__).with_name("migrations")


def pandas() -> Any:
    """pandas, imported when a frame is first asked for: commands that only list runs
    (`orch runs`, `orch show`, `orch lab status`) never pay its import."""
    import pandas as pd

    return pd


def now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def inserted_id(result: CursorResult[Any]) -> int:
    """The primary key of the row a single-row INSERT created."""
    key = result.inserted_primary_key
    if key is None:  # SQLAlchemy types it Optional for non-INSERT results; ours are INSERTs
        raise StoreError("the insert returned no primary key")
    return int(key[0])


def resolve_url(db: str | None) -> str:
    """`--db` / ORCH_DB: a SQLAlchemy URL, or a plain file path meaning SQLite."""
    value = db or os.environ.get("ORCH_DB") or DEFAULT_DB
    if "://" in value:
        return value
    return f"sqlite:///{Path(value).expanduser()}"


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cursor = dbapi_conn.cursor()
    # WAL: readers (orch runs, orch report) never block the writer of a running matrix.
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.close()


def migrate(engine: Engine) -> bool:
    """Bring the schema to Alembic's head (a no-op when it is there already); True when this
    call upgraded it (the caller then computes the stored runs' figures: db/figures.py
    backfill).

    A store already at the head is recognised by one query against `alembic_version` and the
    newest migration file's revision, without importing Alembic (a third of a short command's
    start-up). A store stamped by a revision this orch does not have was written by a newer
    orch: refused with a StoreError rather than "migrated" into an unknown state.

    Two processes may open a new database at the same moment (`orch run` and `orch report`, a
    test watching a run, lab workers): both see no schema, one creates it, and the other's
    CREATE fails once the first commits. That loser finds the schema at head on its next look
    and goes on; any other failure is raised."""
    known = revisions()
    head = known[-1]
    stamped = current_revision(engine)
    if stamped == head:
        return False
    if stamped is not None and stamped not in known:
        raise StoreError(f"{engine.url.render_as_string(hide_password=True)}: written by a "
                         f"newer orch (schema revision {stamped}; this orch knows up to "
                         f"{head}): use that orch, or another --db")
    from alembic import command
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))

    def current() -> str | None:
        return current_revision(engine)

    for attempt in range(3):
        if current() == head:
            return False
        try:
            with engine.begin() as conn:
                config.attributes["connection"] = conn
                command.upgrade(config, "head")
            return True
        except (OperationalError, IntegrityError, ProgrammingError):
            if current() == head:   # a concurrent opener migrated it (and computes figures)
                return False
            if attempt == 2:
                raise
            time.sleep(0.2 * (attempt + 1))
    return False


def revisions() -> list[str]:
    """The schema revisions this orch has, oldest first: migration files are named by their
    revision (`0008_session_device_facts.py` is revision 0008, each revising the one before;
    tests/test_store.py checks that against Alembic's own view)."""
    names = sorted(p.name.split("_", 1)[0] for p in (MIGRATIONS / "versions").glob("[0-9]*_*.py"))
    return names


def current_revision(engine: Engine) -> str | None:
    """The revision a store is stamped with; None for an empty one."""
    with engine.connect() as conn:
        if not sa_inspect(conn).has_table("alembic_version"):
            return None
        rows = conn.exec_driver_sql("SELECT version_num FROM alembic_version").fetchall()
    return rows[0][0] if rows else None


class Store:
    """Thread-safe writer and reader. Writes are serialised with a lock so that several device
    workers share one SQLite file without "database is locked"."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.guard = Guard(engine)         # lost connections, a deleted file (db/reconnect.py)
        self.lock = threading.RLock()
        self._open = threading.local()     # .conn: this thread's open transaction()

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        """Every write of the block, on this thread, commits together at its end or not at all
        (an exception rolls them all back): `orch import` stores a folder's runs this way, so
        a failure half-way leaves the store as it was instead of needing compensating deletes.
        Reads on this thread inside the block see its writes; a nested block joins the outer
        one. Other threads wait on the store's lock until it ends."""
        conn = getattr(self._open, "conn", None)
        if conn is not None:
            yield conn
            return
        with self.lock, self.guard.off(), self.engine.begin() as conn:
            self._open.conn = conn   # (a cut transaction cannot be redone a statement at a time)
            try:
                yield conn
            finally:
                self._open.conn = None

    @contextmanager
    def writing(self) -> Iterator[Connection]:
        """A connection to write on: the open transaction's, or one of its own committed at
        the end of the block (serialised with the store's lock)."""
        conn = getattr(self._open, "conn", None)
        if conn is not None:
            yield conn
            return
        with self.lock, self.engine.begin() as conn:
            yield conn

    @contextmanager
    def reading(self) -> Iterator[Connection]:
        """A connection to read on: the open transaction's (its writes are visible), or a new
        one."""
        conn = getattr(self._open, "conn", None)
        if conn is not None:
            yield conn
            return
        with self.engine.connect() as conn:
            yield conn

    @classmethod
    def open(cls, db: str | None = None, create: bool = True, write: bool = False) -> "Store":
        """The store at `db` (--db / ORCH_DB / ./orch.db), migrated. `create=False` (commands
        that only read) refuses a SQLite file that does not exist instead of creating an
        empty one; `write=True` (`orch run`, `orch import`) refuses a SQLite file, or its
        folder, that cannot be written, before anything runs. Every way the URL can be unusable
        is a StoreError, one line."""
        url = resolve_url(db)
        try:
            parsed = make_url(url)
        except ArgumentError as exc:
            raise StoreError(f"--db {db!r}: not a database URL or file path ({exc})") from None
        if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
            path = Path(parsed.database).expanduser()
            if path.is_dir():
                raise StoreError(f"--db {path}: is a directory, not a database file")
            if not create and not path.exists():
                raise StoreError(f"no database at {path} (run or import something first, "
                                 f"or give --db)")
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StoreError(f"--db {path}: cannot create its folder: {exc.strerror}") from None
            if write and path.exists() and not os.access(path, os.W_OK):
                raise StoreError(f"store {path} is read-only")
            if write and not os.access(path.parent, os.W_OK | os.X_OK):
                # SQLite writes its journal beside the file: a read-only folder stops writes too
                raise StoreError(f"store {path} is read-only (its folder is not writable)")
        try:
            engine = create_engine(url, **engine_options(parsed))
        except (ArgumentError, NoSuchModuleError, ImportError) as exc:
            raise StoreError(f"--db {parsed.render_as_string(hide_password=True)}: "
                             f"{type(exc).__name__}: {_first_line(exc)}") from None
        if engine.dialect.name == "sqlite":
            event.listen(engine, "connect", _sqlite_pragmas)
        store = cls(engine)
        try:
            if migrate(engine):
                # the stored runs' figures of this orch (a new FIGURES_VERSION comes with a
                # migration, so this is where stores written before it get them, once)
                from orchestrator.db.backfill import backfill

                backfill(store)
            store.guard.remember_file()
        except StoreError:
            engine.dispose()
            raise
        except (DBAPIError, OSError) as exc:
            engine.dispose()
            raise opening_error(exc, parsed.render_as_string(hide_password=True)) from None
        return store

    def forked(self) -> None:
        """In a forked child process: leave the parent's pooled connections to the parent
        (SQLAlchemy's rule for fork); the child opens its own."""
        self.engine.dispose(close=False)

    @property
    def url(self) -> str:
        return self.engine.url.render_as_string(hide_password=True)

    @property
    def path(self) -> str | None:
        """A SQLite store's file; None for a server's."""
        return self.guard.path

    # -- writes ------------------------------------------------------------------------------
    def _insert(self, table: Any, values: dict[str, Any]) -> int:
        def insert(_again: bool) -> int:
            with self.writing() as conn:
                return inserted_id(conn.execute(
                    table.insert().values(**storable_values(conn, table, None, values))))
        return self.guard.redo(f"a write of {table.name}", insert)

    def _update(self, table: Any, row_id: int, values: dict[str, Any]) -> None:
        def change(_again: bool) -> None:
            with self.writing() as conn:
                conn.execute(update(table).where(table.c.id == row_id)
                             .values(**storable_values(conn, table, row_id, values)))
        self.guard.redo(f"an update of {table.name} {row_id}", change)

    def upsert_device(self, name: str, kind: str, facts: dict[str, str] | None = None) -> int:
        with self.writing() as conn:
            found = conn.execute(select(schema.device.c.id, schema.device.c.kind)
                                 .where(schema.device.c.name == name)).first()
            values: dict[str, Any] = {"kind": kind}
            if facts is not None:
                values.update(facts=facts, facts_at=now())
            if found is None:
                return inserted_id(conn.execute(schema.device.insert().values(name=name, **values)))
            conn.execute(update(schema.device).where(schema.device.c.id == found.id).values(**values))
            return found.id

    def create_session(self, **values: Any) -> int:
        values.setdefault("started_at", now())
        return self._insert(schema.session, values)

    def update_session(self, session_id: int, **values: Any) -> None:
        self._update(schema.session, session_id, values)

    def create_run(self, **values: Any) -> int:
        return self._insert(schema.run, values)

    def update_run(self, run_id: int, **values: Any) -> None:
        self._update(schema.run, run_id, values)

    def update_device(self, device_id: int, **values: Any) -> None:
        self._update(schema.device, device_id, values)

    def set_imported_file(self, session_id: int, path: str, sha256: str) -> None:
        """Remember the digest an imported file had, replacing an earlier one."""
        table = schema.imported_file
        with self.writing() as conn:
            conn.execute(table.delete().where(table.c.session_id == session_id,
                                              table.c.path == path))
            conn.execute(table.insert().values(session_id=session_id, path=path, sha256=sha256))

    def forget_imported_files(self, session_id: int) -> None:
        """Drop an import session's file digests (`orch import --replace` reads every file)."""
        table = schema.imported_file
        with self.writing() as conn:
            conn.execute(table.delete().where(table.c.session_id == session_id))

    def delete_run(self, run_id: int) -> None:
        """A run and its token, sample, output and route rows."""
        with self.writing() as conn:
            for table in (schema.token, schema.sample, schema.output, schema.route):
                conn.execute(table.delete().where(table.c.run_id == run_id))
            conn.execute(schema.run.delete().where(schema.run.c.id == run_id))

    def delete_session(self, session_id: int) -> None:
        with self.writing() as conn:
            run_ids = select(schema.run.c.id).where(schema.run.c.session_id == session_id)
            for table in (schema.token, schema.sample, schema.output, schema.route):
                conn.execute(table.delete().where(table.c.run_id.in_(run_ids)))
            conn.execute(schema.run.delete().where(schema.run.c.session_id == session_id))
            conn.execute(schema.imported_file.delete()
                         .where(schema.imported_file.c.session_id == session_id))
            conn.execute(schema.lab_cell.delete().where(schema.lab_cell.c.session_id == session_id))
            conn.execute(schema.session.delete().where(schema.session.c.id == session_id))

    def insert_route(self, run_id: int, rows: pd.DataFrame) -> None:
        """A route trace's rows (engines/route_trace.py columns) for a run, in one transaction,
        replacing any it had."""
        table = schema.route
        keys = ("run_id", "seq", *(c for c in ROUTE_COLUMNS if c in rows.columns))
        frame = rows[list(keys[2:])].astype(object).where(rows[list(keys[2:])].notna(), None)
        values = [(run_id, seq, *row) for seq, row in enumerate(frame.itertuples(index=False))]
        with self.writing() as conn:
            conn.execute(table.delete().where(table.c.run_id == run_id))
            bulk_insert(conn, table, values, keys)

    # -- reads -------------------------------------------------------------------------------
    def fetch(self, stmt: Any) -> list[Any]:
        def read(_again: bool) -> list[Any]:
            with self.reading() as conn:
                return list(conn.execute(stmt))
        return self.guard.redo("a read", read)

    def device_by_name(self, name: str) -> Any | None:
        rows = self.fetch(select(schema.device).where(schema.device.c.name == name))
        return rows[0] if rows else None

    def route_frame(self, run_id: int) -> pd.DataFrame:
        """A run's route rows in trace order (empty when it has none), integer columns as
        int64 and weight as float (NaN where the engine did not expose it)."""
        table = schema.route
        stmt = select(*(table.c[c] for c in ROUTE_COLUMNS)).where(table.c.run_id == run_id) \
            .order_by(table.c.seq)
        with self.reading() as conn:
            rows = pandas().DataFrame(conn.execute(stmt).fetchall(), columns=list(ROUTE_COLUMNS))
        if rows["dropped"].isna().all():
            rows = rows.drop(columns="dropped")
        ints = [c for c in rows.columns if c != "weight"]
        rows[ints] = rows[ints].astype("int64")
        rows["weight"] = rows["weight"].astype("float64")
        return rows

    def frame(self, table_name: str, run_ids: Iterable[int]) -> pd.DataFrame:
        """All rows of token / sample / output for these runs, as a DataFrame."""
        table = schema.metadata.tables[table_name]
        ids = list(run_ids)
        stmt = select(table).where(table.c.run_id.in_(ids)).order_by(table.c.run_id, table.c.seq)
        with self.reading() as conn:
            return pandas().read_sql(stmt, conn)
