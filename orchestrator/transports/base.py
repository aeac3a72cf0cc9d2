"""The one interface every device kind implements.

A transport moves files to a device, runs short commands there, and streams long-running
output back. It knows nothing of engines, matrices or the store: the runner drives it.

A device kind is one Transport subclass, registered as an `orch.transports` entry point
(orchestrator/plugins.py, docs/plugins.md). Besides the commands and files it brings what the
rest of orch asks of a kind: its inventory entry model (`entry_model`), its default workdir,
its constructor from an entry (`from_entry`), and its address text for `orch devices`.
Commands on the device are assumed to run under a POSIX shell only in posix.py (PosixShell).
"""
from __future__ import annotations

import abc
import hashlib
import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, ClassVar, Iterator

from pydantic import BaseModel, ConfigDict, Field
from tenacity import RetryCallState, Retrying, retry_if_exception

from orchestrator.errors import DeviceError

# progress(bytes_done, total) during a file push
PushProgress = Callable[[int, int], None]


class TransportError(DeviceError):
    """The device could not be reached or a transport operation failed (`device error: ...`,
    exit 1: orchestrator/errors.py)."""


class AccessDenied(TransportError):
    """The device refused us (host key, credentials): waiting and retrying will not help."""


class LinkLost(TransportError):
    """The connection dropped in the middle of a stream; the device may still be running."""


class CommandTimedOut(TransportError):
    """A command did not end within its timeout (it may still run on the device)."""


class RemoteFileNotFound(TransportError, FileNotFoundError):
    """The device file does not exist (both a TransportError and a FileNotFoundError)."""


@dataclass
class CommandResult:
    rc: int
    stdout: bytes
    stderr: bytes


_SHA_CACHE: dict[tuple[str, int, int], str] = {}


def sha256_file(path: Path, bufsize: int = 1 << 20) -> str:
    """Streaming sha256 of a local file, remembered per (path, size, mtime): a 20 GB model is
    hashed once per orch process however many devices and checks ask, never read whole.
    Opened with O_NONBLOCK and fstat'ed: a FIFO or device (swapped in after any earlier check)
    is refused at once (OSError), never read."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as handle:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(f"{path} is not a regular file, not hashed")
        key = (os.path.realpath(path), st.st_size, st.st_mtime_ns)
        if key not in _SHA_CACHE:
            digest = hashlib.sha256()
            while chunk := handle.read(bufsize):
                digest.update(chunk)
            _SHA_CACHE[key] = digest.hexdigest()
    return _SHA_CACHE[key]


def _retry_on(kinds: type[BaseException] | tuple[type[BaseException], ...]
              ) -> Callable[[BaseException], bool]:
    def worth(exc: BaseException) -> bool:
        return isinstance(exc, kinds) and not isinstance(exc, AccessDenied)
    return worth


@dataclass
class Outage:
    """One loss of the link, for a retry loop that outlives it (the runner's): when it began
    (time.monotonic(); None while the link works) and at which attempt."""

    since: float | None = None
    first_attempt: int = 1

    def begin(self, attempt: int) -> float:
        """The link failed at `attempt`: the outage is on (unless it already was); when it began."""
        if self.since is None:
            self.since, self.first_attempt = time.monotonic(), attempt
        return self.since

    def end(self) -> None:
        self.since = None


@dataclass(frozen=True)
class LinkPolicy:
    """How long orch keeps trying to reach a device that dropped off (`orch run --link-grace`),
    and how it backs off meanwhile. The one retry policy of orch: a transport's reconnect()
    and the runner's re-attach loop both retry through `retrying()`."""

    grace_s: float = 120.0
    first_backoff_s: float = 0.5
    max_backoff_s: float = 8.0

    def retrying(self, bound_s: float | None = None, outage: Outage | None = None,
                 sleep: Callable[[float], None] = time.sleep,
                 only: type[BaseException] | tuple[type[BaseException], ...] = TransportError
                 ) -> Retrying:
        """tenacity: retry TransportErrors (not AccessDenied) with exponential backoff
        (first_backoff_s doubling up to max_backoff_s) until `bound_s` (default grace_s) has
        passed since the outage began (default: since the first attempt). Waits are cut at
        the bound, so the last attempt starts at the bound at the latest: the whole takes at
        most bound_s plus that attempt's own time (a connect timeout). Then the last error is
        raised. With an `outage` the clock and the backoff restart whenever the caller ends
        it (the link worked again) and begins it anew. `only`: the errors worth another
        attempt (a device-side step retries LinkLost only: run/link_retry.py)."""
        bound = self.grace_s if bound_s is None else bound_s

        def clock(state: RetryCallState) -> tuple[float, int]:
            if outage is None:
                return state.start_time, 1
            since = outage.begin(state.attempt_number)  # an attempt failed: the outage is on
            return since, outage.first_attempt

        def elapsed(state: RetryCallState) -> float:
            return time.monotonic() - clock(state)[0]

        def wait(state: RetryCallState) -> float:
            tries = state.attempt_number - clock(state)[1]
            backoff = min(self.first_backoff_s * 2 ** min(tries, 30), self.max_backoff_s)
            return max(0.0, min(backoff, bound - elapsed(state)))

        return Retrying(stop=lambda state: elapsed(state) >= bound, wait=wait,
                        retry=retry_if_exception(_retry_on(only)), sleep=sleep, reraise=True)


class DeviceEntry(BaseModel):
    """What every device kind's inventory entry has; a kind's model adds `kind: Literal[...]`
    and its address fields (`extra="forbid"` keeps typos from passing silently)."""

    model_config = ConfigDict(extra="forbid")
    kind: str
    workdir: str | None = None
    description: str | None = None
    # The shell that runs the agent (`sh` on every device; tests also use mksh, dash, bash).
    shell: str = "sh"
    # Environment for agent commands, e.g. a restricted PATH or ORCH_THERMAL_DIR.
    env: dict[str, str] = Field(default_factory=dict)

    def target(self) -> tuple[object, ...]:
        """The machine this entry reaches: two entries with equal targets share a file
        system, so their workdirs must not overlap (config/workdirs.py). By default every
        address field counts (a plugin's kind is unknown here); a kind says what identifies
        a machine when fewer fields do."""
        fixed = {"workdir", "description", "shell", "env"}
        return (self.kind, *sorted((k, repr(v)) for k, v in self.model_dump().items()
                                   if k not in fixed))

    def home_of(self) -> str:
        """Whose home `~` is on the target: a workdir under ~ overlaps another under ~ only
        when both are the same user's."""
        return ""

    def expand_home(self, path: str) -> str:
        """The workdir with `~` resolved where orch can do so without the device (here)."""
        return path


class Transport(abc.ABC):
    """A connection to one device. Paths on the device are POSIX strings."""

    kind: ClassVar[str] = "?"
    entry_model: ClassVar[type[DeviceEntry]] = DeviceEntry
    # `{name}` is the device's name in the inventory
    default_workdir: ClassVar[str] = "~/.cache/orch/devices/{name}"

    @classmethod
    def workdir_for(cls, name: str) -> str:
        """The workdir of device `name` when its inventory entry gives none."""
        return cls.default_workdir.format(name=name)

    def __init__(self, name: str, workdir: str, shell: str = "sh") -> None:
        self.name = name
        self.workdir = workdir
        self.shell = shell
        self.link = LinkPolicy()   # the session sets the run's policy (--link-grace)
        self.last_sha256_source = ""  # "cached" or "computed" (last remote_sha256)

    # -- the device kind: inventory entry, construction, address ---------------------------
    @classmethod
    def from_entry(cls, name: str, entry: DeviceEntry, workdir: str) -> "Transport":
        """Build (not connect) from an inventory entry: by default its fields other than
        kind/workdir/description are the constructor's keyword arguments."""
        fields = entry.model_dump(exclude={"kind", "workdir", "description"})
        return cls(name, workdir=workdir, **fields)

    @classmethod
    def address(cls, entry: DeviceEntry) -> str:
        """Where the device is, for `orch devices` (e.g. user@host:port)."""
        return ""

    @classmethod
    def host_key_address(cls, entry: DeviceEntry) -> tuple[str, int, str] | None:
        """(host, port, known_hosts file) for `orch devices trust`; None: no host keys."""
        return None

    # -- lifecycle ---------------------------------------------------------------------------
    def connect(self) -> None:
        """Open the connection and resolve `workdir` to an absolute path on the device."""

    def close(self) -> None:
        """Release the connection; never kills anything running detached on the device."""

    def reconnect(self, within: float | None = None) -> None:
        """close() and connect() again, with the link policy's backoff, for at most `within`
        s (default: link.grace_s) plus one connect attempt. AccessDenied is not retried."""
        bound = self.link.grace_s if within is None else within
        try:
            for attempt in self.link.retrying(bound):
                with attempt:
                    self.close()
                    self.connect()
        except AccessDenied:
            raise
        except TransportError as exc:
            raise TransportError(f"{self.name}: no connection within {bound:g} s: {exc}") \
                from exc

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
        """Read a whole (small) file from the device (RemoteFileNotFound when absent). Raw:
        no type or size check; orch reads device files through transports/fetch.py."""

    @abc.abstractmethod
    def remote_size(self, remote: str) -> int | None:
        """Size of a device file (symlinks followed), None when it does not exist."""

    @abc.abstractmethod
    def remote_sha256(self, remote: str) -> str | None:
        """sha256 of a device file, None when it does not exist; sets last_sha256_source."""

    def remember_sha256(self, remote: str, digest: str) -> None:
        """Tell the device's sha256 cache what a file just pushed hashes to (optional)."""

    def _path(self, remote: str) -> str:
        """A device path as commands see it (transports resolve relative ones)."""
        return remote

    def _put_file(self, local: Path, remote: str, mode: int,
                  progress: PushProgress | None) -> str:
        """put(), returning the sha256 of what was sent; a kind that hashes while sending
        overrides it to spare a second read of the file."""
        self.put(local, remote, mode, progress)
        return sha256_file(local)

    def push_if_changed(self, local: Path, remote: str, mode: int = 0o644,
                        progress: PushProgress | None = None) -> bool:
        """Push unless the device has the same file: size first (cheap), then sha256. The
        device's sha256 cache learns what was pushed. True if pushed. One push of a
        destination at a time per device on this controller (push_lock): a second orch
        process waits, then finds the file there and pushes nothing."""
        from orchestrator.transports.push_lock import push_lock

        local, remote = Path(local), self._path(remote)
        with push_lock(self.describe(), remote):
            if self.remote_size(remote) == local.stat().st_size and \
                    self.remote_sha256(remote) == sha256_file(local):
                return False
            self.remember_sha256(remote, self._put_file(local, remote, mode, progress))
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

