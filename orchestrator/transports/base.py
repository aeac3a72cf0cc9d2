"""The one interface every device kind implements (DESIGN §5).

A transport moves files to a device, runs short commands there, and streams long-running
output back. It knows nothing of engines, matrices or the store: the runner drives it.
"""
from __future__ import annotations

import abc
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

# progress(bytes_done, total) during a file push
PushProgress = Callable[[int, int], None]


# sha256 of $1, cached in `$1.orch-sha256` ("size mtime sha256") while `stat` still matches,
# so an unchanged 20 GB model is not re-hashed every run. A file modified less than 2 s ago is
# hashed but not cached (same-second rewrites keep %Y). POSIX sh + toybox only.
SHA256_CACHED = r'''f=$1 c=$1.orch-sha256
st=$(stat -c '%s %Y' -- "$f" 2>/dev/null) || exit 3
if [ -f "$c" ] && read -r s m h rest < "$c" && [ "$s $m" = "$st" ] && [ -n "$h" ]; then
  echo "$h cached"; exit 0; fi
h=$(sha256sum < "$f") || exit 4
h=${h%% *}
if [ "$(stat -c '%s %Y' -- "$f")" = "$st" ] && [ $(( $(date +%s) - ${st#* } )) -ge 2 ]; then
  { printf '%s %s\n' "$st" "$h" > "$c.$$" && mv -f -- "$c.$$" "$c"; } 2>/dev/null ||
    rm -f -- "$c.$$"
fi
echo "$h computed"'''


class TransportError(Exception):
    """The device could not be reached or a transport operation failed."""


class LinkLost(TransportError):
    """The connection dropped in the middle of a stream; the device may still be running."""


@dataclass
class CommandResult:
    rc: int
    stdout: bytes
    stderr: bytes


_SHA_CACHE: dict[tuple[str, int, int], str] = {}


def sha256_file(path: Path, bufsize: int = 1 << 20) -> str:
    """Streaming sha256 of a local file, remembered per (path, size, mtime): a 20 GB model is
    hashed once per orch process however many devices and checks ask, never read whole."""
    st = os.stat(path)
    key = (os.path.realpath(path), st.st_size, st.st_mtime_ns)
    if key not in _SHA_CACHE:
        digest = hashlib.sha256()
        with open(path, "rb") as handle:
            while chunk := handle.read(bufsize):
                digest.update(chunk)
        _SHA_CACHE[key] = digest.hexdigest()
    return _SHA_CACHE[key]


class Transport(abc.ABC):
    """A connection to one device. Paths on the device are POSIX strings."""

    kind: str = "?"

    def __init__(self, name: str, workdir: str, shell: str = "sh") -> None:
        self.name = name
        self.workdir = workdir
        self.shell = shell

    # -- lifecycle ---------------------------------------------------------------------------
    def connect(self) -> None:
        """Open the connection and resolve `workdir` to an absolute path on the device."""

    def close(self) -> None:
        """Release the connection; never kills anything running detached on the device."""

    def __enter__(self) -> "Transport":
        self.connect()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- commands ----------------------------------------------------------------------------
    @abc.abstractmethod
    def run(self, argv: list[str], timeout: float = 60.0) -> CommandResult:
        """Run a short command (argv, quoted safely by the transport) and wait for it."""

    @abc.abstractmethod
    def stream(self, argv: list[str]) -> Iterator[bytes]:
        """Run a command and yield its stdout in chunks as they arrive.

        Raises LinkLost when the connection drops before the command ended by itself.
        """

    # -- files -------------------------------------------------------------------------------
    @abc.abstractmethod
    def put(self, local: Path, remote: str, mode: int = 0o644,
            progress: PushProgress | None = None) -> None:
        """Copy a local file to the device (parents created); `progress(done, total)` along."""

    @abc.abstractmethod
    def put_bytes(self, data: bytes, remote: str, mode: int = 0o644) -> None:
        """Write bytes to a file on the device (parents created)."""

    @abc.abstractmethod
    def get_bytes(self, remote: str) -> bytes:
        """Read a whole (small) file from the device."""

    def _path(self, remote: str) -> str:
        """A device path as commands see it (transports resolve relative ones)."""
        return remote

    def remote_sha256(self, remote: str) -> str | None:
        """sha256 of a device file (None when it does not exist); `<file>.orch-sha256`
        spares re-hashing an unchanged one."""
        result = self.run([self.shell, "-c", SHA256_CACHED, "sh", self._path(remote)],
                          timeout=3600)
        fields = result.stdout.decode(errors="replace").split()
        if result.rc != 0 or len(fields) < 2:
            return None
        self.last_sha256_source = fields[1]   # "cached" or "computed"
        return fields[0]

    def push_if_changed(self, local: Path, remote: str, mode: int = 0o644,
                        progress: PushProgress | None = None) -> bool:
        """Push unless the device already has a file with the same sha256. True if pushed."""
        if self.remote_sha256(remote) == sha256_file(local):
            return False
        self.put(local, remote, mode, progress)
        return True

    def expand_home(self, path: str) -> str:
        """`~/x` -> the device user's home + `/x` where the transport knows it (local, ssh);
        other paths unchanged. Engines get absolute paths: no shell expands them."""
        home = getattr(self, "home", None)
        if path == "~" or path.startswith("~/"):
            if home and home != "~":
                return home + path[1:]
        return path

    def describe(self) -> str:
        return f"{self.kind}:{self.name}"
