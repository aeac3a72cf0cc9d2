"""Driver logs and matrix stdouts (`qwen-ab-run1.log`, `gptoss-matrix.out`, `driver-k2.log`,
a console summary `cells.txt`): sections, each the stdout of one engine run. Where a section
starts and what its header and the file's preamble say (name, flags, model, prompt, tokens)
is ingest/headers.py's.

A section with engine summary lines is matched to a per-token CSV of its folder **by
content**, whatever the names: it is that CSV's stdout when its `generation:` line gives the
same token count and s/token (or tok/s) as the CSV's `# summary` trailer, and no other figure
both print (read MiB, cache hit %) disagrees. Names only break a tie between two CSVs that
match alike. A matched section gives its run the generated text, the entry/exit state lines
and its place in the driver's order; a section that matches no CSV is a summary-only run
(tok/s, prefill, TTFT, I/O, cache hit from its lines; no token rows).

State lines (`ENTRY STATE: batt=380 dC, cpu=44400 mC, memavail=... kB, freq=..., waited=180s`,
`EXIT STATE: ...`, the short `ENTRY:` / `EXIT:` forms, and a wrapped line that continues one)
are parsed into the run's entry state and never kept as generated text.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.engines.bmoe_format import (
    BOM,
    match_summary_line,
    parse_kv_tokens,
    parse_summary_lines,
)
from orchestrator.ingest.headers import Header, command_header, preamble_settings, rule_header

_STATE = re.compile(r"^(ENTRY|EXIT)(?:\s+STATE)?\s*:\s*(.*)$")
_ITEM = re.compile(r"(\w+)=(-?\d+(?:\.\d+)?)\s*(dC|mC|kB|s|%)?")
_STATE_KEYS = {"batt": "batt_temp_dC", "cpu": "cpu_temp_mC", "memavail": "mem_avail_kb",
               "mem": "mem_avail_kb", "freq": "cpu_khz", "waited": "waited_s",
               "lvl": "batt_level_pct", "level": "batt_level_pct"}
NO_NAME = "(before the first section)"


@dataclass
class Section:
    name: str                  # the section's tag
    source: Path               # the log holding it
    index: int                 # its place in the log (the driver's order)
    lines: list[str]           # without state lines
    entry: dict[str, Any] = field(default_factory=dict)
    exit: dict[str, Any] = field(default_factory=dict)
    flags: str | None = None   # the flags its header (or the preamble) gives; None: none
    label: str | None = None   # its header's description or command line
    settings: dict[str, Any] = field(default_factory=dict)   # preamble + header: model, ...

    @property
    def parsed(self) -> dict[str, Any]:
        return parse_summary_lines(self.lines)

    @property
    def has_summary(self) -> bool:
        return any(match_summary_line(line) for line in self.lines)


def sections(source: Path, text: str) -> list[Section]:
    """Every section of a log (tagged or not) with something in it, in file order."""
    out = []
    pieces = split_headed(text)
    preamble = pieces[0][1] if pieces and pieces[0][0] is None else []
    settings, common = preamble_settings(preamble) if len(pieces) > 1 else ({}, None)
    names: dict[str, int] = {}
    for header, _ in pieces:
        if header is not None:
            names[header.name] = names.get(header.name, 0) + 1
    seen: dict[str, int] = {}
    for index, (header, body) in enumerate(pieces):
        lines, entry, exit_ = split_state(body)
        tag = header.name if header is not None else ""
        if tag.upper() == "DONE" and not any(l.strip() for l in lines):
            continue
        if not (tag or any(l.strip() for l in lines)):
            continue
        if header is None:
            out.append(Section(NO_NAME, source, index, lines, entry, exit_))
            continue
        if names[tag] > 1:               # two sections named alike: repeats of the name
            seen[tag] = seen.get(tag, 0) + 1
            tag = f"{tag}_{seen[tag]}"
        flags = " ".join(f for f in (common, header.flags) if f) \
            if common or header.flags is not None else None
        out.append(Section(tag, source, index, lines, entry, exit_, flags=flags,
                           label=header.label, settings={**settings, **header.settings}))
    return out


def split_headed(text: str) -> list[tuple[Header | None, list[str]]]:
    """The text's lines cut at each header (ingest/headers.py): [(header, its lines)], the
    lines before the first header under None."""
    pieces: list[tuple[Header | None, list[str]]] = [(None, [])]
    commands = 0
    for line in text.lstrip(BOM).splitlines():
        header = rule_header(line)
        if header is None and line.lstrip().startswith("$"):
            commands += 1
            header = command_header(line, commands)
            current, body = pieces[-1]
            if header is not None and current is not None and current.label is None \
                    and not any(match_summary_line(l) for l in body):
                # the command a rule header's section ran: its flags, not a new section
                current.label = header.label
                if current.flags is None:
                    current.flags = header.flags
                current.settings = {**header.settings, **current.settings}
                continue
        if header is not None:
            pieces.append((header, []))
        else:
            pieces[-1][1].append(line)
    if not pieces[0][1] and len(pieces) > 1:
        pieces.pop(0)
    return pieces


def split_state(lines: list[str]) -> tuple[list[str], dict[str, Any], dict[str, Any]]:
    """(the other lines, entry state, exit state) of a section's lines."""
    kept: list[str] = []
    states: dict[str, dict[str, Any]] = {"ENTRY": {}, "EXIT": {}}
    current: str | None = None
    for line in lines:
        head = _STATE.match(line.strip())
        if head:
            current = head.group(1)
            states[current].update(_items(head.group(2)))
            continue
        if current is not None and _ITEM.search(line) and ":" not in line and len(line) < 200:
            states[current].update(_items(line))     # a state line wrapped by the terminal
            continue
        current = None
        kept.append(line)
    return kept, states["ENTRY"], states["EXIT"]


def _items(text: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value, _unit in _ITEM.findall(text):
        name = _STATE_KEYS.get(key, key)     # an unknown key (freq_cap=) kept as written
        if name not in out:
            number = float(value)
            out[name] = int(number) if number.is_integer() else number
    return out


# where str.splitlines ends a line: a line starts after one of these (or the text's start)
_LINE_BREAKS = frozenset("\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029")
_SUMMARY = "# summary"


def trailer(csv_text: str) -> dict:
    """The last `# summary` trailer of a per-token CSV ({} when it has none): the last of
    csv_text.splitlines() that starts so, found from the end (rfind) without a list of the
    2M lines of a big CSV (0.5 s)."""
    end = len(csv_text)
    while (at := csv_text.rfind(_SUMMARY, 0, end)) >= 0:
        if at == 0 or csv_text[at - 1] in _LINE_BREAKS:       # the start of a line
            width = 4096
            while True:       # its line: up to the first break (splitlines' [0]), however long
                piece = csv_text[at:at + width]
                first = piece.splitlines()[0]
                if len(first) < len(piece) or at + width >= len(csv_text):
                    return parse_kv_tokens(first[len(_SUMMARY):])
                width *= 4
        end = at + len(_SUMMARY) - 1           # an earlier one: ends before this one starts
    return {}


def same_figures(section: Section, csv_trailer: dict) -> bool:
    """Whether the section's summary lines print what the CSV's trailer says (module doc)."""
    parsed = section.parsed
    gen = parsed.get("generation") or {}
    if not gen or not csv_trailer or gen.get("tokens") != csv_trailer.get("tokens"):
        return False
    pairs = [(gen.get("s_per_token"), csv_trailer.get("s/tok")),
             (gen.get("tok_per_s"), csv_trailer.get("tok/s"))]
    if not any(a is not None and b is not None for a, b in pairs):
        return False
    read = (parsed.get("moe_stream") or {}).get("read_mib")
    hit = (parsed.get("moe_cache") or {}).get("hit_pct")
    pairs += [(read, csv_trailer.get("read_MiB")), (hit, csv_trailer.get("cache_hit_pct"))]
    return all(_close(a, b) for a, b in pairs if a is not None and b is not None)


def _close(a: Any, b: Any) -> bool:
    try:
        return abs(float(a) - float(b)) <= 1e-9 + 1e-6 * abs(float(b))
    except (TypeError, ValueError):
        return False


def name_matches(section: Section, stem: str) -> bool:
    """The section is named after the CSV: its stem, or the stem after its first `_`/`-`
    word (`mmap_k2` for `gptoss_mmap_k2`, `lru_a` for `qwen-lru_a`)."""
    rest = re.split(r"[-_]", stem, maxsplit=1)
    return section.name == stem or (len(rest) == 2 and section.name == rest[1])
