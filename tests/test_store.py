"""The store: migrations match the schema, WAL on SQLite, URL resolution, batched writes."""
from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from orchestrator.db import schema
from orchestrator.db.store import Store, resolve_url
from sqlalchemy import text


def test_migrations_create_exactly_the_schema(store):
    with store.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), schema.metadata)
    assert diff == []


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
    store.insert_rows("token", [{"run_id": run_id, "seq": i, "step": i + 1, "wall_ms": 10.0}
                                for i in range(100)])
    assert store.token_count(run_id) == 100
    store.update_run(run_id, status="ok")
    assert store.run_row(run_id).status == "ok"
    assert store.runs(session_id)[0].device == "local"
    assert store.device_by_name("local").facts == {"cores": "2"}
    store.delete_session(session_id)
    assert store.token_count(run_id) == 0
