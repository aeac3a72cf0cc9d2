"""bmoe-cli's session lines (docs/formats.md, "Session mode"): `BMOE_<TAG> {flat json}` lines
on stdout, read as they stream, into the run's turns (record.Turn).

One Turn per `BMOE_DONE`, numbered 1.. in the order they come; a non-fatal `BMOE_ERROR` naming
a request is a Turn with `error` set (a rejected request: 0 tokens); a fatal one ends the
session (`SessionLines.fatal`), and the turn it interrupted is a Turn with that error. A turn
begun (`BMOE_BEGIN`) whose DONE never came (the engine died) is a Turn marked
`extra["incomplete"]`, with the tokens its `BMOE_PROGRESS` lines counted.

Pure, no I/O. BmoeRunParser (engines/bmoe.py) feeds it stdout lines; the importer calls
turns_from_lines on files of turn records.
"""
from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from typing import Any

from orchestrator.record import Turn, ttft

PREFIX = "BMOE_"
MAX_PROGRESS_KEPT = 10_000   # PROGRESS bodies kept for an unfinished turn's partial text
_DECODE = json.JSONDecoder().raw_decode   # a body followed by glued text or a CR still reads

# BMOE_DONE key -> Turn field, with the type it must have (anything else stays in extra)
_NUMBERS = {"tok_s": "decode_tps", "prefill_s": "prefill_s", "prefill_tps": "prefill_tps",
            "cache_hit_pct": "cache_hit_pct", "read_mib": "read_mib",
            "compute_s_tok": "compute_s_per_token", "io_s_tok": "io_s_per_token",
            "stall_s_tok": "stall_s_per_token", "mgmt_s_tok": "mgmt_s_per_token"}
_COUNTS = {"tokens": "tokens", "n_prompt": "prompt_tokens", "n_past": "context_tokens"}


def _number(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _count(value: Any) -> int | None:
    number = _number(value)
    return int(number) if number is not None and number == int(number) and number >= 0 else None


def _request_id(value: Any) -> int | str | None:
    return value if isinstance(value, (int, str)) and not isinstance(value, bool) else None


def split_line(line: str) -> tuple[str, str] | None:
    """(TAG, body) of a `BMOE_<TAG> {json}` line, wherever in the line it starts (a driver
    may prefix it), or None."""
    at = line.find(PREFIX)
    if at < 0:
        return None
    tag, sep, body = line[at + len(PREFIX):].partition(" ")
    if not sep or not tag.isupper():
        return None
    return tag, body


def turn_from_done(number: int, done: Mapping[str, Any], first: bool) -> Turn:
    """A `BMOE_DONE` object as Turn `number`. `first`: the session's first finished turn,
    which waited for the model load (its TTFT counts it; later DONEs repeat the same load)."""
    fields: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for key, value in done.items():
        if key in _NUMBERS and _number(value) is not None:
            fields[_NUMBERS[key]] = _number(value)
        elif key in _COUNTS and _count(value) is not None:
            fields[_COUNTS[key]] = _count(value)
        elif key == "id":
            fields["request_id"] = _request_id(value)
        elif key == "cancelled" and isinstance(value, bool):
            fields["cancelled"] = value
        elif key == "text" and isinstance(value, str):
            fields["text"] = value
        elif key == "load_s" and first and _number(value) is not None:
            fields["load_s"] = _number(value)
        else:
            extra[key] = value
    prefill = fields.get("prefill_s")
    fields["ttft_s"] = ttft(fields.get("load_s"), prefill) if first else prefill
    return Turn(turn=number, extra=extra, **fields)


class SessionLines:
    """Incremental reader of one session's BMOE_* lines (feed each stdout line)."""

    def __init__(self) -> None:
        self.ready: dict[str, Any] | None = None   # the BMOE_READY object
        self.fatal: str | None = None              # a fatal BMOE_ERROR's message
        self.errors: list[str] = []                # unreadable lines and request-less errors
        self.seen = False                          # a READY, BEGIN, DONE or ERROR arrived
        self._turns: list[Turn] = []
        self._open: dict[str, Any] | None = None   # the BEGIN of the turn in flight
        self._progress: list[str] = []             # its PROGRESS bodies (for a partial text)
        self._steps = 0                            # ... and how many there were
        self._loaded = False                       # a DONE has taken the model load

    def feed(self, line: str) -> bool:
        """Take one stdout line; False when it is not a BMOE line (the caller keeps it)."""
        if line.startswith("BMOE_PROGRESS "):      # the hot path, one per token
            if self._open is not None:
                self._steps += 1
                if len(self._progress) < MAX_PROGRESS_KEPT:
                    self._progress.append(line)
            return True
        parts = split_line(line)
        if parts is None:
            return False
        tag, body = parts
        if tag in ("PROGRESS", "LOAD"):   # LOAD: flash reads per token, the CSV has them
            if tag == "PROGRESS" and self._open is not None:
                self._steps += 1
            return True
        try:
            obj, _ = _DECODE(body.strip())
            if not isinstance(obj, dict):
                raise ValueError("not a JSON object")
        except ValueError as exc:
            self.errors.append(f"unreadable BMOE_{tag} line ({exc}): {line.strip()[:120]}")
            return True
        self._control(tag, obj)
        return True

    def _control(self, tag: str, obj: dict[str, Any]) -> None:
        if tag == "READY":
            self.seen, self.ready = True, obj
        elif tag == "BEGIN":
            self.seen = True
            if self._open is not None:   # a BEGIN without its DONE: that turn never finished
                self._turns.append(self._unfinished(len(self._turns) + 1, None))
            self._open, self._progress, self._steps = obj, [], 0
        elif tag == "DONE":
            self.seen = True
            first = not self._loaded
            if first and "load_s" not in obj and self.ready and "load_s" in self.ready:
                obj = {**obj, "load_s": self.ready["load_s"]}   # the load READY reported
            self._turns.append(turn_from_done(len(self._turns) + 1, obj, first))
            self._loaded = True
            self._open = None
        elif tag == "ERROR":
            self.seen = True
            self._error(obj)

    def _error(self, obj: dict[str, Any]) -> None:
        rid = _request_id(obj.get("id"))
        msg = str(obj.get("msg") or "no message").strip()
        fatal = obj.get("fatal") is True
        if fatal:
            self.fatal = msg
        if self._open is not None and (fatal or rid == _request_id(self._open.get("id"))):
            self._turns.append(self._unfinished(len(self._turns) + 1, msg, fatal=fatal))
            self._open = None
        elif rid is not None:      # a rejected request: it never began
            self._turns.append(Turn(turn=len(self._turns) + 1, request_id=rid, tokens=0,
                                    error=msg, extra={"fatal": True} if fatal else {}))
        elif not fatal:
            self.errors.append(f"BMOE_ERROR: {msg}")

    def _unfinished(self, number: int, error: str | None, fatal: bool = False) -> Turn:
        """The turn in flight when its generation ended without a DONE: its tokens and text
        so far, from its PROGRESS lines."""
        assert self._open is not None
        extra: dict[str, Any] = {"incomplete": True}
        if fatal:
            extra["fatal"] = True
        return Turn(turn=number, request_id=_request_id(self._open.get("id")),
                    tokens=self._steps, error=error, text=_delta_text(self._progress) or None,
                    extra=extra)

    def turns(self) -> list[Turn]:
        """The turns so far, with the one in flight (if any) as unfinished; state unchanged,
        so it may be asked again after more lines."""
        if self._open is None:
            return list(self._turns)
        return [*self._turns, self._unfinished(len(self._turns) + 1, None)]

    @property
    def in_flight(self) -> bool:
        return self._open is not None

    def complete(self, expected_turns: int | None = None) -> bool:
        """The session ended well: no fatal error, no turn left in flight, at least one turn
        DONE, and as many turns as were requested when that is known. A rejected request (a
        non-fatal error) does not make it incomplete: its Turn says it failed."""
        done = [t for t in self._turns if t.error is None]
        return (self.fatal is None and self._open is None and bool(done)
                and (expected_turns is None or len(self._turns) >= expected_turns))


def _delta_text(lines: list[str]) -> str:
    """The answer so far from PROGRESS lines' `delta_text` (a `reset` line replaces it)."""
    text: list[str] = []
    for line in lines:
        parts = split_line(line)
        if parts is None:
            continue
        try:
            obj, _ = _DECODE(parts[1].strip())
        except ValueError:
            continue
        if not isinstance(obj, dict):
            continue
        delta = obj.get("delta_text")
        if obj.get("reset") == 1:
            text = []
        if isinstance(delta, str):
            text.append(delta)
    return "".join(text)


def turns_from_lines(lines: Iterable[str]) -> list[Turn]:
    """The turns of one session's lines (a live stdout or a file of turn records; other
    lines are skipped). A CRLF or a BOM on a line is tolerated."""
    session = SessionLines()
    for line in lines:
        session.feed(line.lstrip("\ufeff"))
    return session.turns()


def session_fields(turns: list[Turn]) -> dict[str, Any]:
    """The run-level RunRecord fields of a session from its turns, as the engine's one-shot
    summary would give them for the whole run: totals (tokens, read MiB) summed; the prompt,
    prefill, load and TTFT of the first finished turn; per-token figures and the cache hit
    weighted by each turn's tokens; decode tok/s = all tokens / all decode seconds; the cache
    budget and residency at the end. Token rows, when stored, are what stats/ computes from."""
    done = [t for t in turns if t.error is None and not t.extra.get("incomplete")]
    out: dict[str, Any] = {"tokens": sum(t.tokens or 0 for t in turns)}
    if not done:
        return out
    first, last = done[0], done[-1]
    out.update(prompt_tokens=first.prompt_tokens, prefill_s=first.prefill_s,
               prefill_tps=first.prefill_tps, load_s=first.load_s, ttft_s=first.ttft_s,
               cache_budget_mib=_number(last.extra.get("cache_budget_mib")),
               cache_resident_mib=_number(last.extra.get("cache_resident_mib")))
    reads = [t.read_mib for t in done if t.read_mib is not None]
    out["read_mib"] = sum(reads) if reads else None
    timed = [(t.tokens, t.decode_tps) for t in done if t.tokens and t.decode_tps]
    if timed:
        out["decode_tps"] = sum(n for n, _ in timed) / sum(n / tps for n, tps in timed)
    per_token = {"compute_s_per_token": lambda t: t.compute_s_per_token,
                 "io_s_per_token": lambda t: t.io_s_per_token,
                 "stall_s_per_token": lambda t: t.stall_s_per_token,
                 "mgmt_s_per_token": lambda t: t.mgmt_s_per_token,
                 "cpu_s_per_token": lambda t: _number(t.extra.get("cpu_s_tok")),
                 "majflt_per_token": lambda t: _number(t.extra.get("majflt_tok"))}
    for field, get in per_token.items():
        out[field] = _weighted(done, get)
    hits = [t for t in done if t.cache_hit_pct is not None]
    if hits and all((t.cache_hit_pct or 0) < 0 for t in hits):
        out["cache_hit_pct"] = -1.0       # no cache: the engine's sentinel
    else:
        out["cache_hit_pct"] = _weighted([t for t in hits if (t.cache_hit_pct or 0) >= 0],
                                         lambda t: t.cache_hit_pct)
    return out


def _weighted(turns: list[Turn], get: Any) -> float | None:
    """The token-weighted mean of get(turn) over turns with tokens and a value."""
    pairs = [(t.tokens, get(t)) for t in turns if t.tokens and get(t) is not None]
    total = sum(n for n, _ in pairs)
    return sum(n * v for n, v in pairs) / total if total else None


def sessions_from_lines(lines: Iterable[str]) -> list[tuple[dict[str, Any], list[Turn]]]:
    """Each process's (BMOE_READY object, turns) in a file of turn records: a `BMOE_READY`
    after a turn began starts the next process (its turns numbered from 1 again); a process
    without a turn is left out."""
    out: list[tuple[dict[str, Any], list[Turn]]] = []
    session = SessionLines()

    def close() -> None:
        turns = session.turns()
        if turns:
            out.append((session.ready or {}, turns))

    for raw in lines:
        line = raw.lstrip("\ufeff")
        parts = split_line(line)
        if parts is not None and parts[0] == "READY" and (session.turns() or session.in_flight):
            close()
            session = SessionLines()
        session.feed(line)
    close()
    return out
