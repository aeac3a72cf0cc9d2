"""SSH devices (DESIGN §5), over fabric/paramiko.

- Host keys are strict: the inventory's known_hosts (else ~/.ssh/known_hosts and
  /etc/ssh/ssh_known_hosts); unknown or changed keys raise HostKeyError. ~/.ssh/config is not read.
- Commands are argv lists, each element shell-quoted, run in the resolved workdir. sshd always
  runs the login shell (Debian's bash reads ~/.bashrc even for `ssh host cmd`), so a command
  prints a random marker on stdout and stderr first and whatever came before is dropped: rc
  noise never reaches callers (slow rc files still cost their time per command). The login
  shell must be POSIX-like (sh, bash, dash, zsh, ksh, mksh; not fish or csh).
- Relative remote paths are relative to the workdir. Files go over SFTP (temp file + rename),
  or `cat` over exec when the server has no sftp subsystem.
- EOF without exit status, or no answer to a keepalive probe within `dead_after` s, raises
  LinkLost; the next call reconnects by itself (reconnect(): backoff up to `reconnect_s`).
"""
from __future__ import annotations

import hashlib
import io
import logging
import os
import posixpath
import shlex
import shutil
import socket
import subprocess
import threading
import time
import uuid
from pathlib import Path
from typing import Callable, Iterator

import paramiko
from fabric import Config, Connection

from .base import CommandResult, LinkLost, Transport, TransportError, sha256_file
from .hostkeys import HostKeyError, _RejectUnknown, _Unknown, fingerprint

log = logging.getLogger(__name__)
Progress = Callable[[int, int], None]
_NET = (paramiko.SSHException, OSError, EOFError)
CACHE_SUFFIX = ".orch-sha256"
SCP_MIN_BYTES = 64 << 20   # smaller files: one SFTP put on the open connection is quicker

# $1 resolved against $HOME, created; prints $HOME and the absolute path.
_RESOLVE = ('d=$1; case $d in "~") d=$HOME;; "~/"*) d=$HOME/${d#"~/"};; /*) ;; *) d=$HOME/$d;; '
            'esac; mkdir -p -- "$d" && cd -- "$d" && printf "%s\\n%s\\n" "$HOME" "$(pwd)"')
# Without SFTP: stdin -> $1 (via a temp file, dropping a sha256 cache), mode $2; reading $1.
_CAT_PUT = ('d=${1%/*}; [ -z "$d" ] || mkdir -p -- "$d" || exit 1; rm -f -- "$1.orch-sha256"; '
            'cat > "$1.orch-part" && chmod "$2" "$1.orch-part" && mv -f -- "$1.orch-part" "$1"')
_CAT_GET = '[ -e "$1" ] || exit 66; cat < "$1"'


class RemoteFileNotFound(TransportError, FileNotFoundError):
    """The device file does not exist (both a TransportError and a FileNotFoundError)."""


class CommandTimedOut(TransportError):
    """A command did not end within its timeout (it may still run on the device)."""


class _HashingReader:
    """Hashes what paramiko reads, so a push yields the sha256 without a second pass."""

    def __init__(self, handle) -> None:
        self.handle, self.digest = handle, hashlib.sha256()

    def read(self, size: int = -1) -> bytes:
        data = self.handle.read(size)
        self.digest.update(data)
        return data


class SshTransport(Transport):
    kind = "ssh"

    def __init__(self, name: str, host: str, port: int = 22, user: str | None = None,
                 key: str | None = None, known_hosts: str | None = None,
                 workdir: str = "~/.cache/orch", jump: str | None = None,
                 connect_timeout: float = 10, shell: str = "sh", *, keepalive: float = 5.0,
                 dead_after: float = 15.0, reconnect_s: float = 30.0,
                 env: dict[str, str] | None = None) -> None:
        super().__init__(name, workdir, shell)
        self.env = dict(env or {})
        self.host, self.port, self.user, self.jump = host, int(port), user, jump
        self.key = str(Path(key).expanduser()) if key else None
        self.known_hosts, self.connect_timeout = known_hosts, connect_timeout
        self.keepalive, self.dead_after, self.reconnect_s = keepalive, dead_after, reconnect_s
        self.requested_workdir, self.home = workdir, "~"
        self._conn: Connection | None = None
        self._resolved = False  # connect() finished once: workdir is absolute
        self._sftp: paramiko.SFTPClient | None = None
        self._sftp_ok = True
        self._dirs: set[str] = set()
        self.last_stderr = b""  # stderr tail of the last stream()
        self.last_sha256_source = ""  # "cached" or "computed" (last remote_sha256)
        self.last_put_method = ""     # "scp" or "sftp" (last put of a file)

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
            error = self._connect_error(exc)
            raise error from (None if isinstance(error, HostKeyError) else exc)
        finally:
            for c in (conn, gateway):
                if c is not None:
                    c.connect_kwargs.pop("password", None)  # fabric would keep it
        conn.transport.set_keepalive(max(1, round(self.keepalive)))
        result = self._run([self.shell, "-c", _RESOLVE, "sh", self.requested_workdir],
                           self.connect_timeout + 30, conn=conn)
        if result.rc != 0 or result.stdout.count(b"\n") < 2:
            self._drop()
            raise TransportError(f"{self.name}: cannot create workdir {self.requested_workdir}: "
                                 f"{result.stderr.decode(errors='replace').strip()}")
        self.home, self.workdir = result.stdout.decode().splitlines()[-2:]
        self._resolved = True

    def _connect_error(self, exc: Exception) -> TransportError:
        where = f"{self.host}:{self.port}"
        if getattr(exc, "hostname", self.host).strip("[").split("]")[0] != self.host:
            where = f"{exc.hostname} (jump host {self.jump})"
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
        what = "authentication failed" if isinstance(exc, paramiko.AuthenticationException) \
            else "cannot connect"
        return TransportError(f"{self.name}: {what} ({self.user or 'default user'}@{where}): "
                              f"{exc or type(exc).__name__}")

    def reconnect(self, deadline_s: float = 30.0) -> None:
        """connect() with exponential backoff (0.5 s .. 8 s) until `deadline_s` has passed."""
        end, delay = time.monotonic() + deadline_s, 0.5
        while True:
            try:
                return self.connect()
            except HostKeyError:
                raise
            except TransportError as exc:
                if isinstance(exc.__cause__, paramiko.AuthenticationException):
                    raise
                remaining = end - time.monotonic()
                if remaining <= 0:
                    raise TransportError(f"{self.name}: no connection within {deadline_s:g} s: "
                                         f"{exc}") from exc
                time.sleep(min(delay, remaining))
                delay = min(delay * 2, 8.0)

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
            self.reconnect(self.reconnect_s)
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
        # argv[0] always quoted: never a keyword, alias or assignment
        words = ["'" + argv[0].replace("'", "'\"'\"'") + "'"] + [shlex.quote(a) for a in argv[1:]]
        cd = f"cd {shlex.quote(self.workdir)} && " if conn is None else ""
        if self.env:  # the inventory's env (e.g. ORCH_THERMAL_DIR), for every command
            words = ["env"] + [shlex.quote(f"{k}={v}") for k, v in self.env.items()] + words
        try:
            chan.exec_command(f"printf %s {marker}; printf %s {marker} >&2; {cd}{' '.join(words)}")
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
              on_stderr: Callable[[bytes], object]) -> Iterator[bytes]:
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

    def stream(self, argv: list[str]) -> Iterator[bytes]:
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

    # -- files -------------------------------------------------------------------------------
    def _path(self, remote: str) -> str:
        self._ensure()
        if remote == "~" or remote.startswith("~/"):
            return self.home + remote[1:]
        return remote if remote.startswith("/") else posixpath.join(self.workdir, remote)

    def _sftp_client(self) -> paramiko.SFTPClient | None:
        conn = self._ensure()
        if self._sftp is None and self._sftp_ok:
            try:
                self._sftp = conn.client.open_sftp()
                self._sftp.get_channel().settimeout(max(60.0, 2 * self.dead_after))  # hung link
            except _NET as exc:
                if not conn.transport.is_active():
                    raise self._lost("sftp start", exc) from exc
                log.info("%s: no sftp subsystem (%s): files go through cat", self.name, exc)
                self._sftp_ok = False
        return self._sftp

    def _file_error(self, what: str, exc: BaseException) -> Exception:
        if isinstance(exc, FileNotFoundError):
            return RemoteFileNotFound(f"{self.name}: {what}: no such file")
        if self._conn is None or not self._conn.transport.is_active():
            return self._lost(what, exc)
        return TransportError(f"{self.name}: {what} failed: {exc}")

    def _makedirs(self, sftp: paramiko.SFTPClient, directory: str) -> None:
        if directory in ("", "/") or directory in self._dirs:
            return
        try:
            sftp.stat(directory)
        except FileNotFoundError:
            self._makedirs(sftp, posixpath.dirname(directory))
            try:
                sftp.mkdir(directory)
            except OSError:
                sftp.stat(directory)  # made meanwhile by someone else? else this raises
        self._dirs.add(directory)

    def _upload(self, handle, size: int, remote: str, mode: int, progress: Progress | None,
                drop_cache: bool = False) -> None:
        remote = self._path(remote)
        if (sftp := self._sftp_client()) is None:
            result = self._run([self.shell, "-c", _CAT_PUT, "sh", remote, f"{mode:o}"], None,
                               stdin=handle, progress=progress, size=size)
            if result.rc != 0:
                raise TransportError(f"{self.name}: writing {remote} failed: "
                                     f"{result.stderr.decode(errors='replace').strip()}")
            return
        try:
            if drop_cache:  # first, so that no moment has new content with an old sha256
                try:
                    sftp.remove(remote + CACHE_SUFFIX)
                except FileNotFoundError:
                    pass
            self._makedirs(sftp, posixpath.dirname(remote))
            sftp.putfo(handle, remote + ".orch-part", file_size=size, callback=progress)
            sftp.chmod(remote + ".orch-part", mode)
            sftp.posix_rename(remote + ".orch-part", remote)
        except _NET as exc:
            raise self._file_error(f"writing {remote}", exc) from exc

    def _put(self, local: Path, remote: str, mode: int, progress: Progress | None) -> str:
        """Upload; return the sha256 of what was sent. A stale sha256 cache goes first.
        Large files go through OpenSSH's scp when it is there: paramiko's SFTP costs Python
        per 32 KiB packet and reached 0.5-1x scp's rate on loopback (bench/push)."""
        if local.stat().st_size >= SCP_MIN_BYTES and (digest := self._scp_put(local, remote, mode,
                                                                                progress)):
            return digest
        self.last_put_method = "sftp"
        with open(local, "rb") as handle:
            reader = _HashingReader(handle)
            self._upload(reader, os.fstat(handle.fileno()).st_size, remote, mode, progress, True)
        return reader.digest.hexdigest()

    def _scp_argv(self) -> list[str] | None:
        """scp with exactly this transport's identity and strict host keys, or None when it
        cannot be (no scp, a jump host, a password, paths with spaces)."""
        scp = shutil.which("scp")
        files = [str(p) for p in self._host_key_files()]
        if scp is None or self.jump or os.environ.get("ORCH_SSH_PASSWORD") or \
                any(" " in f for f in files + [self.key or ""]):
            return None
        argv = [scp, "-q", "-B", "-F", "/dev/null", "-P", str(self.port),  # no ~/.ssh/config
                "-o", "StrictHostKeyChecking=yes", "-o", f"UserKnownHostsFile={' '.join(files)}",
                "-o", "GlobalKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
                "-o", f"ConnectTimeout={max(1, int(self.connect_timeout))}"]
        if self.key:
            argv += ["-i", self.key, "-o", "IdentitiesOnly=yes"]
        return argv

    def _scp_put(self, local: Path, remote: str, mode: int,
                 progress: Progress | None) -> str | None:
        """Push with scp to `<remote>.orch-part`, then chmod and rename over SFTP. None when
        scp cannot be used or fails: the caller falls back to SFTP (which reports errors)."""
        argv, sftp = self._scp_argv(), self._sftp_client()
        if argv is None or sftp is None:
            return None
        remote = self._path(remote)
        part, size = remote + ".orch-part", local.stat().st_size
        host = f"[{self.host}]" if ":" in self.host else self.host
        try:
            try:
                sftp.remove(remote + CACHE_SUFFIX)
            except FileNotFoundError:
                pass
            self._makedirs(sftp, posixpath.dirname(remote))
            proc = subprocess.Popen(argv + [str(local), f"{self.user + '@' if self.user else ''}"
                                            f"{host}:{part}"],
                                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.PIPE)
            # The sha256 the cache needs, computed while scp sends (the other core).
            hasher = threading.Thread(target=sha256_file, args=(local,), daemon=True)
            hasher.start()
            while True:   # progress: the size of the part file on the device, each second
                try:
                    proc.wait(timeout=1.0)
                    break
                except subprocess.TimeoutExpired:
                    pass
                if progress is not None:
                    try:
                        progress(min(sftp.stat(part).st_size, size), size)
                    except (FileNotFoundError, *_NET):
                        pass
            err = proc.stderr.read().decode(errors="replace").strip() if proc.stderr else ""
            if proc.returncode != 0:
                log.info("%s: scp failed (%s); pushing over SFTP", self.name, err[-300:])
                return None
            sftp.chmod(part, mode)
            sftp.posix_rename(part, remote)
        except _NET as exc:
            raise self._file_error(f"writing {remote}", exc) from exc
        if progress is not None:
            progress(size, size)
        self.last_put_method = "scp"
        hasher.join()
        return sha256_file(local)   # remembered by the hasher thread

    def put(self, local: Path, remote: str, mode: int = 0o644,
            progress: Progress | None = None) -> None:
        """Copy a file (parents created); `progress(bytes_done, total)` is called along."""
        self._put(Path(local), remote, mode, progress)

    def put_bytes(self, data: bytes, remote: str, mode: int = 0o644) -> None:
        self._upload(io.BytesIO(data), len(data), remote, mode, None)

    def get_bytes(self, remote: str) -> bytes:
        remote, buffer = self._path(remote), io.BytesIO()
        if (sftp := self._sftp_client()) is None:
            result = self._run([self.shell, "-c", _CAT_GET, "sh", remote], None)
            if result.rc == 66:
                raise RemoteFileNotFound(f"{self.name}: reading {remote}: no such file")
            if result.rc != 0:
                raise TransportError(f"{self.name}: reading {remote} failed: "
                                     f"{result.stderr.decode(errors='replace').strip()}")
            return result.stdout
        try:
            sftp.getfo(remote, buffer)
        except _NET as exc:
            raise self._file_error(f"reading {remote}", exc) from exc
        return buffer.getvalue()

    def _stat(self, remote: str) -> tuple[int, int] | None:
        """(size, mtime) of a device file, or None."""
        if (sftp := self._sftp_client()) is None:
            result = self._run(["stat", "-c", "%s %Y", remote], 60)
            return tuple(map(int, result.stdout.split())) if result.rc == 0 else None
        try:
            st = sftp.stat(remote)
        except FileNotFoundError:
            return None
        except _NET as exc:
            raise self._file_error(f"stat {remote}", exc) from exc
        return st.st_size, int(st.st_mtime)

    # -- sha256 with a cache next to the file ------------------------------------------------
    def push_if_changed(self, local: Path, remote: str, mode: int = 0o644,
                        progress: Progress | None = None) -> bool:
        """Push unless the device has the same file: size first (cheap), then sha256."""
        local, remote = Path(local), self._path(remote)
        stat = self._stat(remote)
        if stat is not None and stat[0] == local.stat().st_size and \
                self.remote_sha256(remote) == sha256_file(local):
            return False
        digest = self._put(local, remote, mode, progress)
        if (stat := self._stat(remote)) is not None:  # we know what we wrote: cache its sha256
            self.put_bytes(f"{stat[0]} {stat[1]} {digest}\n".encode(), remote + CACHE_SUFFIX)
        return True

    def describe(self) -> str:
        return f"ssh:{self.name} ({self.user + '@' if self.user else ''}{self.host}:{self.port})"
