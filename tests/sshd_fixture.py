"""A private OpenSSH server on 127.0.0.1 for transport tests.

    from sshd_fixture import sshd, sshd_factory   # or list the module in conftest's pytest_plugins

`sshd` (session scope) is one server; `sshd_factory(**options)` starts extra, differently
configured servers that are stopped at the end of the test. Each server object has
`host`, `port`, `user`, `key` (client private key), `known_hosts` (a file trusting its host
key), `host_pub` (the host public key line), `dir`, `log`, `pid`, and:

- `kill_connections()`   SIGKILL the per-connection sshd processes: the client sees link loss
                         at once; commands running under them get EOF/SIGPIPE, detached ones live on
- `pause_connections()` / `resume_connections()`  SIGSTOP/SIGCONT them: a hung link (no FIN,
                         no RST) that only timeouts or keepalive probes can notice
- `stop()` / `start()`   make the device unreachable (connections refused) and bring it back
                         on the same port with the same host key
- `transport_kwargs()`   dict(host, port, user, key, known_hosts) for SshTransport

Missing sshd: the tests are skipped, unless CI=true (or 1/yes), where that is a failure.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from ci import unavailable
from sshd_server import SSHD, Sshd  # the server: plain Python, the benches use it too


def _unavailable(reason: str) -> None:
    unavailable(f"sshd fixture: {reason}")


def _check_available() -> None:
    if not Path(SSHD).exists():
        _unavailable(f"{SSHD} is not installed")
    if not shutil.which("ssh-keygen"):
        _unavailable("ssh-keygen is not installed")


def _start(directory: Path, **options) -> Sshd:
    server = Sshd(directory, **options)
    try:
        server.start()
    except RuntimeError as exc:
        _unavailable(str(exc))
    return server


@pytest.fixture(scope="session")
def sshd(tmp_path_factory):
    _check_available()
    server = _start(tmp_path_factory.mktemp("sshd"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def sshd_factory(tmp_path):
    """Start extra servers: `sshd_factory(sftp=False)`, `sshd_factory(setenv={...})`."""
    _check_available()
    servers: list[Sshd] = []

    def make(**options) -> Sshd:
        server = _start(tmp_path / f"sshd{len(servers)}", **options)
        servers.append(server)
        return server

    try:
        yield make
    finally:
        for server in servers:
            server.stop()
