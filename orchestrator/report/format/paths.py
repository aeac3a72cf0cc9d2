"""How a published document shows the paths and hosts it records (the report's provenance,
`orch export`).

A document leaves the machine it was made on: by default it shows a path relative to the
study (an import's folder, a live session's matrix folder) and any other absolute path by its
file name alone, and no user@host; `full` (`--provenance full`) shows everything as stored.
The file names, hashes, flags and device names that identify what ran are kept either way.
The rule is docs/report.md's "Provenance".
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import PurePath, PurePosixPath
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from orchestrator.results.listings import RunRow, SessionRow

# an absolute path inside a command line or a key=value list: after a space, `=`, `:`, a
# quote or a parenthesis, up to the next space, quote, comma or semicolon
_ABSOLUTE = re.compile(r"(?<![^\s=:'\"(])(~?/[^\s'\",;]+)")


def base_of(session: SessionRow | None) -> str | None:
    """The folder a session's paths are relative to: an import's folder, else the folder of
    the matrix file it ran."""
    if session is None:
        return None
    values = session.values
    if values.get("source_dir"):
        return values["source_dir"]
    return os.path.dirname(values["matrix_path"]) if values.get("matrix_path") else None


@dataclass(frozen=True)
class Paths:
    full: bool = False

    def path(self, value: str | None, base: str | None = None) -> str:
        """One path as the document shows it ("" for none)."""
        if not value:
            return ""
        if self.full or not _absolute(value):
            return value
        if base:
            try:
                return PurePosixPath(value).relative_to(base).as_posix() or "."
            except ValueError:
                pass
        return PurePath(value).name or value

    def text(self, value: str | None, base: str | None = None) -> str | None:
        """A command line or flag string with each absolute path in it shown as `path`."""
        if not value or self.full:
            return value
        return _ABSOLUTE.sub(lambda m: self.path(m.group(1), base), value)

    def argv(self, value: Any, base: str | None = None) -> Any:
        """An argv list with its paths shown as `path` (other values unchanged)."""
        if self.full or not isinstance(value, list):
            return value
        return [self.text(a, base) if isinstance(a, str) else a for a in value]

    def host(self, value: str | None) -> str | None:
        """user@host of the controller: only in full."""
        return value if self.full else None

    def run_file(self, row: RunRow, base: str | None = None) -> str:
        """The file an imported run was read from: its path in the study folder (the
        `source_file` the importer stored), or in full the absolute path."""
        if self.full:
            return row.remote_dir or row.source_file or ""
        return row.source_file or self.path(row.remote_dir, base)


SHARE = Paths()     # the default: a document to share


def _absolute(value: str) -> bool:
    return value.startswith(("/", "~")) or bool(re.match(r"^[A-Za-z]:[\\/]", value))
