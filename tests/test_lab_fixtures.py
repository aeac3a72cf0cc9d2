"""The lab's real parts started by the tests: a private redis-server (the broker) and fresh
databases on the private PostgreSQL server (the shared store)."""
from __future__ import annotations

from pg_fixture import fresh_pg_database
from redis_fixture import flush


def test_redis_fixture_answers_and_flushes(redis_url):
    import redis

    assert redis_url.startswith("redis://127.0.0.1:") and redis_url.endswith("/0")
    client = redis.Redis.from_url(redis_url)
    try:
        client.set("orch-fixture", "yes")
        assert client.get("orch-fixture") == b"yes"
        flush(redis_url)
        assert client.get("orch-fixture") is None and client.dbsize() == 0
    finally:
        client.close()


def test_redis_db_is_empty(redis_db):
    import redis

    client = redis.Redis.from_url(redis_db)
    try:
        assert client.dbsize() == 0
    finally:
        client.close()


def test_fresh_pg_database_is_empty_and_separate(pg_url):
    import sqlalchemy as sa

    from orchestrator.db.store import Store

    Store.open(pg_url)  # the shared database gets the store's tables
    url = fresh_pg_database(pg_url, "lab_fixture_probe")
    assert url.endswith("/lab_fixture_probe") and url != pg_url
    engine = sa.create_engine(url)
    try:
        assert sa.inspect(engine).get_table_names() == []
        Store.open(url)
        assert "run" in sa.inspect(engine).get_table_names()
    finally:
        engine.dispose()
    # asked again, the same name is emptied again
    again = fresh_pg_database(pg_url, "lab_fixture_probe")
    engine = sa.create_engine(again)
    try:
        assert sa.inspect(engine).get_table_names() == []
    finally:
        engine.dispose()
