"""The machine orch runs on, as a device: subprocesses and plain file copies."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Iterator, Literal

from orchestrator.transports.base import (
    CommandResult,
    CommandTimedOut,
    DeviceEntry,
    PushProgress,
    RemoteFileNotFound,
    TransportError,
)
from orchestrator.transports.posix import PosixTransport
from orchestrator.transports.push_lock import unique_suffix


class LocalEntry(DeviceEntry):
    kind: Literal["local"]

    def target(self) -> tuple[object, ...]:
        return ("local",)

    def expand_home(self, path: str) -> str:
        return os.path.expanduser(path)


class LocalTransport(PosixTransport):
    kind = "local"
    entry_model = LocalEntry
    default_workdir = "~/.cache/orch/devices/{name}"

    @classmethod
    def workdir_for(cls, name: str) -> str:
        """The default workdir; one under ~/.cache (this kind's: ~/.cache/orch/devices/NAME)
        moves to $XDG_CACHE_HOME when that is set, as orch's llama.cpp builds do. A subclass's
        own default elsewhere (a plugin's) stays as it is."""
        path, cache = super().workdir_for(name), os.environ.get("XDG_CACHE_HOME")
        home_cache = "~/.cache/"
        return os.path.join(cache, path[len(home_cache):]) if cache and \
            path.startswith(home_cache) else path

    @classmethod
    def address(cls, entry: DeviceEntry) -> str:
        return "this machine"

    def expand_home(self, path: str) -> str:
        return os.path.expanduser(path)

    def connect(self) -> None:
        self.workdir = str(Path(os.path.expanduser(self.workdir)).resolve())
        try:
            Path(self.workdir).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise TransportError(f"{self.name}: cannot create workdir {self.workdir}: "
                                 f"{exc.strerror or exc}") from None
        if not os.access(self.workdir, os.W_OK):   # a read-only mount says so for root too
            raise TransportError(f"{self.name}: workdir {self.workdir} is not writable")

    def _env(self) -> dict[str, str]:
        # the user's environment: not the thread bounds orch set for its own numpy
        from orchestrator.address_space import user_environ

        return {**user_environ(), **self.env}

    def run(self, argv: list[str], timeout: float = 60.0) -> CommandResult:
        """Run argv to its end. In a session of its own: a timeout, Ctrl-C or SIGTERM kills
        its whole process group, not only the shell (whose `sha256sum` of a huge or endless
        file would read on); what a command detaches on purpose (`setsid`) is not touched."""
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, env=self._env(),
                                    start_new_session=True)
        except FileNotFoundError as exc:
            raise TransportError(f"{self.name}: cannot run {argv[0]!r}: {exc.strerror}") from None
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            raise CommandTimedOut(f"{self.name}: {argv[0]} did not finish within {timeout:g} s") \
                from None
        except BaseException:
            _kill_group(proc)
            raise
        return CommandResult(proc.returncode, out, err)

    def stream(self, argv: list[str]) -> Iterator[bytes]:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=self._env())
        assert proc.stdout is not None
        try:
            while chunk := os.read(proc.stdout.fileno(), 65536):
                yield chunk
        finally:
            # The consumer may stop early (it saw the X line); never leave the follower behind.
            if proc.poll() is None:
                proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            proc.stdout.close()
            if proc.stderr is not None:
                proc.stderr.close()

    def put(self, local: Path, remote: str, mode: int = 0o644,
            progress: PushProgress | None = None) -> None:
        target = Path(remote)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(target.name + unique_suffix())   # two pushes never share it
        try:
            shutil.copyfile(local, tmp)
            if progress is not None:
                size = Path(local).stat().st_size
                progress(size, size)
            os.chmod(tmp, mode)
            os.replace(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)

    def put_bytes(self, data: bytes, remote: str, mode: int = 0o644) -> None:
        target = Path(remote)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        os.chmod(target, mode)

    def remote_size(self, remote: str) -> int | None:
        try:
            return os.stat(remote).st_size
        except FileNotFoundError:
            return None

    def get_bytes(self, remote: str) -> bytes:
        try:
            return Path(remote).read_bytes()
        except FileNotFoundError:
            raise RemoteFileNotFound(f"{self.name}: reading {remote}: no such file") from None
        except OSError as exc:
            raise TransportError(f"{self.name}: cannot read {remote}: {exc.strerror}") from None


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the process group `proc` leads, then reap it (its pipes closed)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.communicate()
