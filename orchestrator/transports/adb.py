"""Android phones over adb, with adbutils talking to a running adb server.

Every call has our socket timeout (adbutils defaults to 600 s) and adbutils may not run
`adb start-server` (its bundled adb, maybe on another port). Commands: argv, each element
shell-quoted, run in the workdir over shell v2 (exit code, separate stderr); the inventory's
`env` becomes an `env K=V` prefix. Unplug detection: the server closes every stream of a
dropped device, so a v2 command or stream ending WITHOUT its exit packet is LinkLost (the v1
fallback for pre-Android-7 phones asks the device state after EOF instead); calls on an
offline device are LinkLost; a stream silent for `dead_after` s is probed with `true`, and no
answer (a hung device still shows `device`) is LinkLost. connect() of a host:port serial runs
`adb connect` itself rather than wait for the server's ~10 s retry. Files: our own sync SEND
(64 KiB DATA, sendall, progress; adbutils sends 4 KiB with send(), which may write short) to
`<file>.orch-tmp-PID-RANDOM` (transports/push_lock.py), then rename; big files go in resumable
pieces (_put_pieces).

About 410 lines on purpose: the connection, the shell v2 framing and the sync protocol share
one client and its timeouts, and each piece is the protocol's, not orch's to divide.
"""
from __future__ import annotations

import io
import posixpath
import re
import shlex
import socket
import struct
import time
from pathlib import Path
from typing import BinaryIO, Generator, Iterator, Literal

import adbutils
from adbutils import AdbConnection, AdbError

from orchestrator.transports.base import (
    CommandResult,
    CommandTimedOut,
    DeviceEntry,
    LinkLost,
    RemoteFileNotFound,
    TransportError,
    sha256_file,
)
from orchestrator.transports.base import PushProgress as Progress
from orchestrator.transports.posix import PosixTransport
from orchestrator.transports.push_lock import push_lock, unique_suffix

SYNC_DATA_MAX = 64 * 1024          # the sync protocol's largest DATA packet
PIECE = 64 << 20                   # resumable push granularity (see _put_pieces)
PIECE_MTIME = 946684800            # DONE's mtime for pieces: set only when one is complete
_NET = (AdbError, OSError, EOFError, struct.error)
ERROR_SETTLE = 1.0                 # s a socket error waits for the server to see a pulled phone

# Append pieces $1.0 .. $1.N-1 to $1.cat, deleting each once appended (peak space: the file
# plus one piece); resumable: pieces already in $1.cat are skipped, a cut-off append is
# truncated away. Then chmod, rename to $6, and drop stale pieces of earlier versions.
_ASSEMBLE = r'''p=$1 n=$2 piece=$3 total=$4 c=$1.cat
[ -f "$c" ] || : > "$c" || exit 1
i=0
while [ "$i" -lt "$n" ]; do
  have=$(stat -c %s -- "$c") || exit 1
  [ "$have" -eq "$total" ] && break
  at=$((i * piece))
  if [ "$have" -ge $((at + piece)) ]; then i=$((i + 1)); continue; fi
  if [ "$have" -ne "$at" ]; then truncate -s "$at" "$c" || exit 1; fi
  [ -f "$p.$i" ] || { echo "piece $p.$i is missing" >&2; exit 3; }
  cat -- "$p.$i" >> "$c" && rm -f -- "$p.$i" || exit 1
  i=$((i + 1))
done
[ "$(stat -c %s -- "$c")" -eq "$total" ] || { echo "assembled size differs" >&2; exit 4; }
chmod "$5" "$c" && mv -f -- "$c" "$6" && rm -f -- "$6".orch-part-*'''


class _Connection(AdbConnection):
    def _safe_connect(self) -> socket.socket:  # no `adb start-server` fallback
        return self._create_socket()


class _Client(adbutils.AdbClient):
    timeout = 30.0

    def make_connection(self, timeout: float | None = None) -> AdbConnection:
        conn = _Connection(self.host, self.port)
        conn.conn.settimeout(self.timeout)  # ours, always: adbutils often passes 600 s
        return conn


class AdbEntry(DeviceEntry):
    kind: Literal["adb"]
    serial: str
    adb_host: str = "127.0.0.1"
    adb_port: int = 5037

    def target(self) -> tuple[object, ...]:
        # a serial names the phone, whichever adb server reaches it
        return ("adb", self.serial)


class AdbTransport(PosixTransport):
    kind = "adb"
    entry_model = AdbEntry
    default_workdir = "/data/local/tmp/orch"

    def __init__(self, name: str, serial: str, adb_host: str = "127.0.0.1",
                 adb_port: int = 5037, workdir: str = "/data/local/tmp/orch", shell: str = "sh",
                 env: dict[str, str] | None = None, *, timeout: float = 30.0,
                 dead_after: float = 30.0, poll: float = 1.0) -> None:
        super().__init__(name, workdir, shell, env)
        self.serial, self.adb_host, self.adb_port = serial, adb_host, int(adb_port)
        self.requested_workdir = workdir
        self.timeout, self.dead_after, self.poll = timeout, dead_after, poll
        self._client = _Client(adb_host, self.adb_port)
        self._client.timeout = timeout
        self._dev: adbutils.AdbDevice | None = None
        self._v2, self._dirs = True, set[str]()
        self._was_connected = False   # connect() succeeded once: a later failure is link loss
        self.last_stderr = b""  # stderr tail of the last stream()

    @classmethod
    def address(cls, entry: DeviceEntry) -> str:
        assert isinstance(entry, AdbEntry)  # the inventory parsed it with entry_model
        return f"{entry.serial} via {entry.adb_host}:{entry.adb_port}"

    def state(self) -> str | None:
        """The server's state for our serial (device, offline, unauthorized, ...) or None."""
        try:
            return next((i.state for i in self._client.list() if i.serial == self.serial), None)
        except _NET as exc:
            where = f"{self.adb_host}:{self.adb_port}"
            if "timeout" in str(exc).lower() or isinstance(exc, TimeoutError):
                # the port accepts connections and says nothing: a hung server or another
                # program there; starting a server would not help
                raise TransportError(f"{self.name}: the adb server at {where} did not answer "
                                     f"within {self.timeout:g} s ({exc}): a hung adb server "
                                     f"(`adb -P {self.adb_port} kill-server`), or not adb on "
                                     f"that port") from None
            raise TransportError(f"{self.name}: no adb server at {where} ({exc}); "
                                 f"`adb -P {self.adb_port} start-server`") from None

    def connect(self) -> None:
        self._dev, self._dirs = None, set()
        state = self.state()
        if state != "device" and re.fullmatch(r".+:\d+", self.serial):  # wireless debugging
            state = self._adb_connect(state)
        if state != "device":
            hint = ("accept the USB debugging prompt on the phone" if state == "unauthorized"
                    else "is it plugged in, is USB debugging on?")
            raise TransportError(f"{self.name}: device {self.serial} is {state or 'not found'} "
                                 f"(adb server {self.adb_host}:{self.adb_port}); {hint}")
        self._dev = self._client.device(self.serial)
        try:
            self._v2 = "shell_v2" in self._dev.get_features().split(",")
        except _NET as exc:
            raise self._error("features", exc) from None
        # created and made absolute; exit 3: it exists but cannot be written (a read-only mount)
        resolve = 'mkdir -p -- "$1" && cd -- "$1" && pwd && { [ -w . ] || exit 3; }'
        result = self.run([self.shell, "-c", resolve, "sh", self.requested_workdir],
                          self.timeout, cd=False)
        if result.rc == 3 and (out := result.stdout.decode().split("\n")[0]):
            raise TransportError(f"{self.name}: workdir {out} is not writable")
        if result.rc != 0 or not (out := result.stdout.decode().split("\n")[0]):
            raise TransportError(f"{self.name}: cannot create workdir {self.requested_workdir}: "
                                 f"{result.stderr.decode(errors='replace').strip()}")
        self.workdir = out
        self._was_connected = True

    def _adb_connect(self, state: str | None) -> str | None:
        """`adb connect` host:port; disconnect an offline one first (else "already connected")."""
        try:
            if state == "offline":
                self._client.disconnect(self.serial)
            answer = self._client.connect(self.serial, timeout=min(self.timeout, 10))
        except _NET:
            answer = ""
        for _ in range(30 if "connected" in answer else 1):  # "failed/unable to connect": once
            if (state := self.state()) == "device":
                break
            time.sleep(0.1)  # the server needs a moment for the CNXN handshake
        return state

    def close(self) -> None:  # one server socket per call: nothing to close; jobs live on
        self._dev = None

    def _device(self) -> adbutils.AdbDevice:
        if self._dev is None:
            if not self._was_connected:
                self.connect()
            else:  # dropped since: a device still away is a lost link (retried: link_retry)
                try:
                    self.connect()
                except LinkLost:
                    raise
                except TransportError as exc:
                    raise LinkLost(str(exc)) from None
        if self._dev is None:  # connect() sets it or raises
            raise LinkLost(f"{self.name}: no device after connecting")
        return self._dev

    def _error(self, what: str, exc: BaseException | None = None) -> TransportError:
        """LinkLost when the device is no longer `device`, else a plain TransportError."""
        detail = f": {exc}" if exc else ""
        # A socket error may come a moment before the server marks a pulled phone offline:
        # such an error asks again for up to ERROR_SETTLE s before it is called the device's.
        settle = time.monotonic() + (ERROR_SETTLE if isinstance(exc, (OSError, EOFError)) else 0)
        try:
            while (state := self.state()) == "device":
                if time.monotonic() >= settle:
                    return TransportError(f"{self.name}: {what} failed{detail}")
                time.sleep(0.1)
        except TransportError as err:
            return LinkLost(f"{err} (during {what})")
        self._dev = None
        return LinkLost(f"{self.name}: device {self.serial} is {state or 'gone'} ({what}){detail}")

    def _open(self, service: str, what: str) -> AdbConnection:
        try:
            conn = self._device().open_transport()
            conn.send_command(service)
            conn.check_okay()
        except _NET as exc:
            raise self._error(what, exc) from None
        return conn

    def _packets(self, conn: AdbConnection, what: str, deadline: float | None, watch: bool,
                 v2: bool = True) -> Iterator[tuple[int, bytes]]:
        """Shell v2 packets ([id u8][len u32][data]) until the exit packet (id 3). A v1 stream
        gives its data as id 1 and its end as an empty exit packet."""
        buf, last_rx = bytearray(), time.monotonic()
        conn.conn.settimeout(self.poll)
        while True:
            while v2 and len(buf) >= 5 + (n := int.from_bytes(buf[1:5], "little")):
                kind, data = buf[0], bytes(buf[5:5 + n])
                del buf[:5 + n]
                yield kind, data
                if kind == 3:
                    return
            now = time.monotonic()
            if deadline is not None and now > deadline:
                raise CommandTimedOut(f"{self.name}: {what} did not end in time")
            if watch and now - last_rx > self.dead_after:
                self._probe(what)  # raises LinkLost when the device does not answer
                last_rx = now
            try:
                chunk = conn.conn.recv(1 << 16)
            except socket.timeout:
                continue
            except OSError as exc:
                raise self._error(what, exc) from None
            if not chunk:  # closed without an exit packet: the device (or server) went away
                if isinstance(err := self._error(what), LinkLost):
                    raise err
                if not v2:  # a v1 end is no proof of anything, but the device is still there
                    yield 3, b""
                    return
                raise LinkLost(f"{err} (no exit status)")
            last_rx = time.monotonic()
            if v2:
                buf += chunk
            else:
                yield 1, chunk

    def _probe(self, what: str) -> None:
        try:
            detail = f"rc {self.run(['true'], min(self.timeout, 10.0), cd=False).rc}"
        except TransportError as exc:
            detail = str(exc)
        if detail != "rc 0":
            raise LinkLost(f"{self.name}: no answer from {self.serial} during {what}: {detail}")

    def run(self, argv: list[str], timeout: float = 60.0, cd: bool = True) -> CommandResult:
        cmd = self.command_line(argv, self.workdir if cd else None)
        what = f"`{shlex.join(argv)[:80]}`"
        if not self._v2:  # pre-Android-7: adbutils appends `echo X4EXIT:$?`; stderr is merged
            try:
                raw = self._device().shell2(cmd, timeout=timeout, encoding=None)
            except _NET as exc:
                raise self._error(what, exc) from None
            return CommandResult(raw.returncode, raw.output, b"")
        conn, out, rc = self._open(f"shell,v2:{cmd}", what), {1: bytearray(), 2: bytearray()}, 255
        try:
            for kind, data in self._packets(conn, what, time.monotonic() + timeout, False):
                if kind in out:
                    out[kind] += data
                rc = data[0] if kind == 3 and data else rc
        finally:
            conn.close()
        return CommandResult(rc, bytes(out[1]), bytes(out[2]))

    def stream(self, argv: list[str]) -> Generator[bytes, None, int | None]:
        """Yield stdout chunks as they arrive; the generator returns the exit status."""
        what, self.last_stderr = f"stream `{shlex.join(argv)[:80]}`", b""
        service = ("shell,v2:" if self._v2 else "shell:") + self.command_line(argv, self.workdir)
        conn = self._open(service, what)
        try:
            for kind, data in self._packets(conn, what, None, True, self._v2):
                if kind == 1:
                    yield data
                elif kind == 2:
                    self.last_stderr = (self.last_stderr + data)[-65536:]
                elif kind == 3:
                    return data[0] if data else None
        finally:
            conn.close()  # the server closes the device stream: the follower there ends
        return None   # no exit packet (_packets ends with one; for the type checker)

    def _path(self, remote: str) -> str:
        return remote if remote.startswith("/") else posixpath.join(self.workdir, remote)

    def _stat(self, remote: str) -> tuple[int, int] | None:  # sync STAT; None: no such path
        try:
            info = self._device().sync.stat(remote)
        except _NET as exc:
            raise self._error(f"stat {remote}", exc) from None
        return (info.size, int(info.mtime.timestamp())) if info.mode and info.mtime else None

    def _send(self, handle: BinaryIO, length: int, remote: str, mode: int,
              progress: Progress | None = None, done: int = 0, total: int = 0,
              mtime: int | None = None) -> None:
        """One sync SEND of `length` bytes from `handle`. adbd deletes a half-sent file."""
        spec, what = f"{remote},{0o100000 | mode}".encode(), f"push to {remote}"  # S_IFREG
        conn = self._open("sync:", what)
        try:
            sock = conn.conn
            sock.sendall(b"SEND" + struct.pack("<I", len(spec)) + spec)
            end = done + length
            while done < end:
                if not (chunk := handle.read(min(SYNC_DATA_MAX, end - done))):
                    raise TransportError(f"{self.name}: local file shrank while pushing {remote}")
                sock.sendall(b"DATA" + struct.pack("<I", len(chunk)) + chunk)
                done += len(chunk)
                if progress:
                    progress(done, total or length)
            sock.sendall(b"DONE" + struct.pack("<I", mtime or int(time.time())))
            if (status := conn.read_exact(8))[:4] != b"OKAY":
                why = conn.read_exact(struct.unpack("<I", status[4:])[0]).decode(errors="replace")
                raise TransportError(f"{self.name}: {what} refused: {why}")
            sock.sendall(b"QUIT" + bytes(4))
        except _NET as exc:
            raise self._error(what, exc) from None
        finally:
            conn.close()

    def _put(self, local: Path, remote: str, mode: int, progress: Progress | None,
             digest: str | None = None) -> None:
        size = local.stat().st_size
        # parents exist, and a stale sha256 cache is gone before new bytes arrive
        self.sh_checked('mkdir -p -- "${1%/*}/" && rm -f -- "$1.orch-sha256"', remote,
                        timeout=self.timeout)
        if size > PIECE:
            key = (digest or f"{size}-{local.stat().st_mtime_ns}")[:16]
            with push_lock(self.describe(), remote):   # the pieces of one version: one push's
                return self._put_pieces(local, size, remote, mode, progress, key)
        tmp = remote + unique_suffix()   # two pushes never share it
        with open(local, "rb") as handle:
            self._send(handle, size, tmp, 0o600, progress)
        self.sh_checked('chmod "$3" "$2" && mv -f -- "$2" "$1"', remote, tmp,
                        f"{mode:o}", timeout=self.timeout)

    def _put_pieces(self, local: Path, size: int, remote: str, mode: int,
                    progress: Progress | None, key: str) -> None:
        """Resumable push: SEND cannot append and adbd deletes a half-sent file, so the file goes
        as PIECE-sized `<file>.orch-part-KEY.N` (KEY: local sha256, else size+mtime: pieces of
        other versions never count). A piece with its full size and PIECE_MTIME (set by DONE; a
        cut-off one lingers until adbd deletes it) is kept from an interrupted push (_ASSEMBLE)."""
        prefix, where = f"{remote}.orch-part-{key}", posixpath.dirname(remote)
        count = -(-size // PIECE)
        try:
            have = {e.path: (e.size, int(e.mtime.timestamp()))
                    for e in self._device().sync.iter_directory(where)}
        except _NET as exc:
            raise self._error(f"list {where}", exc) from None
        assembled = have.get(posixpath.basename(prefix) + ".cat", (0, 0))[0]
        inside = count if assembled == size else assembled // PIECE
        with open(local, "rb") as handle:
            for i in range(count):
                length = min(PIECE, size - i * PIECE)
                name = f"{prefix}.{i}"
                if i < inside or have.get(posixpath.basename(name)) == (length, PIECE_MTIME):
                    if progress:
                        progress(min(size, (i + 1) * PIECE), size)
                    continue
                handle.seek(i * PIECE)
                self._send(handle, length, name, 0o600, progress, i * PIECE, size, PIECE_MTIME)
                if (got := self._stat(name)) is None or got[0] != length:
                    raise TransportError(f"{self.name}: piece {name} has {got and got[0]} bytes "
                                         f"on the device, expected {length}")
        self.sh_checked(_ASSEMBLE, prefix, str(count), str(PIECE), str(size), f"{mode:o}",
                        remote, timeout=max(self.timeout, size / (20 << 20)))  # >= 20 MB/s

    def put(self, local: Path, remote: str, mode: int = 0o644,
            progress: Progress | None = None) -> None:
        """Copy a file (parents created); `progress(bytes_done, total)` is called along."""
        self._put(Path(local), self._path(remote), mode, progress)

    def put_bytes(self, data: bytes, remote: str, mode: int = 0o644) -> None:
        remote = self._path(remote)  # small files (job, caches): one SEND, straight to the name
        if (parent := posixpath.dirname(remote)) not in self._dirs:
            self.sh_checked('mkdir -p -- "$1/"', parent, timeout=self.timeout)
            self._dirs.add(parent)
        self._send(io.BytesIO(data), len(data), remote, mode)

    def get_bytes(self, remote: str) -> bytes:
        remote = self._path(remote)
        try:
            return self._device().sync.read_bytes(remote)
        except _NET as exc:
            if "No such file" in str(exc):
                raise RemoteFileNotFound(f"{self.name}: reading {remote}: no such file") from None
            raise self._error(f"reading {remote}", exc) from None

    def _put_file(self, local: Path, remote: str, mode: int, progress: Progress | None) -> str:
        digest = sha256_file(local)  # first: it names the pieces of a resumable push
        self._put(local, remote, mode, progress, digest)
        return digest

    def describe(self) -> str:
        return f"adb:{self.name} ({self.serial} via {self.adb_host}:{self.adb_port})"