"""The stored rows as frozen values: `RunRow` (a run's columns, its device's and session's
names, its record parsed once, its clock) and `SessionRow` (a session's columns; its matrix
as stored text, which the reader parses: db/ knows no matrix). db/runs.py reads them out of
the store; db/figures.py computes and stores a run's figures from them. Their own module so
that neither of those two imports the other for the type (import-linter counts type-only
imports).
"""
from __future__ import annotations

import dataclasses
import datetime as dt
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

from orchestrator.db import schema
from orchestrator.stats.config_key import ConfigKey, build_label
from orchestrator.stats.figures import RunFigures
from orchestrator.stats.overlap import overlapped

if TYPE_CHECKING:
    from orchestrator.record import RunRecord

RUN_COLUMNS = tuple(c.name for c in schema.run.columns)
SESSION_COLUMNS = tuple(c.name for c in schema.session.columns)

# `run.time_source`: where an imported run's started_at came from. These are the study's own
# records of when it ran, local wall-clock times kept as written (naive: no zone is invented);
# FILE_TIME is the file's modification time in UTC, a guess when the files said nothing. A live
# run has none: orch's clock timed it, in UTC.
LOCAL_TIME_SOURCES = ("file name", "preamble", "trailer", "metrics", "log", "state", "design",
                      "option", "folder name", "design date", "option date")
DATE_ONLY = "folder name"   # only the day is known: shown as a date, never as midnight
# every source that knows only the day (a design's or --measured's date without a time too):
# source -> how a view names it
DATE_ONLY_SOURCES = {"folder name": "folder date", "design date": "design's date",
                     "option date": "--measured date"}
NO_TIME = "unknown"       # an imported summary-only run whose log records no time
FILE_TIME = "mtime"


def parse_settings(flags: str | None) -> dict[str, str]:
    """An imported run's `flags` (the importer writes the engine's settings as space-separated
    `key=value` pairs) as a dict, values as written. A word without `=` continues the value
    before it, so a value holding a space survives; words before the first pair are dropped
    (the raw `flags` stay beside this in every view)."""
    settings: dict[str, str] = {}
    key = None
    for word in (flags or "").split():
        name, eq, value = word.partition("=")
        if eq and name:
            key = name
            settings[key] = value
        elif key is not None:
            settings[key] += " " + word
    return settings


@dataclass(frozen=True)
class RunRow:
    """One stored run (a cell execution) with its device's and session's names."""

    id: int
    uid: str
    session_id: int
    device_id: int
    cell_key: str
    model: str                          # always written (runner, import, lab), though
    config: str                         # the baseline schema left the columns nullable
    flags: str | None
    argv: Any
    repeat_index: int                   # always written (0-based; the schema's default 0)
    order_index: int | None
    status: str
    cause: str | None
    rc: int | None
    signal: int | None
    started_at: dt.datetime | None
    ended_at: dt.datetime | None
    cooldown_s: float | None
    cooldown_met: bool | None
    temp_start: Any
    mem_avail_start_kb: int | None
    engine: str | None
    engine_build: str | None
    binary_path: str | None
    binary_sha256: str | None
    model_size: int | None
    model_sha256: str | None
    remote_dir: str | None
    spool_lines: int | None
    summary: Any
    text: str | None
    warnings: Any
    superseded: bool
    time_source: str | None = None
    source_file: str | None = None
    figures: Any = None                 # RunFigures.stored(): read through `stored_figures`
    device: str = ""
    matrix_name: str | None = None
    session_name: str | None = None
    session_started: dt.datetime | None = None
    session_kind: str | None = None     # "run", "import", ... (session.kind)

    @cached_property
    def record(self) -> RunRecord:
        """What the engine reported about the run as a whole, typed (record.py)."""
        from orchestrator.record import load_record

        return load_record(self.summary)

    @cached_property
    def stored_figures(self) -> RunFigures | None:
        """The figures stored when the run ended or was imported (stats/figures.py), None
        while it runs or when they are of another FIGURES_VERSION (Runs.figures computes
        them then)."""
        return RunFigures.from_stored(self.figures)

    @property
    def overlapped(self) -> bool | None:
        """Whether its flash I/O ran beside compute (stats/overlap.py): an import's settings,
        else its argv and flags."""
        return overlapped(self.settings, self.argv, self.flags, self.engine)

    def overlapped_with(self, record: RunRecord) -> bool | None:
        """`overlapped` with `record` as its record (a run being ended or imported, whose
        record is not stored yet)."""
        settings = (dict(record.settings) or parse_settings(self.flags)) if self.imported \
            else None
        return overlapped(settings, self.argv, self.flags, self.engine)

    @property
    def build(self) -> str | None:
        """The engine build it measured (stats/config_key.py build_label)."""
        return build_label(self.binary_path, self.engine_build)

    @property
    def config_key(self) -> ConfigKey:
        """What config it measured (stats/config_key.py: model, name, settings, build)."""
        return ConfigKey.of(self.model, self.config, self.flags, self.model_sha256, self.build,
                            session=self.session_requests)

    @property
    def session_requests(self) -> Any:
        """A session run's requests as its record keeps them (docs/sessions.md); None for a
        one-shot run. Read from the stored summary as it is (no record model)."""
        summary = self.summary if isinstance(self.summary, dict) else {}
        extra = summary.get("extra")
        return extra.get("session") if isinstance(extra, dict) else None

    @property
    def imported(self) -> bool:
        """Read from a study's files by `orch import`, not run by orch."""
        return self.session_kind == "import" or self.source_file is not None \
            or self.time_source is not None

    @property
    def clock(self) -> str:
        """What timed started_at: "orch" (a live run, UTC), "local" (the study's own record,
        local wall-clock time) or "file" (the file's mtime, UTC: the files did not record when
        it ran; also every import stored before time_source existed, which took the mtime).
        A source this orch does not know is still the study's record: local."""
        if self.time_source in (FILE_TIME, NO_TIME):
            return "file"
        if self.time_source is not None:
            return "local"
        return "file" if self.imported else "orch"

    @property
    def date_only(self) -> bool:
        """Only the day it ran is known (DATE_ONLY_SOURCES): shown as a date, never a time."""
        return self.time_source in DATE_ONLY_SOURCES

    @property
    def date_note(self) -> str:
        """Where the day came from, as a view says it (`folder date`, `design's date`)."""
        return DATE_ONLY_SOURCES.get(self.time_source or "", "date")

    @property
    def settings(self) -> dict[str, Any] | None:
        """An imported run's settings: the engine's resolved settings its files gave (the CSV
        preamble's key=values, kept in the record), else those parsed from `flags`; None for a
        live run, whose flags are the engine's command-line flags."""
        if not self.imported:
            return None
        return dict(self.record.settings) or parse_settings(self.flags)

    def as_dict(self) -> dict[str, Any]:
        """The stored columns and names, without the parsed record and the stored figures
        (export: its `stat_` columns are the figures, Runs.figures)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if f.name != "figures"}

    def replace(self, **values: Any) -> RunRow:
        """A copy with some fields changed (a view's relabelled config, say)."""
        return dataclasses.replace(self, **values)

    @classmethod
    def of(cls, row: Any) -> RunRow:
        m = row._mapping
        return cls(**{k: m[k] for k in RUN_COLUMNS},
                   device=m.get("device", ""), matrix_name=m.get("matrix_name"),
                   session_name=m.get("session_name"),
                   session_started=m.get("session_started"),
                   session_kind=m.get("session_kind"))


@dataclass(frozen=True)
class SessionRow:
    """One stored session (an `orch run` on one device, an import, a lab submission's
    device part)."""

    values: dict[str, Any]

    def __getattr__(self, name: str) -> Any:
        try:
            return self.values[name]
        except KeyError:
            raise AttributeError(name) from None

    @classmethod
    def of(cls, row: Any) -> SessionRow:
        return cls(dict(row._mapping))
