"""The `directory` device kind: a directory of this machine as a device. Commands run with
the entry's shell inside `root`, the workdir lives under it. Files and streams are the local
kind's: only the entry, the address and where commands run differ."""
from __future__ import annotations

from pathlib import Path
from typing import Iterator, Literal

from orchestrator.transports.base import CommandResult, DeviceEntry
from orchestrator.transports.local import LocalTransport

# cd into $1, then run the rest as the command (exec: the agent's pid is the command's)
_IN_ROOT = 'cd -- "$1" && shift && exec "$@"'


class DirectoryEntry(DeviceEntry):
    kind: Literal["directory"]
    root: str


class DirectoryTransport(LocalTransport):
    kind = "directory"
    entry_model = DirectoryEntry
    default_workdir = "orch-{name}"   # relative: under root

    def __init__(self, name: str, root: str, workdir: str, shell: str = "sh",
                 env: dict[str, str] | None = None) -> None:
        super().__init__(name, workdir, shell, env)
        self.root = str(Path(root).expanduser().resolve())

    @classmethod
    def address(cls, entry: DeviceEntry) -> str:
        return f"directory {entry.root}"

    def connect(self) -> None:
        self.workdir = str(Path(self.root, self.workdir))  # an absolute workdir stays as is
        super().connect()

    def _in_root(self, argv: list[str]) -> list[str]:
        return [self.shell, "-c", _IN_ROOT, "sh", self.root, *argv]

    def run(self, argv: list[str], timeout: float = 60.0) -> CommandResult:
        return super().run(self._in_root(argv), timeout)

    def stream(self, argv: list[str]) -> Iterator[bytes]:
        return super().stream(self._in_root(argv))

    def describe(self) -> str:
        return f"directory:{self.name} ({self.root})"
