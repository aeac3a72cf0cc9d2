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
_servers: dict[str, tuple[object, Path]] = {}   # url -> (process, directory) of redis_url


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
        _servers[url] = (proc, directory)     # restart_redis replaces the process
        try:
            yield url
        finally:
            _stop(_servers.pop(url, (proc, directory))[0])
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def redis_db(redis_url: str) -> str:
    """The session's broker URL, emptied for this test."""
    flush(redis_url)
    return redis_url


def restart_redis(url: str, down_s: float = 2.0) -> None:
    """Restart redis_url's server for real, without persistence (as the fixture runs it): every
    client connection is cut and every message it held is gone; `down_s` seconds down (the
    outage being tested), then a new server on the same port; returns once it answers PING."""
    import time

    proc, directory = _servers[url]
    _stop(proc)
    time.sleep(down_s)
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    new, again = _broker.start_redis(directory, port=port)
    assert again == url, (again, url)
    _servers[url] = (new, directory)
