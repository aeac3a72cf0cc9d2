"""SSH devices, over fabric/paramiko.

- Host keys are strict: the inventory's known_hosts (else ~/.ssh/known_hosts and
  /etc/ssh/ssh_known_hosts); unknown or changed keys raise HostKeyError. ~/.ssh/config is not read.
- Commands are argv lists, each element shell-quoted, run in the resolved workdir. sshd always
  runs the login shell (Debian's bash reads ~/.bashrc even for `ssh host cmd`), so a command
  prints a random marker on stdout and stderr first and whatever came before is dropped: rc
  noise never reaches callers (slow rc files still cost their time per command). The login
  shell must be POSIX-like (sh, bash, dash, zsh, ksh, mksh; not fish or csh).
- Relative remote paths are relative to the workdir. Files (ssh_files.py) go over SFTP or,
  when large, the local scp (temp file + rename), or `cat` over exec without an sftp subsystem.
- EOF without exit status, or no answer to a keepalive probe within `dead_after` s, raises
  LinkLost; the next call reconnects by itself (Transport.reconnect(): the link policy's
  backoff, for at most its grace). Wrong host keys and credentials are AccessDenied: never
  retried.
"""
from __future__ import annotations

import logging
import os
import shlex
import socket
import threading
import time
import uuid
from pathlib import Path
from typing import Callable, Generator, Literal

import paramiko
from fabric import Config, Connection

from orchestrator.transports.base import (
    AccessDenied,
    CommandResult,
    CommandTimedOut,
    DeviceEntry,
    LinkLost,
    TransportError,
)
from orchestrator.transports.hostkeys import (
    HostKeyError,
    _RejectUnknown,
    _Unknown,
    fingerprint,
)
from orchestrator.transports.posix import PosixTransport
from orchestrator.transports.ssh_files import SshFiles

log = logging.getLogger(__name__)


class _ToDebug(logging.Handler):
    """paramiko logs a dropped link at ERROR (`Socket exception: Connection reset by peer
    (104)`) from its reader thread; with no logging set up Python would print that on the
    terminal, beside orch's own "link lost; reconnecting". orch reports link loss itself, so
    paramiko's records go to this module's logger at DEBUG (shown only when logging is set
    up for it)."""

    def emit(self, record: logging.LogRecord) -> None:
        log.debug("paramiko %s: %s", record.name, record.getMessage())


_paramiko_log = logging.getLogger("paramiko")
if not any(isinstance(h, _ToDebug) for h in _paramiko_log.handlers):
    _paramiko_log.addHandler(_ToDebug())
_paramiko_log.propagate = False
Progress = Callable[[int, int], None]
_NET = (paramiko.SSHException, OSError, EOFError)

# $1 resolved against $HOME, created; prints $HOME and the absolute path. One that exists but
# cannot be written (a read-only mount, another user's folder) prints `unwritable` and its
# path and exits 3, before a push into it fails with a misleading "no such file".
_RESOLVE = ('d=$1; case $d in "~") d=$HOME;; "~/"*) d=$HOME/${d#"~/"};; /*) ;; *) d=$HOME/$d;; '
            'esac; mkdir -p -- "$d" && cd -- "$d" || exit 1; '
            '[ -w . ] || { printf "unwritable\\n%s\\n" "$(pwd)"; exit 3; }; '
            'printf "%s\\n%s\\n" "$HOME" "$(pwd)"')


class SshEntry(DeviceEntry):
    kind: Literal["ssh"]
    host: str
    port: int = 22
    user: str | None = None
    key: str | None = None
    known_hosts: str | None = None
    jump: str | None = None

    def target(self) -> tuple[object, ...]:
        # a host behind another jump host may be another machine of the same name
        return ("ssh", self.host.lower(), self.port, self.jump)

    def home_of(self) -> str:
        return self.user or ""


class SshTransport(SshFiles, PosixTransport):
    kind = "ssh"
    entry_model = SshEntry
    default_workdir = "~/.cache/orch"

    def __init__(self, name: str, host: str, port: int = 22, user: str | None = None,
                 key: str | None = None, known_hosts: str | None = None,
                 workdir: str = "~/.cache/orch", jump: str | None = None,
                 connect_timeout: float = 10, shell: str = "sh", *, keepalive: float = 5.0,
                 dead_after: float = 15.0, env: dict[str, str] | None = None) -> None:
        super().__init__(name, workdir, shell, env)
        self.host, self.port, self.user, self.jump = host, int(port), user, jump
        self.key = str(Path(key).expanduser()) if key else None
        self.known_hosts, self.connect_timeout = known_hosts, connect_timeout
        self.keepalive, self.dead_after = keepalive, dead_after
        self.requested_workdir, self.home = workdir, "~"
        self._conn: Connection | None = None
        self._resolved = False  # connect() finished once: workdir is absolute
        self._sftp: paramiko.SFTPClient | None = None
        self._sftp_ok = True
        self._dirs: set[str] = set()
        self.last_stderr = b""  # stderr tail of the last stream()
        self.last_put_method = ""     # "scp" or "sftp" (last put of a file)

    @classmethod
    def address(cls, entry: DeviceEntry) -> str:
        assert isinstance(entry, SshEntry)  # the inventory parsed it with entry_model
        return f"{entry.user + '@' if entry.user else ''}{entry.host}:{entry.port}"

    @classmethod
    def host_key_address(cls, entry: DeviceEntry) -> tuple[str, int, str]:
        assert isinstance(entry, SshEntry)  # the inventory parsed it with entry_model
        return entry.host, entry.port, entry.known_hosts or "~/.ssh/known_hosts"

    # -- connection --------------------------------------------------------------------------
    def _host_key_files(self) -> list[Path]:
        if self.known_hosts:
            return [Path(self.known_hosts).expanduser()]
        return [Path("~/.ssh/known_hosts").expanduser(), Path("/etc/ssh/ssh_known_hosts")]

    def _connection(self, host: str, port: int | None, user: str | None,
                    gateway: Connection | None = None) -> Connection:
        kwargs: dict = dict(banner_timeout=self.connect_timeout, auth_timeout=self.connect_timeout)
        if self.key:
            kwargs.update(key_filename=[self.key], look_for_keys=False)
        if os.environ.get("ORCH_SSH_PASSWORD"):  # popped again right after connecting
            kwargs["password"] = os.environ["ORCH_SSH_PASSWORD"]
        conn = Connection(host, user=user, port=port, config=Config(lazy=True), gateway=gateway,
                          connect_timeout=self.connect_timeout, connect_kwargs=kwargs)
        for path in self._host_key_files():
            if path.is_file():
                try:
                    conn.client.load_system_host_keys(str(path))
                except (OSError, paramiko.SSHException) as exc:
                    raise HostKeyError(f"{self.name}: cannot read {path}: {exc}") from exc
        conn.client.set_missing_host_key_policy(_RejectUnknown())
        return conn

    def connect(self) -> None:
        self._drop()
        gateway = self._connection(self.jump, None, None) if self.jump else None
        self._conn = conn = self._connection(self.host, self.port, self.user, gateway)
        try:
            conn.open()
        except _NET as exc:
            self._drop()
            error = self._connect_error(exc, conn)
            raise error from (None if isinstance(error, HostKeyError) else exc)
        finally:
            for c in (conn, gateway):
                if c is not None:
                    c.connect_kwargs.pop("password", None)  # fabric would keep it
        conn.transport.set_keepalive(max(1, round(self.keepalive)))
        result = self._run([self.shell, "-c", _RESOLVE, "sh", self.requested_workdir],
                           self.connect_timeout + 30, conn=conn)
        if result.rc == 3 and result.stdout.startswith(b"unwritable\n"):
            self._drop()
            where = result.stdout.decode(errors="replace").split("\n")[1] or self.requested_workdir
            raise TransportError(f"{self.name}: workdir {where} is not writable")
        if result.rc != 0 or result.stdout.count(b"\n") < 2:
            self._drop()
            raise TransportError(f"{self.name}: cannot create workdir {self.requested_workdir}: "
                                 f"{result.stderr.decode(errors='replace').strip()}")
        self.home, self.workdir = result.stdout.decode().splitlines()[-2:]
        self._resolved = True

    def _connect_error(self, exc: Exception, conn: Connection | None = None) -> TransportError:
        where = f"{self.host}:{self.port}"
        hostname = getattr(exc, "hostname", self.host)  # paramiko's host key errors have one
        if hostname.strip("[").split("]")[0] != self.host:
            where = f"{hostname} (jump host {self.jump})"
        hint = f"run `orch devices trust {self.name}`"
        if isinstance(exc, paramiko.BadHostKeyException):
            files = " or ".join(map(str, self._host_key_files()))
            return HostKeyError(
                f"{self.name}: the host key of {where} has CHANGED: expected "
                f"{fingerprint(exc.expected_key)}, offered {exc.key.get_name()} "
                f"{fingerprint(exc.key)}. This may be an attack; if the device was reinstalled, "
                f"remove its old line from {files} and {hint}")
        if isinstance(exc, _Unknown):
            return HostKeyError(f"{self.name}: the host key of {where} is not known (offered "
                                f"{exc.key.get_name()} {fingerprint(exc.key)}); check it, "
                                f"then {hint}")
        who = f"({self.user or 'default user'}@{where}): {exc or type(exc).__name__}"
        # a port that accepts and never speaks (a hung sshd, a proxy, not an SSH server):
        # paramiko says "No existing session" or "Error reading SSH protocol banner"; the
        # transport holds no server version then
        transport = conn.client.get_transport() if conn is not None else None
        if isinstance(exc, paramiko.SSHException) and not isinstance(
                exc, paramiko.AuthenticationException) and (
                "banner" in str(exc) or (transport is not None and not transport.remote_version)):
            return TransportError(
                f"{self.name}: cannot connect ({self.user or 'default user'}@{where}): no SSH "
                f"answer within {self.connect_timeout:g} s (the port accepts connections but "
                f"says nothing: a hung sshd, or no SSH server there)")
        if isinstance(exc, paramiko.AuthenticationException):
            return AccessDenied(f"{self.name}: authentication failed {who}")
        return TransportError(f"{self.name}: cannot connect {who}")

    def _drop(self) -> None:
        conn, self._conn, self._sftp, self._dirs = self._conn, None, None, set()
        for c in (conn, conn and conn.gateway):
            if isinstance(c, Connection):
                try:
                    c.close()
                except Exception:  # noqa: BLE001 - closing a dead link must not raise
                    log.debug("%s: close failed", self.name, exc_info=True)

    def close(self) -> None:
        """Drop the connection; whatever runs detached on the device keeps running."""
        self._drop()
        self._resolved = False

    def _ensure(self) -> Connection:
        conn = self._conn
        if conn is not None and conn.transport is not None and conn.transport.is_active():
            return conn
        if self._resolved:  # was connected and the link went away
            self.reconnect()
        else:
            self.connect()
        return self._conn

    def _lost(self, what: str, exc: BaseException | None = None) -> LinkLost:
        self._drop()
        return LinkLost(f"{self.name}: connection to {self.host}:{self.port} lost during {what}"
                        + (f": {exc}" if exc else ""))

    # -- commands ----------------------------------------------------------------------------
    def _open(self, argv: list[str], conn: Connection | None) -> tuple[paramiko.Channel, bytes]:
        """Start argv (in the workdir unless on connect()'s own `conn`)."""
        if not argv:
            raise ValueError("empty argv")
        for attempt in (1, 2):
            try:
                chan = (conn or self._ensure()).transport.open_session(timeout=self.connect_timeout)
                break
            except _NET as exc:  # nothing started yet: reconnect and retry once
                lost = self._lost("open_session", exc)
                if attempt == 2 or conn is not None:
                    raise lost from exc
        marker = f"orch-{uuid.uuid4().hex}"
        line = self.command_line(argv, cwd=self.workdir if conn is None else None)
        try:
            chan.exec_command(f"printf %s {marker}; printf %s {marker} >&2; {line}")
        except _NET as exc:
            raise self._lost("exec", exc) from exc
        return chan, marker.encode()

    def _probe(self, transport: paramiko.Transport) -> threading.Event:
        """Ask the server for a reply (any reply proves the link); set when it came."""
        done = threading.Event()

        def ask() -> None:
            try:
                transport.global_request("keepalive@openssh.com", wait=True)
            except Exception:  # noqa: BLE001 - a dead link shows as no answer
                pass
            done.set()
        threading.Thread(target=ask, name=f"orch-ssh-probe-{self.name}", daemon=True).start()
        return done

    def _pump(self, chan: paramiko.Channel, marker: bytes, deadline: float | None, what: str,
              on_stderr: Callable[[bytes], object]) -> Generator[bytes, None, int]:
        """Yield stdout as it arrives, pass stderr on; return the exit status."""
        held, started = [bytearray(), bytearray()], [False, False]

        def clean(i: int, data: bytes) -> bytes:  # drop what the login shell printed first
            if started[i] or not data:
                return data
            held[i] += data
            if (at := held[i].find(marker)) < 0:
                return b""
            started[i], rest = True, bytes(held[i][at + len(marker):])
            held[i].clear()
            return rest

        transport, last_rx = chan.get_transport(), time.monotonic()
        probe, probe_t, eof = None, 0.0, False
        chan.settimeout(0.2)
        while not eof:
            now = time.monotonic()
            if deadline is not None and now > deadline:
                raise CommandTimedOut(f"{self.name}: {what} did not end in time")
            if probe is None and now - last_rx > self.dead_after:
                probe, probe_t = self._probe(transport), now
            elif probe is not None and probe.is_set():
                probe, last_rx = None, now
            elif probe is not None and now - probe_t > self.dead_after:
                raise self._lost(what, TimeoutError(f"no answer for {self.dead_after:g} s"))
            try:
                data = chan.recv(65536)
                eof, last_rx = not data, now
            except socket.timeout:
                data = b""
            except _NET as exc:
                raise self._lost(what, exc) from exc
            while chan.recv_stderr_ready():
                last_rx = now
                on_stderr(clean(1, chan.recv_stderr(65536)))
            if data := clean(0, data):
                yield data
        if held[0] and not started[0]:  # the marker never came (odd shell): pass all on
            yield bytes(held[0])
        if held[1] and not started[1]:
            on_stderr(bytes(held[1]))
        return self._exit_status(chan, transport, what)

    def _exit_status(self, chan: paramiko.Channel, transport: paramiko.Transport,
                     what: str) -> int:
        """The status of a command whose output ended (waiting up to 5 s for it to come)."""
        end = time.monotonic() + 5
        while not chan.status_event.wait(0.1) and transport.is_active() and time.monotonic() < end:
            pass
        if chan.exit_status == -1:  # closed without an exit status: the link went away
            raise self._lost(what)
        return chan.exit_status

    def _run(self, argv: list[str], timeout: float | None, conn: Connection | None = None,
             stdin=None, progress: Progress | None = None, size: int = 0) -> CommandResult:
        chan, marker = self._open(argv, conn)
        out, err, done = bytearray(), bytearray(), 0
        try:
            try:
                chan.settimeout(max(60.0, 2 * self.dead_after))  # a hung link must not block
                while stdin is not None and (chunk := stdin.read(1 << 18)):
                    chan.sendall(chunk)
                    done += len(chunk)
                    if progress:
                        progress(done, size)
                chan.shutdown_write()
            except _NET as exc:
                raise self._lost(f"upload to `{argv[0]}`", exc) from exc
            deadline = None if timeout is None else time.monotonic() + timeout
            pump = self._pump(chan, marker, deadline, f"`{shlex.join(argv)[:80]}`", err.extend)
            while True:
                try:
                    out += next(pump)
                except StopIteration as stop:
                    return CommandResult(stop.value, bytes(out), bytes(err))
        finally:
            chan.close()

    def run(self, argv: list[str], timeout: float = 60.0) -> CommandResult:
        return self._run(argv, timeout)

    def stream(self, argv: list[str]) -> Generator[bytes, None, int | None]:
        """Yield stdout chunks as they arrive; the generator returns the exit status."""
        chan, marker = self._open(argv, None)
        self.last_stderr = b""

        def keep_tail(data: bytes) -> None:
            self.last_stderr = (self.last_stderr + data)[-65536:]
        try:
            return (yield from self._pump(chan, marker, None, f"stream `{shlex.join(argv)[:80]}`",
                                          keep_tail))
        finally:
            chan.close()

    def describe(self) -> str:
        return f"ssh:{self.name} ({self.user + '@' if self.user else ''}{self.host}:{self.port})"
