"""Which errors the lab waits out (a lost store, a silent broker) and which it does not:
lab/store_retry.py and lab/app.py's rules, on the real drivers' exception classes."""
from __future__ import annotations

import socket
import sqlite3

import psycopg
import pytest
from sqlalchemy.exc import IntegrityError, OperationalError

from orchestrator.errors import StoreWriteError
from orchestrator.lab.app import is_timeout
from orchestrator.lab.store_retry import StoreGone, lost_store, with_store


def _pg_lost() -> OperationalError:
    return OperationalError("SELECT 1", {}, psycopg.OperationalError(
        "connection failed: Connection refused"))


def test_a_lost_server_is_waited_out_and_a_local_file_or_a_constraint_is_not():
    assert lost_store(_pg_lost())
    wrapped = StoreWriteError("the store could not be written")
    wrapped.__cause__ = _pg_lost()
    assert lost_store(wrapped)                   # the runner's wrapper, seen through
    locked = OperationalError("INSERT", {}, sqlite3.OperationalError("database is locked"))
    assert not lost_store(locked)                # SQLite's answer, not an outage
    assert not lost_store(IntegrityError("INSERT", {}, psycopg.IntegrityError("dup")))
    gone = StoreGone("the store was unreachable for 1 s")
    gone.__context__ = _pg_lost()
    assert not lost_store(gone)                  # the grace is over: no more waiting
    assert not lost_store(ValueError("x"))


def test_with_store_repeats_a_step_only_while_the_store_is_lost():
    calls = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 2:
            raise _pg_lost()
        return "answered"
    assert with_store(flaky, 30.0, "test") == "answered" and len(calls) == 2

    def refused() -> None:
        calls.append(1)
        raise IntegrityError("INSERT", {}, psycopg.IntegrityError("dup"))
    calls.clear()
    with pytest.raises(IntegrityError):
        with_store(refused, 30.0, "test")
    assert len(calls) == 1


def test_a_broker_timeout_is_told_from_a_refusal():
    import redis
    from kombu.exceptions import OperationalError as KombuOperationalError

    assert is_timeout(redis.exceptions.TimeoutError("Timeout reading from socket"))
    assert is_timeout(socket.timeout("timed out"))
    wrapped = KombuOperationalError("Timeout reading from socket")
    wrapped.__cause__ = redis.exceptions.TimeoutError("Timeout reading from socket")
    assert is_timeout(wrapped)
    assert not is_timeout(ConnectionRefusedError(111, "Connection refused"))
    assert not is_timeout(redis.exceptions.ConnectionError("Error 111 connecting"))
