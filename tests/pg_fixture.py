"""A private PostgreSQL server on 127.0.0.1 for the store tests (a lab shares one database).

    from pg_fixture import pg_url, fresh_pg_database   # registered in conftest.py

`pg_url` (session scope) starts one real server (the Debian package's binaries, as the
postgres user, trust authentication on loopback) with one database `orch`, and yields
`postgresql+psycopg://postgres@127.0.0.1:PORT/orch`. Tests sharing it see each other's rows;
`fresh_pg_database(pg_url, name)` creates a new empty database on the same server and returns
its URL, for a test (or module) that needs a clean store.

Missing PostgreSQL, root + runuser, or psycopg: the tests are skipped, unless CI=true (or
1/yes), where that is a failure.
"""
from __future__ import annotations

import contextlib
import glob
import os
import re
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from ci import unavailable


def _unavailable(why: str) -> None:
    unavailable(f"PostgreSQL test cannot run: {why} (scripts/install --test installs it)")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


_servers: dict[int, tuple[str, Path]] = {}   # port -> (binaries, root) of pg_url's servers


def _psql(port: int, sql: str) -> None:
    subprocess.run(["psql", "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "-v",
                    "ON_ERROR_STOP=1", "-c", sql], check=True, capture_output=True, timeout=30)


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    bins = sorted(glob.glob("/usr/lib/postgresql/*/bin"))
    if not bins:
        _unavailable("postgresql is not installed")
    if os.geteuid() != 0 or shutil.which("runuser") is None:
        _unavailable("the test starts its server as the postgres user: needs root and runuser")
    try:
        import psycopg  # noqa: F401
    except ImportError:
        _unavailable("psycopg is not installed")
    pg = bins[-1]
    root = Path(tempfile.mkdtemp(prefix="orch-pg-"))
    shutil.chown(root, "postgres")
    port = _free_port()
    as_pg = ["runuser", "-u", "postgres", "--"]
    try:
        subprocess.run(as_pg + [f"{pg}/initdb", "-D", f"{root}/data", "--auth=trust", "-U",
                                "postgres"], check=True, capture_output=True, timeout=120)
        subprocess.run(as_pg + [f"{pg}/pg_ctl", "-D", f"{root}/data", "-l", f"{root}/log", "-w",
                                "-o", f"-p {port} -k {root} -c listen_addresses=127.0.0.1",
                                "start"], check=True, capture_output=True, timeout=60)
        try:
            _psql(port, "create database orch")
            _servers[port] = (pg, root)   # for restart_pg_server
            yield f"postgresql+psycopg://postgres@127.0.0.1:{port}/orch"
        finally:
            subprocess.run(as_pg + [f"{pg}/pg_ctl", "-D", f"{root}/data", "-m", "immediate",
                                    "stop"], check=False, capture_output=True, timeout=60)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def fresh_pg_database(pg_url: str, name: str) -> str:
    """Create the empty database `name` on pg_url's server (dropping one left by an earlier
    call with the same name) and return its URL."""
    if not re.fullmatch(r"[a-z_][a-z0-9_]{0,62}", name):
        raise ValueError(f"database name {name!r}: lower-case letters, digits and _ only")
    match = re.search(r"@127\.0\.0\.1:(\d+)/", pg_url)
    if match is None:
        raise ValueError(f"not a pg_url of this fixture: {pg_url}")
    port = int(match.group(1))
    _psql(port, f"drop database if exists {name} with (force)")
    _psql(port, f"create database {name}")
    return pg_url[: match.end()] + name


@contextlib.contextmanager
def pg_server_down(pg_url: str) -> Iterator[None]:
    """pg_url's server stopped (a fast stop: every client connection is cut) for the block,
    then started again on the same port; the block ends when the test's event happened (an
    orch that gave up on it), so the outage lasts as long as that takes."""
    pg, root, port = _server(pg_url)
    as_pg = ["runuser", "-u", "postgres", "--"]
    subprocess.run(as_pg + [f"{pg}/pg_ctl", "-D", f"{root}/data", "-m", "fast", "-w", "stop"],
                   check=True, capture_output=True, timeout=60)
    try:
        yield
    finally:
        subprocess.run(as_pg + [f"{pg}/pg_ctl", "-D", f"{root}/data", "-l", f"{root}/log",
                                "-w", "-o", f"-p {port} -k {root} -c listen_addresses=127.0.0.1",
                                "start"], check=True, capture_output=True, timeout=60)


@contextlib.contextmanager
def pg_server_frozen(pg_url: str) -> Iterator[None]:
    """pg_url's server stopped with SIGSTOP for the block, postmaster and every backend: its
    kernel still accepts and acknowledges, nothing answers (a hung server, a frozen VM); the
    block ends when the test's event happened, then every process goes on (SIGCONT)."""
    import signal

    _pg, root, _port = _server(pg_url)
    postmaster = int((root / "data" / "postmaster.pid").read_text().split()[0])

    def cluster() -> list[int]:
        pids = [postmaster]
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    stat = (entry / "stat").read_text()
                except OSError:
                    continue
                if int(stat.rsplit(")", 1)[1].split()[1]) == postmaster:
                    pids.append(int(entry.name))
        return pids

    os.kill(postmaster, signal.SIGSTOP)      # first: it forks no new backend meanwhile
    stopped = cluster()
    for pid in stopped[1:]:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in reversed(stopped):
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass


def _server(pg_url: str) -> tuple[str, Path, int]:
    match = re.search(r"@127\.0\.0\.1:(\d+)/", pg_url)
    if match is None or int(match.group(1)) not in _servers:
        raise ValueError(f"not a pg_url of this fixture: {pg_url}")
    port = int(match.group(1))
    return (*_servers[port], port)


def restart_pg_server(pg_url: str, down_s: float = 3.0) -> None:
    """Restart pg_url's server for real, as an operator's restart does: a fast stop (every
    client connection is cut), `down_s` seconds down (the outage being tested, not a wait for
    an event), then started again on the same port; returns once it accepts connections."""
    import time

    match = re.search(r"@127\.0\.0\.1:(\d+)/", pg_url)
    if match is None or int(match.group(1)) not in _servers:
        raise ValueError(f"not a pg_url of this fixture: {pg_url}")
    port = int(match.group(1))
    pg, root = _servers[port]
    as_pg = ["runuser", "-u", "postgres", "--"]
    subprocess.run(as_pg + [f"{pg}/pg_ctl", "-D", f"{root}/data", "-m", "fast", "-w", "stop"],
                   check=True, capture_output=True, timeout=60)
    time.sleep(down_s)
    subprocess.run(as_pg + [f"{pg}/pg_ctl", "-D", f"{root}/data", "-l", f"{root}/log", "-w",
                            "-o", f"-p {port} -k {root} -c listen_addresses=127.0.0.1",
                            "start"], check=True, capture_output=True, timeout=60)
