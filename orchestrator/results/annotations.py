"""Annotations (docs/regressions.md): notes on sessions and runs (`orch note`) and
acknowledged regressions (`orch ack`), and the stable id of a change point that an
acknowledgement names.

A change point's id is derived from what locates the step, never from its figures (which move
as sessions are added): the device, the matrix, the model and config as measured, and the
first session after the step. The same step found by `orch history`, the report's regressions
section, the feed and the lab's webhook has the same id.
"""
from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from orchestrator.db import annotations as db
from orchestrator.db.runs import Runs, Sessions
from orchestrator.db.store import Store
from orchestrator.errors import ConfigError, NotFound

ID_LEN = 10          # hex digits of a change point id; `orch ack` takes a unique prefix
MIN_PREFIX = 4


@dataclass(frozen=True)
class Note:
    id: int
    target_kind: str                 # session | run | change_point
    target: str
    text: str
    author: str | None
    created_at: dt.datetime | None

    @classmethod
    def of(cls, row: Any) -> Note:
        return cls(row.id, row.target_kind, row.target, row.text, row.author, row.created_at)

    def record(self) -> dict[str, Any]:
        return {"id": self.id, "on": self.target_kind, "target": self.target, "text": self.text,
                "author": self.author,
                "created_at": self.created_at.isoformat() if self.created_at else None}


@dataclass
class Notes:
    """The notes of some sessions and runs, by id, oldest first."""

    sessions: dict[int, list[Note]] = field(default_factory=dict)
    runs: dict[int, list[Note]] = field(default_factory=dict)

    def of_point(self, session: int, runs: Iterable[int]) -> list[Note]:
        """A history point's notes: its session's, then its runs'."""
        return [*self.sessions.get(session, []),
                *(n for r in runs for n in self.runs.get(r, []))]

    def all(self) -> list[Note]:
        return [n for d in (self.sessions, self.runs) for ns in d.values() for n in ns]


def changepoint_id(device: str, matrix: str, model: str, config: str, session: int) -> str:
    """The stable id of the step in (device, matrix, model, config) that starts at `session`."""
    key = "\x1f".join((device, matrix, model, config, str(session)))
    return hashlib.sha1(key.encode()).hexdigest()[:ID_LEN]


def notes_of(store: Store, sessions: Iterable[int] = (), runs: Iterable[int] = ()) -> Notes:
    """The notes of these sessions and runs. Notes are few: every one is read and those of
    the ids kept (an IN list of a big history's run ids would pass the database's limit)."""
    out = Notes()
    for kind, ids, into in (("session", sessions, out.sessions), ("run", runs, out.runs)):
        wanted = set(ids)
        for row in db.annotation_rows(store, kind):
            if int(row.target) in wanted:
                into.setdefault(int(row.target), []).append(Note.of(row))
    return out


def acknowledgements(store: Store) -> dict[str, Note]:
    """Change point id -> its newest acknowledgement."""
    return {row.target: Note.of(row) for row in db.annotation_rows(store, "change_point")}


def all_notes(store: Store) -> list[Note]:
    """Every annotation, oldest first (`orch notes`)."""
    return [Note.of(row) for row in db.annotation_rows(store)]


def add_note(store: Store, on: str, target: int, text: str, author: str | None) -> Note:
    """Note `text` on session or run `target` (NotFound when the store has none)."""
    if not text.strip():
        raise ConfigError("a note needs a text")
    exists = Sessions(store).get(target) if on == "session" else Runs(store).get(target)
    if exists is None:
        raise NotFound(f"no {on} {target} in {store.url}")
    note_id = db.add_annotation(store, on, str(target), text.strip(), author)
    return next(n for n in all_notes(store) if n.id == note_id)


def acknowledge(store: Store, given: str, reason: str, author: str | None,
                known: Iterable[str]) -> Note:
    """Acknowledge the change point `given` (its id, or a unique prefix of one of `known`,
    the ids the store's regressions have now). A full id not among them is taken as given:
    a step the report showed may not be a change point of the history."""
    given = given.strip().lower()
    matches = sorted({k for k in known if k.startswith(given)})
    if len(matches) > 1:
        raise ConfigError(f"{given!r} names several change points ({', '.join(matches)}): "
                          f"give more of the id")
    if matches:
        target = matches[0]
    elif len(given) == ID_LEN and all(c in "0123456789abcdef" for c in given):
        target = given
    else:
        raise NotFound(f"no change point {given!r} in {store.url} (ids: `orch history`, "
                       f"`orch feed`, the report's regressions section)")
    if len(given) < MIN_PREFIX:
        raise ConfigError(f"{given!r}: give at least {MIN_PREFIX} characters of the id")
    note_id = db.add_annotation(store, "change_point", target, reason.strip() or "acknowledged",
                                author)
    return next(n for n in all_notes(store) if n.id == note_id)
