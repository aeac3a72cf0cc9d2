"""The machine orch runs on, as a device: subprocesses and plain file copies."""
from __future__ import annotations

import os
import shutil
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


class LocalEntry(DeviceEntry):
    kind: Literal["local"]


class LocalTransport(PosixTransport):
    kind = "local"
    entry_model = LocalEntry
    default_workdir = "~/.cache/orch/devices/{name}"

    @classmethod
    def address(cls, entry: DeviceEntry) -> str:
        return "this machine"

    def expand_home(self, path: str) -> str:
        return os.path.expanduser(path)

    def connect(self) -> None:
        self.workdir = str(Path(os.path.expanduser(self.workdir)).resolve())
        Path(self.workdir).mkdir(parents=True, exist_ok=True)

    def _env(self) -> dict[str, str]:
        return {**os.environ, **self.env}

    def run(self, argv: list[str], timeout: float = 60.0) -> CommandResult:
        try:
            done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True,
                                  timeout=timeout, env=self._env())
        except FileNotFoundError as exc:
            raise TransportError(f"{self.name}: cannot run {argv[0]!r}: {exc.strerror}") from None
        except subprocess.TimeoutExpired:
            raise CommandTimedOut(f"{self.name}: {argv[0]} did not finish within {timeout:g} s") \
                from None
        return CommandResult(done.returncode, done.stdout, done.stderr)

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
        tmp = target.with_name(target.name + ".orch-tmp")
        shutil.copyfile(local, tmp)
        if progress is not None:
            size = Path(local).stat().st_size
            progress(size, size)
        os.chmod(tmp, mode)
        os.replace(tmp, target)

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
