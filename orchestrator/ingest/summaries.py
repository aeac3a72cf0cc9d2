"""A summary-only run's record: what a log section's engine summary lines print, every figure
of it, and one `Turn` per generation when the section holds more than one.

- **Turns.** The summary lines of one generation come as a block (`generation:`, `prefill:`,
  `moe-stream:` ...); a summary line of a kind the current block already has starts the next
  generation's block (a session's two turns, or a driver that ran twice into one section). A
  section with two blocks is a run with two `Turn`s (record.turns), numbered in file order;
  the run's own figures are then over both: tokens and flash reads summed, decode tok/s as
  total tokens over total decode time, the per-token splits token-weighted, prefill and load
  of the first turn, the cache hit of the last (the engine's is cumulative). Never the last
  turn alone.
- **Every figure.** The record's fields take what they can (engines/bmoe.py summary_record);
  the rest go to `record.extra["figures"]` under unit-named keys (`read_mib_per_token`,
  `decode_s_per_token`, `cpu_occupancy_pct`, `flash_mib_per_s`), and a summary-like line orch
  has no pattern for (`gpu-slots: 24 slots, 812.4 MiB uploaded`), read after the first known
  summary line, as `figures[KIND]` = {unit-named key: number}.
"""
from __future__ import annotations

import re
from typing import Any

from orchestrator.engines.bmoe import summary_record
from orchestrator.engines.bmoe_format import match_summary_line, parse_summary_lines
from orchestrator.engines.bmoe_session import session_fields
from orchestrator.record import RunRecord, Turn, trailer_fields

_OTHER_LINE = re.compile(r"^\s*(?P<kind>[a-z][a-z0-9_-]{1,30}):\s+(?P<rest>.*\d.*)$")
_PIECE = re.compile(r"(?P<num>[-+]?\d+(?:\.\d+)?)\s*(?P<unit>%|[KMGT]i?B(?:/(?:s|token|tok))?|"
                    r"kB|ms|s/token|s/tok|tok/s|s\b|×|x\b)?")
_UNIT = {"%": "pct", "ms": "ms", "s": "s", "s/token": "s_per_token", "s/tok": "s_per_token",
         "tok/s": "tok_per_s", "×": "times", "x": "times"}
_TURN_FIELDS = set(Turn.model_fields) - {"turn", "extra"}


def summary_run_record(lines: list[str]) -> RunRecord:
    """The record of a run known only from its summary lines (module doc)."""
    blocks = turn_blocks(lines)
    record = summary_record(lines)
    parsed = [parse_summary_lines(block) for block in blocks]
    figures = _figures(parsed[-1] if parsed else {})
    others = other_figures(lines)
    if others:
        figures.update(others)
    if len(blocks) > 1:
        record.turns = [_turn(i + 1, p) for i, p in enumerate(parsed)]
        _pool(record)
        record.extra["turn_lines"] = [{k: v for k, v in p.items() if k != "text"}
                                      for p in parsed]
    if figures:
        record.extra["figures"] = figures
    return record


def turn_blocks(lines: list[str]) -> list[list[str]]:
    """The section's lines cut where a generation's summary block starts again (module doc);
    lines before a block (its generated text) belong to it."""
    blocks: list[list[str]] = [[]]
    kinds: set[str] = set()
    for line in lines:
        hit = match_summary_line(line)
        if hit is not None and hit[0] in kinds:
            blocks.append([])
            kinds = set()
        if hit is not None:
            kinds.add(hit[0])
        blocks[-1].append(line)
    return [b for b in blocks if any(match_summary_line(l) for l in b)] or blocks


def _turn(number: int, parsed: dict[str, Any]) -> Turn:
    fields = trailer_fields(None, parsed, {})
    return Turn(turn=number, **{k: v for k, v in fields.items() if k in _TURN_FIELDS},
                extra={"figures": _figures(parsed)})


def _pool(record: RunRecord) -> None:
    """The run's figures over its turns: the rule a live session's record follows
    (engines/bmoe_session.py session_fields), so an imported session reads as a live one."""
    for name, value in session_fields(record.turns).items():
        setattr(record, name, value)


def _figures(parsed: dict[str, Any]) -> dict[str, Any]:
    """The printed figures the record has no field for, under unit-named keys."""
    gen, stream = parsed.get("generation") or {}, parsed.get("moe_stream") or {}
    compute = parsed.get("compute") or {}
    out = {"decode_s_per_token": gen.get("s_per_token"),
           "read_mib_per_token": stream.get("mib_per_token"),
           "flash_mib_per_s": stream.get("mib_per_s"),
           "cpu_occupancy_pct": compute.get("cpu_pct"), "threads": compute.get("threads")}
    return {k: v for k, v in out.items() if v is not None}


def other_figures(lines: list[str]) -> dict[str, dict[str, float]]:
    """Summary-like lines orch has no pattern for, after the first known summary line:
    `gpu-slots: 24 slots, 1834 hits (62.1%), 812.4 MiB uploaded` -> {"gpu_slots": {"slots":
    24, "hits": 1834, "hits_pct": 62.1, "uploaded_mib": 812.4}}."""
    out: dict[str, dict[str, float]] = {}
    started = False
    for line in lines:
        if match_summary_line(line) is not None:
            started = True
            continue
        found = _OTHER_LINE.match(line) if started else None
        if found is None:
            continue
        values = _line_values(found.group("rest"))
        if values:
            out.setdefault(found.group("kind").replace("-", "_"), {}).update(values)
    return out


def _line_values(text: str) -> dict[str, float]:
    values: dict[str, float] = {}
    last_words = ""
    for piece in re.split(r"[,;|()]", text):
        found = _PIECE.search(piece)
        if found is None:
            continue
        words = "_".join(re.findall(r"[A-Za-z]+", (piece[:found.start()] + " "
                                                    + piece[found.end():]).strip())).lower()
        words = words or last_words
        unit = found.group("unit") or ""
        suffix = _UNIT.get(unit) or unit.lower().replace("/", "_per_")
        key = "_".join(p for p in (words, suffix) if p) or f"value{len(values) + 1}"
        number = float(found.group("num"))
        values[key] = int(number) if number.is_integer() and "." not in found.group("num") \
            else number
        last_words = words
    return values


def turns_record(turns: list[Turn]) -> RunRecord:
    """The record of a session run known from its turn records alone (BMOE_DONE lines): its
    turns, and the run's figures over them as for two summaries in one section (_pool);
    complete when every turn finished uncancelled and without an error."""
    done = bool(turns) and all(not t.cancelled and not t.error for t in turns)
    record = RunRecord(complete=done, turns=list(turns),
                       errors=[] if turns else ["no BMOE_DONE turn record"],
                       extra={"trailer": None, "summary_only": True})
    if turns:
        _pool(record)
        record.text = "\n\n".join(t.text for t in turns if t.text) or None
        record.streaming = (record.read_mib or 0) > 0 if record.read_mib is not None else None
    return record
