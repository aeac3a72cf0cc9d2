"""bmoe-cli's session line protocol read back as turns (docs/formats.md, "Session mode"):
`BMOE_<TAG> {flat json}` lines on stdout, `BMOE_READY` once per process after the model load,
`BMOE_BEGIN` / `BMOE_PROGRESS` / `BMOE_DONE` per generation, `BMOE_ERROR` for a request it
refused (fatal: the process ends).

Pure: lines in, `Turn`s out. One `Turn` per `BMOE_DONE`, in order, numbered from 1 within its
process; a `BMOE_ERROR` with the id of a request that never got its `BMOE_DONE` is a failed turn
of its own. A line may carry text glued before the tag (stderr without a newline): the tag is
found anywhere in the line. Lines that are not protocol lines are ignored.
"""
from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from orchestrator.record import Turn

_LINE = re.compile(r"BMOE_(?P<tag>[A-Z]+)\s+(?P<json>\{.*\})\s*$")
# BMOE_DONE key -> Turn field
_FIELDS = {"id": "request_id", "cancelled": "cancelled", "tokens": "tokens",
           "tok_s": "decode_tps", "prefill_s": "prefill_s", "prefill_tps": "prefill_tps",
           "cache_hit_pct": "cache_hit_pct", "n_prompt": "prompt_tokens",
           "n_past": "context_tokens", "compute_s_tok": "compute_s_per_token",
           "io_s_tok": "io_s_per_token", "stall_s_tok": "stall_s_per_token",
           "mgmt_s_tok": "mgmt_s_per_token", "read_mib": "read_mib", "text": "text"}
# BMOE_DONE keys Turn has no field for, kept in extra under orch's unit-named keys
_EXTRA = {"majflt_tok": "majflt_per_token", "cpu_s_tok": "cpu_s_per_token",
          "loop_overhead_s_tok": "loop_overhead_s_per_token"}


def protocol_lines(lines: Iterable[str]) -> Iterable[tuple[str, dict[str, Any]]]:
    """(tag, payload) of every protocol line whose JSON reads as an object."""
    for line in lines:
        found = _LINE.search(line.rstrip("\r\n"))
        if found is None:
            continue
        try:
            payload = json.loads(found.group("json"))
        except ValueError:
            continue
        if isinstance(payload, dict):
            yield found.group("tag"), payload


def sessions_from_lines(lines: Iterable[str]) -> list[list[Turn]]:
    """The turns of each process in the lines: a `BMOE_READY` starts a new one; a process
    without a finished or failed turn is left out."""
    sessions: list[list[tuple[str, dict[str, Any]]]] = [[]]
    for tag, payload in protocol_lines(lines):
        if tag == "READY" and any(t in ("DONE", "ERROR", "BEGIN") for t, _ in sessions[-1]):
            sessions.append([])
        sessions[-1].append((tag, payload))
    out = [_turns(events) for events in sessions]
    return [turns for turns in out if turns]


def turns_from_lines(lines: Iterable[str]) -> list[Turn]:
    """Every turn of the lines, as one process's (numbered from 1)."""
    return _turns(list(protocol_lines(lines)))


def _turns(events: list[tuple[str, dict[str, Any]]]) -> list[Turn]:
    turns: list[Turn] = []
    load_s: float | None = None
    done_ids: set[Any] = set()
    for tag, payload in events:
        if tag == "READY":
            load_s = _float(payload.get("load_s"))
        elif tag == "DONE":
            turns.append(_turn(len(turns) + 1, payload, load_s if not turns else None))
            done_ids.add(payload.get("id"))
        elif tag == "ERROR" and payload.get("id") not in done_ids:
            turn = Turn(turn=len(turns) + 1, request_id=payload.get("id"),
                        error=str(payload.get("msg") or "error"),
                        extra={"fatal": bool(payload.get("fatal"))})
            turns.append(turn)
            done_ids.add(payload.get("id"))
    return turns


def _turn(number: int, done: dict[str, Any], ready_load_s: float | None) -> Turn:
    values: dict[str, Any] = {field: done.get(key) for key, field in _FIELDS.items()
                              if done.get(key) is not None}
    extra = {_EXTRA.get(k, k): v for k, v in done.items()
             if k not in _FIELDS and k != "load_s" and v is not None}
    # the process's model load is paid by its first turn only
    load = _float(done.get("load_s")) if number == 1 else None
    load = load if load is not None else ready_load_s
    prefill = _float(values.get("prefill_s"))
    values["text"] = str(values["text"]) if "text" in values else None
    return Turn(turn=number, load_s=load,
                ttft_s=(prefill + (load or 0.0)) if prefill is not None else None,
                extra=extra, **values)


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) \
        else None
