"""A private OpenSSH server on 127.0.0.1: the server itself, without a test runner.

tests/sshd_fixture.py wraps it in pytest fixtures (and documents the server object); the
benches that measure over SSH (bench/push, bench/cell_overhead) start it from here, so they
run after the plain install, without pytest (tests/test_startup.py checks that no bench
imports pytest, directly or through a tests/ module).
"""
from __future__ import annotations

import getpass
import os
import signal
import socket
import subprocess
from pathlib import Path

import waiting

SSHD = "/usr/sbin/sshd"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _ppid(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # "pid (comm) state ppid ...": comm may contain spaces and parentheses
    return int(stat[stat.rindex(")") + 2 :].split()[1])


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


class Sshd:
    host = "127.0.0.1"

    def __init__(self, directory: Path, *, sftp: bool = True, setenv: dict[str, str] | None = None,
                 extra_config: str = "") -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.user = getpass.getuser()
        self.port = _free_port()
        self.proc: subprocess.Popen | None = None
        self.host_key = self.dir / "host_ed25519"
        self.key = self.dir / "client_ed25519"
        for path in (self.host_key, self.key):
            if not path.exists():
                subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "orch-test",
                                "-f", str(path)], check=True, timeout=30)
        self.authorized_keys = self.dir / "authorized_keys"
        self.authorized_keys.write_text(Path(f"{self.key}.pub").read_text())
        self.host_pub = " ".join(Path(f"{self.host_key}.pub").read_text().split()[:2])
        self.known_hosts = self.dir / "known_hosts"
        self.known_hosts.write_text(f"[{self.host}]:{self.port} {self.host_pub}\n")
        self.log = self.dir / "sshd.log"
        self.config = self.dir / "sshd_config"
        lines = [
            f"Port {self.port}",
            f"ListenAddress {self.host}",
            f"HostKey {self.host_key}",
            f"PidFile {self.dir / 'sshd.pid'}",
            f"AuthorizedKeysFile {self.authorized_keys}",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "UsePAM no",
            "StrictModes no",
            "PermitRootLogin prohibit-password",
            "UseDNS no",
            "MaxStartups 100",
            "MaxSessions 50",
        ]
        if sftp:
            lines.append("Subsystem sftp internal-sftp")
        if setenv:
            lines.append("SetEnv " + " ".join(f"{k}={v}" for k, v in setenv.items()))
        self.config.write_text("\n".join(lines) + "\n" + extra_config)

    # -- lifecycle ---------------------------------------------------------------------------
    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc and self.proc.poll() is None else None

    def start(self, timeout: float = 10.0) -> None:
        if self.pid:
            return
        if os.geteuid() == 0:
            os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
        log = open(self.log, "ab")
        try:
            self.proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(self.config)],
                                         stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        finally:
            log.close()
        def listening() -> bool:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sshd exited with {self.proc.returncode}: "
                                   f"{self.log.read_text()[-2000:]}")
            try:
                with socket.create_connection((self.host, self.port), timeout=0.5):
                    return True
            except OSError:
                return False
        if not waiting.wait_until(listening, timeout):
            self.stop()
            raise RuntimeError(f"sshd did not listen on {self.port} within {timeout}s")

    def stop(self) -> None:
        if self.proc is None:
            return
        # Stop listening first: a client reconnecting between the connection kill and the
        # listener's end would otherwise get a session that outlives stop().
        # (SIGSTOP: it can neither accept nor fork; SIGKILL: it dies with its backlog unaccepted)
        os.kill(self.proc.pid, signal.SIGSTOP)
        children = self.connection_pids()
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=5)
        for pid in children:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        # let the listener reap them: no zombies left behind
        waiting.wait_until(lambda: not any(Path(f"/proc/{p}").exists() for p in children), 2, 0.02)
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        self.proc = None

    # -- link faults -------------------------------------------------------------------------
    def connection_pids(self) -> list[int]:
        """All sshd processes below the listener (the privileged monitor and the session
        process of every connection); not the user's commands."""
        root = self.pid
        if root is None:
            return []
        parents: dict[int, int] = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                ppid = _ppid(int(entry))
                if ppid is not None:
                    parents[int(entry)] = ppid
        found: list[int] = []
        frontier = {root}
        for _ in range(10):  # bounded depth
            children = [p for p, pp in parents.items() if pp in frontier and _comm(p) == "sshd"]
            if not children:
                break
            found.extend(children)
            frontier = set(children)
        return found

    def _signal_connections(self, sig: int) -> list[int]:
        pids = self.connection_pids()
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        return pids

    def kill_connections(self) -> list[int]:
        return self._signal_connections(signal.SIGKILL)

    def pause_connections(self) -> list[int]:
        return self._signal_connections(signal.SIGSTOP)

    def resume_connections(self) -> list[int]:
        return self._signal_connections(signal.SIGCONT)

    def transport_kwargs(self) -> dict:
        return dict(host=self.host, port=self.port, user=self.user, key=str(self.key),
                    known_hosts=str(self.known_hosts))
