"""db/faults.py's classify() on the drivers' own exception classes (SQLite's sqlite3, PostgreSQL's
psycopg, wrapped by SQLAlchemy as orch meets them): each fault has its kind, one line naming the
store and the cause, and its own advice ("Free the space" only for a full store). The faults
themselves, for real, are tests/test_store_faults.py's."""
from __future__ import annotations

import sqlite3

import psycopg
import psycopg.errors
import pytest
from sqlalchemy.exc import DataError, IntegrityError, OperationalError

from orchestrator.db.faults import (
    LockLost,
    StoreDeleted,
    StoreLocked,
    StoreUnreachable,
    classify,
    opening_error,
    start_error,
)
from orchestrator.errors import StoreError, StoreWriteError


def _sqlite(message: str, code: int) -> OperationalError:
    orig = sqlite3.OperationalError(message)
    orig.sqlite_errorcode = code     # set by the driver from SQLite's extended result code
    return OperationalError("INSERT INTO token ...", {}, orig)


def _pg(orig: Exception, invalidated: bool = False) -> OperationalError:
    return OperationalError("INSERT INTO token ...", {}, orig, connection_invalidated=invalidated)


CASES = [
    ("sqlite-full", _sqlite("database or disk is full", 13), "full"),
    ("sqlite-locked", _sqlite("database is locked", 5), "locked"),
    ("sqlite-io", _sqlite("disk I/O error", 10), "other"),
    ("pg-disk-full", _pg(psycopg.errors.DiskFull("could not extend file")), "full"),
    ("pg-lock-timeout", _pg(psycopg.errors.LockNotAvailable("could not obtain lock")), "locked"),
    ("pg-admin-shutdown", _pg(psycopg.errors.AdminShutdown(
        "terminating connection due to administrator command"), True), "lost"),
    ("pg-starting-up", _pg(psycopg.errors.CannotConnectNow(
        "the database system is starting up")), "lost"),
    ("pg-refused", _pg(psycopg.OperationalError(
        'connection failed: connection to server at "127.0.0.1", port 1 failed: Connection '
        'refused\n\tIs the server running on that host and accepting TCP/IP connections?')),
     "lost"),
    ("pg-timeout", _pg(psycopg.OperationalError("connection timeout expired")), "lost"),
    ("pg-closed", _pg(psycopg.OperationalError("consuming input failed: server closed the "
                                               "connection unexpectedly"), True), "lost"),
    ("pg-integer-range", DataError("INSERT", {}, psycopg.errors.NumericValueOutOfRange(
        "integer out of range")), "value"),
    ("sqlite-overflow", OverflowError("Python int too large to convert to SQLite INTEGER"),
     "value"),
    ("deleted", StoreDeleted("/tmp/s.db", "orch opened it (12:00:00 UTC)"), "deleted"),
    ("lock-lost", LockLost("session 3 is being run by another orch process right now"),
     "locked"),
    ("pg-unique", IntegrityError("INSERT", {}, psycopg.errors.UniqueViolation("duplicate")),
     "other"),
]


@pytest.mark.parametrize(("exc", "kind"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_each_fault_has_its_kind_and_one_line(exc, kind):
    fault = classify(exc, "postgresql://u@h/db")
    assert fault.kind == kind, fault
    assert "\n" not in fault.cause and "[SQL" not in fault.cause, fault.cause
    assert ("Free the space" in fault.advice) == (kind == "full"), fault.advice
    if kind != "deleted":
        assert "postgresql://u@h/db" in fault.cause


def test_the_cause_is_found_through_orchs_own_wrapper():
    wrapped = StoreWriteError("the store could not be written")
    wrapped.__cause__ = _pg(psycopg.errors.AdminShutdown("terminating connection"))
    assert classify(wrapped).kind == "lost"


def test_a_deleted_store_says_which_file_and_since_when():
    fault = classify(StoreDeleted("/srv/orch.db", "orch opened it (12:00:00 UTC)"))
    assert fault.cause == ("the store /srv/orch.db was deleted (or replaced) during the run; "
                           "rows since orch opened it (12:00:00 UTC) are lost")


def test_start_up_errors_carry_the_documented_exit_codes():
    refused = _pg(psycopg.OperationalError("connection failed: Connection refused"))
    unreachable = opening_error(refused, "postgresql://u@127.0.0.1:1/x")
    assert isinstance(unreachable, StoreUnreachable) and unreachable.exit_code == 1
    assert "cannot open the store" in str(unreachable)
    locked = start_error(_sqlite("database is locked", 5), "/tmp/s.db")
    assert isinstance(locked, StoreLocked) and locked.exit_code == 4
    assert "Free the space" not in str(locked) and "locked" in str(locked)
    other = opening_error(_sqlite("file is not a database", 26), "x.db")
    assert isinstance(other, StoreError) and other.exit_code == 2
