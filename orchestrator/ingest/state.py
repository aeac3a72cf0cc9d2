"""An imported run's entry state: what the device was like when the run started.

A measured run gets its start facts from its cooldown and first agent sample; an imported one
from the files the study left beside its CSVs, so the same comparability checks
(results/drift.py) run on it:
- the `.metrics` sidecar's `*_before_*` values (docs/formats.md §4);
- a driver log's section matched to the run (ingest/sections.py): its
  `ENTRY STATE: batt=380 dC, cpu=44400 mC, memavail=... kB, freq=..., waited=180s` and
  `EXIT STATE:` lines;
- a `<tag>.state` file: `--- BEFORE ---` / `--- AFTER ---` blocks with the date, each CPU
  policy's `scaling_max= hw_max= cur=` (the frequency cap a thermal governor set), meminfo's
  MemAvailable, `battery_temp_dC:` and Android's `Thermal Status: N`.
Everything is parsed defensively: a missing or garbled value is None, never an error, since
these files are hand-made shell output.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from orchestrator.engines.bmoe_format import BOM

_SECTION = re.compile(r"^=+ (\S.*?) =+$")
_ENTRY_ITEM = re.compile(r"(\w+)=(-?\d+)\s*(dC|kB|s)?")
_ENTRY_KEYS = {"batt": "batt_temp_dC", "memavail": "mem_avail_kb", "freq": "cpu_khz",
               "waited": "waited_s"}
_BLOCK = re.compile(r"^---\s*(BEFORE|AFTER)\s*---$")
_POLICY = re.compile(r"^(policy\d+):\s*(.*)$")
_KV = re.compile(r"(\w+)=(-?\d+)")
_MEMINFO = re.compile(r"(\w+):\s*(\d+)\s*kB")
_INT = re.compile(r"-?\d+")
# a line that is one `key=value` and nothing else (`freq_cap=2265600`), as a driver script
# prints the state it set; the `.metrics` nine (`*_kb`, `*_dC`, `*_mC`) are device pressure
_STATE_LINE = re.compile(r"^([a-z][a-z0-9_]*)=(-?\d+(?:\.\d+)?|[A-Za-z0-9_.:/+-]+)$")
_PRESSURE_KEY = re.compile(r"_(kb|dC|mC)$")


def read_text(path: Path) -> str:
    """A text file as the study wrote it: lossy UTF-8 (a stray byte must not stop an import),
    without a PowerShell BOM."""
    return path.read_bytes().decode("utf-8", errors="replace").lstrip(BOM)


def driver_entries(folder: Path) -> dict[str, dict[str, Any]]:
    """Run name -> what its driver log's ENTRY STATE line says (batt_temp_dC, mem_avail_kb,
    cpu_khz, waited_s) plus the log's name, from every `driver*.log` of the folder."""
    entries: dict[str, dict[str, Any]] = {}
    for log in sorted(folder.glob("driver*.log")):
        if log.is_file():
            entries.update(driver_log_entries(log.name, read_text(log)))
    return entries


def driver_log_entries(name: str, text: str) -> dict[str, dict[str, Any]]:
    """One driver log's entries (see driver_entries); `name` is recorded as "log"."""
    entries: dict[str, dict[str, Any]] = {}
    section = None
    for line in text.splitlines():
        line = line.strip()
        head = _SECTION.match(line)
        if head:
            section = head.group(1)
        elif line.startswith("ENTRY STATE:") and section:
            found = {_ENTRY_KEYS[k]: int(v) for k, v, _ in _ENTRY_ITEM.findall(line)
                     if k in _ENTRY_KEYS}
            entries[section] = {**found, "log": name}
    return entries


def state_lines(lines: list[str]) -> dict[str, Any]:
    """The `KEY=VALUE` state lines of a run's logs and sidecars (`freq_cap=2265600`: the CPU
    frequency cap a script set): every one-pair line but the `.metrics` pressure keys, values
    as numbers when they are, else as written; the first of a key wins (the run's start)."""
    found: dict[str, Any] = {}
    for raw in lines:
        match = _STATE_LINE.match(raw.strip().lstrip(BOM))
        if match is None or _PRESSURE_KEY.search(match.group(1)):
            continue
        key, value = match.groups()
        if key not in found:
            found[key] = int(value) if _INT.fullmatch(value) else \
                float(value) if re.fullmatch(r"-?\d+\.\d+", value) else value
    return found


def _int(text: str) -> int | None:
    found = _INT.search(text)
    return int(found.group(0)) if found else None


def parse_state(text: str) -> dict[str, Any]:
    """A `.state` file -> {"before": block, "after": block} (blocks that are present), each
    block {"date", "policies": {policyN: {scaling_max, hw_max, cur}}, "mem_avail_kb",
    "mem_free_kb", "batt_temp_dC", "thermal_status"} with None for what it lacks."""
    blocks: dict[str, dict[str, Any]] = {}
    block: dict[str, Any] | None = None
    for raw in text.splitlines():
        line = raw.strip()
        head = _BLOCK.match(line)
        if head:
            block = {"date": None, "policies": {}, "mem_avail_kb": None, "mem_free_kb": None,
                     "batt_temp_dC": None, "thermal_status": None}
            blocks[head.group(1).lower()] = block
            continue
        if block is None or ":" not in line:
            continue
        key, _, rest = line.partition(":")
        policy = _POLICY.match(line)
        if policy:
            block["policies"][policy.group(1)] = {k: int(v) for k, v in _KV.findall(policy.group(2))}
        elif key == "date":
            block["date"] = rest.strip() or None
        elif key == "meminfo":
            mem = dict(_MEMINFO.findall(rest))
            block["mem_avail_kb"] = int(mem["MemAvailable"]) if "MemAvailable" in mem else None
            block["mem_free_kb"] = int(mem["MemFree"]) if "MemFree" in mem else None
        elif key == "battery_temp_dC":
            block["batt_temp_dC"] = _int(rest)
        elif key == "Thermal Status":
            block["thermal_status"] = _int(rest)
    return blocks


def start_state(sidecar: dict[str, Any] | None, entry: dict[str, Any] | None,
                state: dict[str, Any] | None = None) -> tuple[dict[str, int] | None, int | None]:
    """(temp_start, mem_avail_start_kb) as a measured run stores them. Sources in order of
    closeness to the run's start: the sidecar's before-values (sampled by the script that
    launched the engine), the driver log's entry state, the `.state` file's BEFORE block."""
    side, entry = sidecar or {}, entry or {}
    before = (state or {}).get("before") or {}
    temps = {"cpu_temp_mC": _first(side.get("cpu_temp_before_mC"), entry.get("cpu_temp_mC")),
             "batt_temp_dC": _first(side.get("batt_temp_before_dC"), entry.get("batt_temp_dC"),
                                    before.get("batt_temp_dC"))}
    temps = {k: int(v) for k, v in temps.items() if _is_number(v)}
    free = _first(side.get("mem_avail_before_kb"), entry.get("mem_avail_kb"),
                  before.get("mem_avail_kb"))
    return temps or None, int(free) if free is not None else None


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _first(*values: Any) -> Any:
    return next((v for v in values if _is_number(v)), None)
