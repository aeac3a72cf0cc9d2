"""Parse the agent's tagged line stream (protocol v1, docs/agent-protocol.md)."""
from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from orchestrator.line_bound import CUT
from orchestrator.transports.fetch import SPOOL_LINE

PROTO = "1"


@dataclass
class Sample:
    t_ms: int
    values: dict[str, int]


@dataclass
class Exit:
    rc: int
    signal: int
    t_ms: int
    cause: str | None = None
    # further key=value fields (cause=aborted: sensor, value_mC, above_mC)
    fields: dict[str, str] = field(default_factory=dict)


@dataclass
class TurnEvent:
    """A T line: a session's step on the device (docs/agent-protocol.md, "Sessions"): the
    agent sent turn `turn`'s request (`sent`), saw its BMOE_DONE (`done`), a BMOE_ERROR that
    failed it (`error`) or ended the session (`fatal`), sent `cancel` at its deadline
    (`cancel`), or `close` after the last turn (`close`); `t_ms` as in S lines."""

    turn: int
    t_ms: int
    event: str


@dataclass
class Event:
    tag: str                        # H F S C O E W X T
    text: str = ""                  # C/O/E/W payload
    fields: dict[str, str] = field(default_factory=dict)   # H key=value, F key/value
    sample: Sample | None = None
    exit: Exit | None = None
    turn: TurnEvent | None = None


class ProtocolError(ValueError):
    pass


class GarbledExit(ProtocolError):
    """An X line whose rc, signal or t_ms is not a number: the engine ended, how is unknown."""


def _int(value: str) -> int | None:
    try:
        return int(value)
    except ValueError:
        return None


def parse_line(line: str) -> Event:
    """One stream line (without its newline) -> Event. Unknown tags raise ProtocolError."""
    tag, _, rest = line.partition("\t")
    if tag in ("C", "O", "E", "W"):
        return Event(tag, text=rest)
    if tag == "S":
        parts = rest.split("\t")
        t_ms = _int(parts[0]) or 0
        values: dict[str, int] = {}
        for part in parts[1:]:
            key, _, value = part.partition("=")
            number = _int(value)
            if key and number is not None:
                values[key] = number
        return Event(tag, sample=Sample(t_ms, values))
    if tag == "X":
        parts = rest.split("\t")
        if len(parts) < 3:
            raise GarbledExit(f"short X line: {line[:80]!r}")
        cause = None
        more: dict[str, str] = {}
        for extra in parts[3:]:
            key, _, value = extra.partition("=")
            if key == "cause":
                cause = value
            elif key:
                more[key] = value
        # rc, signal and t_ms must all be numbers: a garbled X line is an error, never
        # "rc 0" (which would make a run ok on no evidence)
        rc, signal, ended_ms = (_int(part) for part in parts[:3])
        if rc is None or signal is None or ended_ms is None:
            raise GarbledExit(f"garbled X line: {line[:80]!r}")
        return Event(tag, exit=Exit(rc, signal, ended_ms, cause, more))
    if tag == "T":
        return Event(tag, text=rest, turn=_turn_event(line, rest))
    if tag == "H":
        fields = dict(p.partition("=")[::2] for p in rest.split("\t") if p)
        if fields.get("proto") != PROTO:
            raise ProtocolError(f"agent speaks protocol {fields.get('proto')!r}, orch speaks {PROTO}")
        return Event(tag, fields=fields)
    if tag == "F":
        key, _, value = rest.partition("\t")
        return Event(tag, fields={key: value})
    raise ProtocolError(f"unknown stream line: {line[:80]!r}")


def _turn_event(line: str, rest: str) -> TurnEvent:
    """A T line's fields: TURN and T_MS numbers, an EVENT word."""
    parts = rest.split("\t")
    turn = _int(parts[0])
    t_ms = _int(parts[1]) if len(parts) > 1 else None
    if len(parts) < 3 or turn is None or t_ms is None or not parts[2]:
        raise ProtocolError(f"garbled T line: {line[:80]!r}")
    return TurnEvent(turn, t_ms, parts[2])


class LineSplitter:
    """Bytes in, complete decoded lines out. A trailing partial line waits for its newline:
    the runner counts only complete lines, so a re-attach never splits or repeats one. A line
    longer than `max_line` bytes (SPOOL_LINE: an engine printing without newlines, a link to
    /dev/zero as its output) is cut there, marked CUT, and the rest of it dropped up to its
    newline: it still counts as one line, and memory holds no more than the bound."""

    def __init__(self, max_line: int = SPOOL_LINE.max_bytes) -> None:
        self._pending = b""
        self._max = max_line
        self._cut = False   # the pending line is over the bound: its rest is dropped

    def feed(self, chunk: bytes) -> Iterator[str]:
        if self._cut:
            # the rest of an over-long line up to its newline is dropped unread: a 100 MB
            # line costs one find per chunk, not a copy of the pending bound per chunk
            end = chunk.find(b"\n")
            if end < 0:
                return
            chunk = chunk[end:]
        data = self._pending + chunk
        *lines, self._pending = data.split(b"\n")
        for raw in lines:
            cut, self._cut = self._cut or len(raw) > self._max, False
            yield raw[:self._max].decode("utf-8", errors="replace") + (CUT if cut else "")
        if len(self._pending) > self._max:
            self._pending, self._cut = self._pending[:self._max], True


def facts_from_lines(lines: Iterable[str]) -> dict[str, str]:
    facts: dict[str, str] = {}
    for line in lines:
        if line.startswith("F\t"):
            event = parse_line(line)
            facts.update(event.fields)
    return facts
