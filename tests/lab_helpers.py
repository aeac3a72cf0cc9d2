"""Lab tests' parts: `orch lab worker` processes (started and always stopped by the test),
matrices with the fake bmoe engine, and waits on the store that end on an event."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import waiting
from sqlalchemy import text

from orchestrator.db.store import Store

TESTS = Path(__file__).resolve().parent
ORCH = Path(sys.executable).with_name("orch")


def matrix(workspace: Path, name: str, tokens: int = 10, delay: float = 0.02,
           repeat: int = 2, order: str = "interleaved") -> Path:
    """A two-config fake-bmoe matrix: `tokens` tokens of `delay` seconds per cell."""
    path = workspace / f"{name}.yaml"
    path.write_text(textwrap.dedent(f"""\
        name: {name}
        engine: bmoe
        binary: {{local: {TESTS / 'engines' / 'fake_bmoe.sh'}}}
        models: {{m: /m.gguf}}
        prompt: p
        tokens: {tokens}
        repeat: {repeat}
        order: {order}
        sample_interval: 0.2s
        configs:
          first: --delay {delay}
          second: --delay {delay / 2:g}
        """))
    return path


def inventory(workspace: Path, name: str, devices: list[str], extra: str = "") -> Path:
    """An inventory file of local devices with their own workdirs (plus `extra` entries)."""
    path = workspace / f"{name}.yaml"
    lines = ["devices:"] + [f"  {d}: {{kind: local, workdir: {workspace / ('wd-' + d)}}}"
                            for d in devices]
    path.write_text("\n".join(lines) + "\n" + extra)
    return path


class Worker:
    """One `orch lab worker` process in its own session (so a SIGKILL hits only it: its
    consumers must die by themselves)."""

    def __init__(self, workspace: Path, name: str, inventory_file: Path, broker: str, db: str,
                 *options: str) -> None:
        self.workspace, self.name = workspace, name
        self.argv = [str(ORCH), "lab", "worker", "--name", name, "-i", str(inventory_file),
                     "--broker", broker, "--db", db, "--log-dir", str(workspace / f"logs-{name}"),
                     *options]
        self.proc: subprocess.Popen | None = None
        self.out = workspace / f"worker-{name}.out"

    def start(self) -> Worker:
        with open(self.out, "ab") as out:
            self.proc = subprocess.Popen(self.argv, cwd=self.workspace, stdout=out,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True)
        return self

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        """SIGTERM (consumers end after their cell), then KILL of the whole group."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=30)

    def log(self) -> str:
        text_ = self.out.read_text(errors="replace") if self.out.exists() else ""
        for path in sorted((self.workspace / f"logs-{self.name}").glob("*.log")):
            text_ += f"\n--- {path.name}\n" + path.read_text(errors="replace")[-4000:]
        return text_[-12000:]


def consumer_pids(worker: str) -> list[int]:
    """Live consumer processes of worker `worker` (read from /proc)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"orchestrator.lab.consumer" in argv and worker.encode() in argv:
            pids.append(int(entry.name))
    return pids


def wait_for(what: str, predicate: Callable[[], object], timeout: float = 120.0,
             on_fail: Callable[[], str] | None = None) -> object:
    """Poll until predicate() is truthy (bounded); the timeout only ends a broken test."""
    return waiting.wait_for(predicate, timeout, 0.1, what=what, on_fail=on_fail)


def registered(store: Store, names: list[str]) -> bool:
    rows = store.fetch(text("SELECT name, pid FROM lab_device"))
    live = {r.name for r in rows if r.pid is not None}
    return set(names) <= live


def processes_mentioning(needle: str) -> list[int]:
    """Live processes whose command line mentions `needle` (a test's workspace: its engines,
    agents and consumers), from /proc; zombies are dead and not counted."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            argv = (entry / "cmdline").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state != "Z" and needle.encode() in argv:
            pids.append(int(entry.name))
    return pids


class SilentPeer:
    """A TCP server on 127.0.0.1 that accepts every connection and never says a word (a hung
    broker, a proxy on the wrong port). `with SilentPeer() as peer:` ... `peer.port`; closed
    (its thread ended, its sockets closed) at the end."""

    def __init__(self) -> None:
        import socket
        import threading

        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.accepted: list[socket.socket] = []
        self.thread = threading.Thread(target=self._accept, name="silent-peer", daemon=True)

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:   # closed: the test is over
                return
            self.accepted.append(conn)

    def __enter__(self) -> SilentPeer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        import socket

        try:
            self.server.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.server.close()
        self.thread.join(timeout=10)
        for conn in self.accepted:
            conn.close()
        assert not self.thread.is_alive()
