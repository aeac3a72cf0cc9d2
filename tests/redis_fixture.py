"""A private redis-server on 127.0.0.1 for the lab tests (the Celery broker).

    from redis_fixture import redis_url, redis_db, flush   # registered in conftest.py

`redis_url` (session scope) starts one real `redis-server` (the Debian package's binary, never
its system service) on a free loopback port in a temporary directory, without persistence, and
yields `redis://127.0.0.1:PORT/0`. `redis_db` (function scope) is the same URL after FLUSHDB,
for a test that needs an empty broker; `flush(url)` does the same from anywhere.

Missing redis-server or orch's `lab` extra (celery[redis], which brings the `redis` client): the
tests are skipped, unless CI=true (or 1/yes), where that is a failure.
"""
from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from ci import require_extra, unavailable

# The server itself is started by bench/_broker.py's plain functions (no pytest there), which
# bench/lab uses too: the benches run without the test extra.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import _broker
from _broker import flush  # re-exported: tests call redis_fixture.flush

_stop = _broker.stop


def _unavailable(reason: str) -> None:
    unavailable(f"redis fixture: {reason} (scripts/install --test installs it)")


def start_redis(directory: Path) -> tuple[object, str]:
    """Start a redis-server in `directory` on a free loopback port; (process, url) once it
    answers PING. The caller stops the process (see `_stop`). Without redis-server or the lab
    extra: skipped, or a failure under CI."""
    if _broker.redis_binary() is None:
        _unavailable("redis-server is not installed")
    require_extra("lab")   # the redis client comes with it (celery[redis])
    return _broker.start_redis(directory)


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    directory = Path(tempfile.mkdtemp(prefix="orch-redis-"))
    try:
        proc, url = start_redis(directory)
        try:
            yield url
        finally:
            _stop(proc)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def redis_db(redis_url: str) -> str:
    """The session's broker URL, emptied for this test."""
    flush(redis_url)
    return redis_url
