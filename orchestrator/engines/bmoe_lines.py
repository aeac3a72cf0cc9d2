"""The engine's stdout summary lines (docs/formats.md §3): `generation:`, `prefill:`,
`moe-stream:` ... parsed by their full wording, wherever stderr glued text before them.

Pure functions, no I/O; re-exported by engines/bmoe_format.py, the one import point.
"""
from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

# Longer lines are not engine output (a runaway or corrupt stream); live runs cut theirs at
# the same bound (orchestrator/line_bound.py). Re-exported: bmoe_format is the import point.
from orchestrator.line_bound import MAX_LINE as MAX_LINE

BOM = "\ufeff"


# ---- stdout summary lines (docs/formats.md §3) ---------------------------------------------

_NUM = r"([0-9]+(?:\.[0-9]+)?)"
_LINE_RES: dict[str, re.Pattern[str]] = {
    "generation": re.compile(
        rf"generation: {_NUM} tokens, {_NUM} s/token \({_NUM} tok/s\)"),
    "prefill": re.compile(
        rf"prefill: {_NUM} tokens, {_NUM} s \({_NUM} tok/s\)"
        rf"(?: \| model load {_NUM} s)?(?: \| TTFT {_NUM} s)?"),
    "moe_stream": re.compile(
        rf"moe-stream: read {_NUM} MiB \({_NUM} MiB/token\), decode {_NUM} s/token "
        rf"\(compute {_NUM}(?: \+ cache mgmt {_NUM})? \+ flash I/O {_NUM} s/token, {_NUM} MiB/s\)"),
    "moe_cache": re.compile(
        rf"moe-cache: {_NUM}% hit, resident {_NUM} MiB(?:, budget {_NUM} MiB(?: \(([^)]*)\))?)?"),
    "moe_overlap": re.compile(rf"moe-overlap: stall {_NUM} s/token(?: \([^)]*\))?"),
    "moe_prefetch": re.compile(
        rf"moe-prefetch: {_NUM} MiB speculative, (\d+)/(\d+) experts useful \({_NUM}%\)"),
    "compute": re.compile(
        rf"compute: {_NUM}% CPU occupancy \({_NUM} cpu-s/token over (\d+) threads\), "
        rf"{_NUM} major faults/token"),
    "moe_spec_gate": re.compile(
        rf"moe-spec-gate: {_NUM}% router prediction recall(?: \(auto-disabled below {_NUM}%\))?"),
}
_PREFIX = {k: r.pattern.split(":", 1)[0] + ":" for k, r in _LINE_RES.items()}
_ANY_PREFIX = re.compile("|".join(re.escape(p) for p in _PREFIX.values()))


def _f(s: str | None) -> float | None:
    return float(s) if s is not None else None


def _i(s: str | None) -> int:
    """A group the line's pattern requires (so never None)."""
    if s is None:
        raise ValueError("a required group is missing")
    return int(s)


def _fields(kind: str, g: tuple[str | None, ...]) -> dict[str, Any]:
    if kind == "generation":
        return {"tokens": _i(g[0]), "s_per_token": _f(g[1]), "tok_per_s": _f(g[2])}
    if kind == "prefill":
        return {"tokens": _i(g[0]), "s": _f(g[1]), "tok_per_s": _f(g[2]),
                "load_s": _f(g[3]), "ttft_s": _f(g[4])}
    if kind == "moe_stream":
        return {"read_mib": _f(g[0]), "mib_per_token": _f(g[1]), "decode_s_per_token": _f(g[2]),
                "compute_s_per_token": _f(g[3]), "mgmt_s_per_token": _f(g[4]),
                "io_s_per_token": _f(g[5]), "mib_per_s": _f(g[6])}
    if kind == "moe_cache":
        note = g[3] or ""
        resized = re.search(r"resized (\d+)", note)
        return {"hit_pct": _f(g[0]), "resident_mib": _f(g[1]), "budget_mib": _f(g[2]),
                "budget_auto": ("auto" in note) if g[2] is not None else None,
                "resizes": int(resized.group(1)) if resized else None}
    if kind == "moe_overlap":
        return {"stall_s_per_token": _f(g[0])}
    if kind == "moe_prefetch":
        return {"spec_mib": _f(g[0]), "useful": _i(g[1]), "experts": _i(g[2]),
                "useful_pct": _f(g[3])}
    if kind == "compute":
        return {"cpu_pct": _f(g[0]), "cpu_s_per_token": _f(g[1]), "threads": _i(g[2]),
                "majflt_per_token": _f(g[3])}
    # moe_spec_gate
    return {"recall_pct": _f(g[0]), "auto_disabled": g[1] is not None,
            "auto_off_below_pct": _f(g[1])}


def match_summary_line(line: str) -> tuple[str, dict[str, Any], str] | None:
    """(kind, fields, glued_head) if the line is an engine summary line, else None.

    Rule: a prefix at the start of the line needs its full regex to match the rest of the line.
    A prefix found later in the line (stderr or generated text glued before it, no newline) is
    accepted only when everything from that prefix to the END of the line matches the full
    regex; the text before it is returned as `glued_head`. The regexes are specific enough
    (fixed wording, units, numbers) that generated prose cannot satisfy them by accident, while
    a loose "prefix anywhere" rule would pick up e.g. a model writing "compute: ...".
    In the fixtures every summary line starts its line (after the .log BOM); the only glued text
    there is the echoed prompt running into the first generated token.
    """
    line = line.rstrip("\r\n").lstrip(BOM).rstrip()
    for m in _ANY_PREFIX.finditer(line):
        for kind, prefix in _PREFIX.items():
            if prefix == m.group(0):
                full = _LINE_RES[kind].fullmatch(line, m.start())
                if full:
                    return kind, _fields(kind, full.groups()), line[:m.start()]
    return None


def parse_summary_lines(lines: Iterable[str], prompt: str | None = None) -> dict[str, Any]:
    """Parse the engine's stdout summary lines; also the generated `text` of a full .out log.

    Returns {kind: fields} for each summary line kind seen (a later line of the same kind wins,
    e.g. in a multi-turn log), plus `text`: everything before the first summary line with
    trailing blank lines removed (the engine echoes the prompt first; pass `prompt` to strip
    it), or None when no summary line was found (then the text cannot be delimited).
    """
    out: dict[str, Any] = {}
    before: list[str] = []
    first_seen = False
    for raw in lines:
        line = raw.rstrip("\r\n")
        hit = match_summary_line(line) if len(line) <= MAX_LINE else None
        if hit is None:
            if not first_seen:
                before.append(line.lstrip(BOM) if not before else line)
            continue
        kind, fields, head = hit
        if not first_seen and head:
            before.append(head)     # generated text that ran into the summary line
        first_seen = True
        out[kind] = fields
    text = None
    if first_seen:
        text = "\n".join(before).rstrip("\n")
        if prompt and text.startswith(prompt):
            text = text[len(prompt):]
    out["text"] = text
    return out
