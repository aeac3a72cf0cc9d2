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

import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import waiting
from ci import require_extra, unavailable

START_TIMEOUT = 20.0  # seconds until the server must answer PING


def _unavailable(reason: str) -> None:
    unavailable(f"redis fixture: {reason} (scripts/install --test installs it)")


def _redis_server() -> str:
    path = shutil.which("redis-server")
    if path is None and os.access("/usr/bin/redis-server", os.X_OK):
        path = "/usr/bin/redis-server"
    if path is None:
        _unavailable("redis-server is not installed")
    return path


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def _wait_for_ping(proc: subprocess.Popen, url: str, log: Path) -> None:
    """Poll PING until the server answers; fail at once if it exited (e.g. port taken)."""
    import redis

    client = redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=1)

    def answers() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"redis-server exited with {proc.returncode}: "
                               f"{log.read_text(errors='replace')[-2000:]}")
        try:
            return bool(client.ping())
        except redis.exceptions.ConnectionError:
            return False
    try:
        if waiting.wait_until(answers, START_TIMEOUT):
            return
        raise RuntimeError(f"redis-server did not answer PING within {START_TIMEOUT:.0f}s: "
                           f"{log.read_text(errors='replace')[-2000:]}")
    finally:
        client.close()


def start_redis(directory: Path) -> tuple[subprocess.Popen, str]:
    """Start a redis-server in `directory` on a free loopback port; (process, url) once it
    answers PING. The caller stops the process (see `_stop`)."""
    binary = _redis_server()
    require_extra("lab")   # the redis client comes with it (celery[redis])
    port = _free_port()
    log = directory / "redis.log"
    url = f"redis://127.0.0.1:{port}/0"
    # no persistence (--save '' --appendonly no): a test broker starts empty every session
    argv = [binary, "--port", str(port), "--bind", "127.0.0.1", "--protected-mode", "yes",
            "--daemonize", "no", "--save", "", "--appendonly", "no", "--dir", str(directory),
            "--logfile", str(log)]
    proc = subprocess.Popen(argv, cwd=directory, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for_ping(proc, url, log)
    except BaseException:
        _stop(proc)
        raise
    return proc, url


def flush(url: str) -> None:
    """Empty the database of `url` (FLUSHDB): queued tasks and keys of earlier tests go."""
    import redis

    client = redis.Redis.from_url(url)
    try:
        client.flushdb()
    finally:
        client.close()


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
