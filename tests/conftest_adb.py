"""pytest plugin module: a private REAL adb server plus an EmulatedPhone attached to it.

Use from tests/conftest.py (or a test module):
    from conftest_adb import adb_server, phone, adb_device  # noqa: F401  (fixtures)
Fixtures:
  adb_server (session): port (int) of a private `adb -P PORT server nodaemon` (HOME=<tmp>,
             ADB_MDNS=0); killed at the end of the session.
  phone:     a started EmulatedPhone (root under tmp_path) connected to adb_server and in state
             `device`; `.adb_port` is the server's port. Disconnected and closed afterwards.
  adb_device: adbutils device for `phone` (socket_timeout=10).
Helpers: adb(port, *args) runs the CLI; device_state(); wait_for_state(); attach().
Missing adb/mksh/toybox: skip, or fail when CI=true (as tests/conftest.py's require_tool).
"""
from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time

import pytest
import waiting
from ci import unavailable

try:
    from .adb_emulator import EmulatedPhone
except ImportError:
    from adb_emulator import EmulatedPhone

TOOLS = ("adb", "mksh", "toybox")


def require_adb_stack() -> None:
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        msg = f"adb test stack missing: {', '.join(missing)} (apt-get install adb mksh toybox)"
        unavailable(msg)


def wait_until(pred, timeout: float = 10.0, step: float = 0.05) -> bool:
    """Poll pred() until it holds or timeout (bounded; tests/waiting.py)."""
    return waiting.wait_until(pred, timeout, step)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def adb(port: int, *args: str, timeout: float = 30, input: bytes | None = None,
        text: bool = True) -> subprocess.CompletedProcess:
    """Run the adb CLI against the private server (never lets it start another one on 5037)."""
    env = {**os.environ, "ADB_MDNS": "0", "ANDROID_ADB_SERVER_PORT": str(port)}
    env.pop("ANDROID_SERIAL", None)
    return subprocess.run(["adb", "-P", str(port), *args], env=env, capture_output=True,
                          timeout=timeout, input=input if input is not None else (
                              "" if text else b""), text=text)


def _server_answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            s.sendall(b"000chost:version")
            return s.recv(4) == b"OKAY"
    except OSError:
        return False


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


@contextlib.contextmanager
def with_adb_server(timeout: float = 20.0):
    """Start a private real adb server on a free port; yield the port; kill it at the end."""
    home = tempfile.mkdtemp(prefix="orch-adb-home-")
    proc = None
    try:
        for _attempt in range(3):  # the free port may be taken between probe and bind
            port = free_port()
            env = {**os.environ, "HOME": home, "ADB_MDNS": "0"}
            with open(os.path.join(home, "adb-server.log"), "ab") as log:
                proc = subprocess.Popen(["adb", "-P", str(port), "server", "nodaemon"], env=env,
                                        stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                        start_new_session=True)
            waiting.wait_until(lambda: proc.poll() is not None or _server_answers(port), timeout)
            if proc.poll() is None and _server_answers(port):
                break
            _stop(proc)
        else:
            with open(os.path.join(home, "adb-server.log"), errors="replace") as f:
                raise RuntimeError(f"adb server did not start: {f.read()[-2000:]}")
        yield port
    finally:
        if proc is not None:
            _stop(proc)
        shutil.rmtree(home, ignore_errors=True)


def device_state(port: int, serial: str) -> str | None:
    """'device', 'offline', ... or None when the server does not list the serial."""
    for line in adb(port, "devices", timeout=10).stdout.splitlines():
        name, _, state = line.partition("\t")
        if name == serial:
            return state.strip()
    return None


def wait_for_state(port: int, serial: str, want, timeout: float = 15.0, reconnect: bool = False) -> str | None:
    """Poll until the state is `want` (a value or a tuple of values); bounded by `timeout`.
    reconnect=True also runs `adb connect` every second (after `adb disconnect` if offline): the
    server's own retries come only every ~10 s and it forgets the device after ~60 s offline."""
    wants = want if isinstance(want, tuple) else (want,)
    deadline, next_connect = time.monotonic() + timeout, 0.0
    while True:
        st = device_state(port, serial)
        if st in wants or time.monotonic() > deadline:
            return st
        if reconnect and time.monotonic() >= next_connect:
            if st == "offline":  # adb 29 answers `connect` with "already connected" then
                adb(port, "disconnect", serial, timeout=10)
            adb(port, "connect", serial, timeout=10)
            next_connect = time.monotonic() + 1.0
        time.sleep(0.05)


def attach(port: int, phone: EmulatedPhone, timeout: float = 15.0) -> None:
    phone.adb_port = port
    st = wait_for_state(port, phone.serial, "device", timeout=timeout, reconnect=True)
    if st != "device":
        raise TimeoutError(f"{phone.serial} is {st!r} after {timeout} s, not 'device'")


@pytest.fixture(scope="session")
def adb_server():
    require_adb_stack()
    with with_adb_server() as port:
        yield port


@pytest.fixture
def phone(adb_server, tmp_path):
    require_adb_stack()
    ph = EmulatedPhone(root=str(tmp_path / "phone"))
    try:
        ph.start()
        attach(adb_server, ph)
        yield ph
    finally:
        try:
            adb(adb_server, "disconnect", ph.serial, timeout=10)
        finally:
            ph.close()


@pytest.fixture
def adb_device(phone):
    import adbutils

    client = adbutils.AdbClient(host="127.0.0.1", port=phone.adb_port, socket_timeout=10)
    return client.device(phone.serial)
