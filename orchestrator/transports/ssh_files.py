"""The file half of the SSH transport: SFTP, scp for large files, `cat` without SFTP. A mixin
of SshTransport (it uses its connection and command runner).

- Uploads go to `<file>.orch-tmp-PID-RANDOM` (one push's own: transports/push_lock.py) or,
  for a file push, the resumable `<file>.orch-part-KEY`, then chmod and rename: a cut-off push never leaves a
  file of the right name with the wrong bytes. File pushes resume from what arrived
  (_put_file); a resumed file's sha256 is checked on the device before the rename.
- Files of SCP_MIN_BYTES and more go through the local OpenSSH scp (same key, strict
  known_hosts, no ~/.ssh/config): paramiko's SFTP spends Python time per 32 KiB packet and
  reached half of scp's rate on loopback (bench/push).
"""
from __future__ import annotations

import hashlib
import io
import logging
import os
import posixpath
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Callable

import paramiko

from orchestrator.transports.base import (
    CommandResult,
    LinkLost,
    RemoteFileNotFound,
    TransportError,
    sha256_file,
)
from orchestrator.transports.posix import PosixTransport
from orchestrator.transports.push_lock import push_lock, unique_suffix

if TYPE_CHECKING:
    from fabric import Connection

log = logging.getLogger(__name__)
Progress = Callable[[int, int], None]
_NET = (paramiko.SSHException, OSError, EOFError)
CACHE_SUFFIX = ".orch-sha256"
SCP_MIN_BYTES = 64 << 20   # smaller files: one SFTP put on the open connection is quicker
PUSH_CHUNK = 256 << 10     # local read size of an SFTP push (paramiko sends 32 KiB packets)

# Without SFTP: stdin -> $1 (via a temp file, dropping a sha256 cache), mode $2; reading $1.
# $1 the file, $2 its mode, $3 this push's own temporary suffix (push_lock.unique_suffix)
_CAT_PUT = ('d=${1%/*}; [ -z "$d" ] || mkdir -p -- "$d" || exit 1; rm -f -- "$1.orch-sha256"; '
            't=$1$3; cat > "$t" && chmod "$2" "$t" && mv -f -- "$t" "$1" || '
            '{ rm -f -- "$t"; exit 1; }')
_CAT_GET = '[ -e "$1" ] || exit 66; cat < "$1"'


class _HashingReader:
    """Hashes what paramiko reads, so a push yields the sha256 without a second pass."""

    def __init__(self, handle) -> None:
        self.handle, self.digest = handle, hashlib.sha256()

    def read(self, size: int = -1) -> bytes:
        data = self.handle.read(size)
        self.digest.update(data)
        return data


def _version_key(local: Path) -> str:
    """Names a push's part file after the local file's size and mtime: a part left by an
    earlier version of the file is never resumed."""
    st = local.stat()
    return hashlib.sha256(f"{st.st_size}-{st.st_mtime_ns}".encode()).hexdigest()[:16]


def _size_or_zero(sftp: paramiko.SFTPClient, path: str) -> int:
    try:
        return sftp.stat(path).st_size or 0
    except FileNotFoundError:
        return 0


class SshFiles(PosixTransport):
    """Files on an SSH device; expects SshTransport's connection and command methods."""

    # SshTransport's connection state and methods, declared for the type checker only: they
    # are set and defined in ssh.py, where the connection is.
    host: str
    port: int
    user: str | None
    key: str | None
    jump: str | None
    connect_timeout: float
    dead_after: float
    home: str
    _conn: Connection | None
    _sftp: paramiko.SFTPClient | None
    _sftp_ok: bool
    _dirs: set[str]

    if TYPE_CHECKING:
        def _ensure(self) -> Connection: ...
        def _lost(self, what: str, exc: BaseException | None = None) -> LinkLost: ...
        def _host_key_files(self) -> list[Path]: ...
        def _run(self, argv: list[str], timeout: float | None, conn: Connection | None = None,
                 stdin: BinaryIO | None = None, progress: Progress | None = None,
                 size: int = 0) -> CommandResult: ...

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
                if (channel := self._sftp.get_channel()) is not None:
                    channel.settimeout(max(60.0, 2 * self.dead_after))  # a hung link
            except _NET as exc:
                if self._link_down(exc):
                    raise self._lost("sftp start", exc) from exc
                log.info("%s: no sftp subsystem (%s): files go through cat", self.name, exc)
                self._sftp_ok = False
        return self._sftp

    def _link_down(self, exc: BaseException, settle: float = 1.0) -> bool:
        """Whether an SFTP error is the link's: a dropped channel or socket, or a transport
        that stops being active within `settle` s (paramiko's reader thread notices a reset
        a moment after the call that met it)."""
        if isinstance(exc, (EOFError, socket.timeout, ConnectionError)):
            return True
        deadline = time.monotonic() + settle
        while True:
            conn = self._conn
            if conn is None or conn.transport is None or not conn.transport.is_active():
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)

    def _file_error(self, what: str, exc: BaseException) -> Exception:
        if isinstance(exc, FileNotFoundError):
            return RemoteFileNotFound(f"{self.name}: {what}: no such file")
        if self._link_down(exc):
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
            result = self._run([self.shell, "-c", _CAT_PUT, "sh", remote, f"{mode:o}",
                                unique_suffix()], None, stdin=handle, progress=progress,
                               size=size)
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
            tmp = remote + unique_suffix()   # two pushes never share it
            sftp.putfo(handle, tmp, file_size=size, callback=progress)
            sftp.chmod(tmp, mode)
            sftp.posix_rename(tmp, remote)
        except _NET as exc:
            raise self._file_error(f"writing {remote}", exc) from exc

    def _put_file(self, local: Path, remote: str, mode: int, progress: Progress | None) -> str:
        """Upload; return the sha256 of what was sent. A stale sha256 cache goes first.
        Resumable: the bytes go to `<file>.orch-part-KEY` (KEY: local size and mtime, so a
        part of another version never counts); a push cut by a lost link leaves it, and the
        next push appends from its size. A resumed file is checked whole before it takes the
        name: its sha256 on the device must be the local file's (else it goes again from the
        start). Large files start with OpenSSH's scp when it is there: paramiko's SFTP costs
        Python per 32 KiB packet and reached 0.5-1x scp's rate on loopback (bench/push)."""
        remote = self._path(remote)
        with push_lock(self.describe(), remote):   # a part of one version is one push's
            return self._put_file_locked(local, remote, mode, progress)

    def _put_file_locked(self, local: Path, remote: str, mode: int,
                         progress: Progress | None) -> str:
        size = local.stat().st_size
        if (sftp := self._sftp_client()) is None:  # `cat` over exec: from the start each time
            self.last_put_method = "cat"
            with open(local, "rb") as handle:
                reader = _HashingReader(handle)
                self._upload(reader, size, remote, mode, progress, True)
            return reader.digest.hexdigest()
        part = f"{remote}.orch-part-{_version_key(local)}"
        try:
            try:   # first, so that no moment has new content with an old sha256
                sftp.remove(remote + CACHE_SUFFIX)
            except FileNotFoundError:
                pass
            self._makedirs(sftp, posixpath.dirname(remote))
            digest = self._fill_part(sftp, local, part, size, progress)
            sftp.chmod(part, mode)
            sftp.posix_rename(part, remote)
            self._drop_parts(sftp, remote)
        except _NET as exc:
            raise self._file_error(f"writing {remote}", exc) from exc
        if progress is not None:
            progress(size, size)
        return digest

    def _fill_part(self, sftp: paramiko.SFTPClient, local: Path, part: str, size: int,
                   progress: Progress | None) -> str:
        """Bring `part` to the local file's bytes; its sha256."""
        have = _size_or_zero(sftp, part)
        if have > size:
            sftp.remove(part)
            have = 0
        if have == 0 and size >= SCP_MIN_BYTES and \
                (digest := self._scp_put(local, part, size, progress)):
            self.last_put_method = "scp"
            return digest
        have = _size_or_zero(sftp, part)   # what a cut-off scp left is resumed too
        if have == 0:
            self.last_put_method = "sftp"
            return self._append(sftp, local, part, 0, size, progress) or sha256_file(local)
        self.last_put_method = "sftp-resumed"
        if have < size:
            log.info("%s: resuming %s at %d of %d bytes", self.name, part, have, size)
            self._append(sftp, local, part, have, size, progress)
        digest = sha256_file(local)
        if self._device_sha256(part) != digest:   # the prefix was not ours after all
            log.info("%s: %s differs from %s after resuming; pushing it again", self.name,
                     part, local)
            sftp.remove(part)
            self.last_put_method = "sftp"
            self._append(sftp, local, part, 0, size, progress)
        return digest

    def _append(self, sftp: paramiko.SFTPClient, local: Path, part: str, offset: int, size: int,
                progress: Progress | None) -> str | None:
        """Write the local file from `offset` on into `part` at that offset; the sha256 of the
        whole when written from 0, else None."""
        digest = hashlib.sha256() if offset == 0 else None
        with open(local, "rb") as handle, sftp.open(part, "r+b" if offset else "wb") as out:
            out.set_pipelined(True)
            handle.seek(offset)
            out.seek(offset)
            done = offset
            while chunk := handle.read(PUSH_CHUNK):
                out.write(chunk)
                if digest is not None:
                    digest.update(chunk)
                done += len(chunk)
                if progress is not None:
                    progress(min(done, size), size)
        return digest.hexdigest() if digest is not None else None

    def _device_sha256(self, path: str) -> str:
        result = self._run([self.shell, "-c", 'sha256sum < "$1"', "sh", path], None)
        if result.rc != 0:
            raise TransportError(f"{self.name}: sha256 of {path} failed: "
                                 f"{result.stderr.decode(errors='replace').strip()[:300]}")
        return result.stdout.decode(errors="replace").split()[0] if result.stdout.split() else ""

    def _drop_parts(self, sftp: paramiko.SFTPClient, remote: str) -> None:
        """Remove parts of other versions of `remote` left by pushes that never finished."""
        directory, name = posixpath.split(remote)
        for entry in sftp.listdir(directory or "."):
            if entry.startswith(name + ".orch-part"):
                try:
                    sftp.remove(posixpath.join(directory, entry))
                except FileNotFoundError:
                    pass

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

    def _scp_put(self, local: Path, part: str, size: int,
                 progress: Progress | None) -> str | None:
        """Push with scp to `part`; its sha256. None when scp cannot be used or fails (a
        lost link among others): the caller goes on over SFTP from what arrived."""
        argv, sftp = self._scp_argv(), self._sftp_client()
        if argv is None or sftp is None:
            return None
        host = f"[{self.host}]" if ":" in self.host else self.host
        target = f"{self.user + '@' if self.user else ''}{host}:{part}"
        proc = subprocess.Popen([*argv, str(local), target],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE)
        # The sha256 the cache needs, computed while scp sends (the other core).
        hasher = threading.Thread(target=sha256_file, args=(local,), daemon=True)
        hasher.start()
        try:
            while True:   # progress: the size of the part file on the device, each second
                try:
                    proc.wait(timeout=1.0)
                    break
                except subprocess.TimeoutExpired:
                    pass
                if progress is not None:
                    try:
                        progress(min(sftp.stat(part).st_size or 0, size), size)
                    except (FileNotFoundError, *_NET):
                        pass
        finally:
            if proc.poll() is None:   # interrupted (Ctrl-C, a progress callback): no orphan
                proc.kill()
                proc.wait()
        err = proc.stderr.read().decode(errors="replace").strip() if proc.stderr else ""
        if proc.returncode != 0:
            log.info("%s: scp failed (%s); going on over SFTP", self.name, err[-300:])
            return None
        hasher.join()
        return sha256_file(local)   # remembered by the hasher thread

    def put(self, local: Path, remote: str, mode: int = 0o644,
            progress: Progress | None = None) -> None:
        """Copy a file (parents created); `progress(bytes_done, total)` is called along."""
        self._put_file(Path(local), remote, mode, progress)

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

    def remote_size(self, remote: str) -> int | None:
        """Size of a device file (SFTP stat follows symlinks), or None."""
        remote = self._path(remote)
        if (sftp := self._sftp_client()) is None:
            return super().remote_size(remote)
        try:
            return sftp.stat(remote).st_size
        except (FileNotFoundError, PermissionError):
            return None
        except _NET as exc:
            raise self._file_error(f"stat {remote}", exc) from exc
