"""The store: migrations match the schema, WAL on SQLite, URL resolution, batched writes."""
from __future__ import annotations

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import text

from orchestrator.db import schema
from orchestrator.db.runs import Runs, Sessions
from orchestrator.db.store import MIGRATIONS, Store, bulk_insert, resolve_url, revisions
from orchestrator.errors import StoreError
from orchestrator.engines.base import TOKEN_COLUMNS


def test_migrations_create_exactly_the_schema(store):
    with store.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), schema.metadata)
    assert diff == []


def test_the_revisions_orch_knows_are_alembics_chain():
    """Store.open recognises a current store from the migration files' names alone (no
    Alembic import): that list must be Alembic's own chain, oldest first."""
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    chain = [s.revision for s in ScriptDirectory.from_config(config).walk_revisions()]
    assert revisions() == chain[::-1]


def test_a_store_written_by_a_newer_orch_is_refused_in_one_line(tmp_path):
    path = tmp_path / "newer.db"
    store = Store.open(str(path))
    with store.engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '9999'"))
    store.engine.dispose()
    with pytest.raises(StoreError, match="written by a newer orch .*revision 9999"):
        Store.open(str(path))


def test_token_table_holds_the_token_columns():
    assert tuple(schema.token.c.keys()) == ("run_id", "seq", *TOKEN_COLUMNS, "extra")


def test_sqlite_is_wal(store):
    with store.engine.connect() as conn:
        assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"


def test_reopen_is_idempotent(tmp_path):
    path = str(tmp_path / "x.db")
    first = Store.open(path)
    first.upsert_device("local", "local")
    second = Store.open(path)
    assert second.device_by_name("local").kind == "local"


def test_url_resolution(monkeypatch, tmp_path):
    monkeypatch.delenv("ORCH_DB", raising=False)
    assert resolve_url(None) == "sqlite:///orch.db"
    assert resolve_url("postgresql://u@h/db") == "postgresql://u@h/db"
    monkeypatch.setenv("ORCH_DB", str(tmp_path / "env.db"))
    assert resolve_url(None) == f"sqlite:///{tmp_path / 'env.db'}"


def test_session_run_rows_roundtrip(store):
    device_id = store.upsert_device("local", "local", {"cores": "2"})
    session_id = store.create_session(kind="run", matrix_name="m")
    run_id = store.create_run(uid="u1", session_id=session_id, device_id=device_id,
                              cell_key="-|a|0", config="a", status="running")
    with store.engine.begin() as conn:
        bulk_insert(conn, schema.token, [{"run_id": run_id, "seq": i, "step": i + 1,
                                          "wall_ms": 10.0} for i in range(100)])
    assert len(store.frame("token", [run_id])) == 100
    store.update_run(run_id, status="ok")
    assert Runs(store).get(run_id).status == "ok"
    assert Runs(store).current(session_id)[0].device == "local"
    assert store.device_by_name("local").facts == {"cores": "2"}
    store.update_device(device_id, idle_baseline={"cpu_temp_mC": 41000})
    assert store.device_by_name("local").idle_baseline == {"cpu_temp_mC": 41000}
    store.set_imported_file(session_id, "a", "0" * 64)
    store.set_imported_file(session_id, "a", "1" * 64)       # replaced, not duplicated
    assert [r.sha256 for r in store.fetch(schema.imported_file.select())] == ["1" * 64]
    other = store.create_run(uid="u2", session_id=session_id, device_id=device_id,
                             cell_key="-|b|0", config="b", status="ok")
    with store.engine.begin() as conn:
        bulk_insert(conn, schema.token, [{"run_id": other, "seq": 0, "wall_ms": 1.0}])
    store.delete_run(other)
    assert Runs(store).get(other) is None and len(store.frame("token", [other])) == 0
    assert len(store.frame("token", [run_id])) == 100
    store.delete_session(session_id)
    assert Sessions(store).get(session_id) is None and len(store.frame("token", [run_id])) == 0


@pytest.mark.slow
def test_processes_opening_a_new_database_at_once_all_succeed(tmp_path):
    """`orch run` and a reader (orch report, a test watching the run, a lab worker) may open a
    new database together: one migrates it, the others must see that and go on."""
    import subprocess
    import sys

    code = "import sys; from orchestrator.db.store import Store; Store.open(sys.argv[1])"
    for trial in range(3):
        db = str(tmp_path / f"new-{trial}.db")
        procs = [subprocess.Popen([sys.executable, "-c", code, db], stderr=subprocess.PIPE,
                                  text=True) for _ in range(4)]
        errors = [p.communicate(timeout=120)[1] for p in procs]
        assert [p.returncode for p in procs] == [0, 0, 0, 0], errors
