"""Device series recorded beside a study's runs, read as the runs' samples (store `sample`
rows: t_ms, rss_kb, hwm_kb, mem_avail_kb, ..., turn, extra).

Two shapes (docs/import.md, "Device series"):
- a **`.mem`-style series**: one line per reading, `t=SECONDS` then `KEY: VALUE UNIT` pairs
  (`t=30 VmSwap: 812 kB VmRSS: 2345678 kB`); a header line `-- idle 240s from turn 1 done --`
  says the lines after it were sampled in an idle gap after turn 1: they get `turn` 1 and
  `idle_s` 240 in extra;
- a **sample CSV** with a time column (`t`, `time`, `t_s`, `t_ms`, `seconds`, `elapsed`, ...),
  read with pandas by header name. A trailing delimiter on every row makes an empty last
  column, never a shifted one (`index_col=False`). Sizes may carry a suffix (`3.5M`, `4.5G`,
  `812k`): stored in kB. orch's own exported samples (`orch export`: t_ms, rss_kb, ...) are
  one such CSV.
Values go to the store's columns when their meaning is known (RSS, HWM, MemAvailable, major
faults, temperatures in their stored units); every other column goes to `extra` under its
name with its unit (`swap_kb`, `swapfree_kb`, `thermal`, `engine_pcpu`). A `turn` column gives
the sample's turn.
"""
from __future__ import annotations

import io
import re
from collections.abc import Mapping
from typing import Any

TIME_COLUMNS = ("t_ms", "time_ms", "t", "t_s", "time", "time_s", "seconds", "sec", "secs",
                "elapsed", "elapsed_s", "elapsed_ms", "ts", "timestamp")
# a column's (or a .mem key's) name, lower case -> the store's sample column (values in kB)
_KB_COLUMNS = {"vmrss": "rss_kb", "rss": "rss_kb", "rss_kb": "rss_kb", "engine_rss_kb": "rss_kb",
               "engine_rss": "rss_kb", "vmhwm": "hwm_kb", "hwm_kb": "hwm_kb",
               "peak_rss_kb": "hwm_kb", "memavailable": "mem_avail_kb",
               "mem_avail_kb": "mem_avail_kb", "memavail_kb": "mem_avail_kb",
               "memavail": "mem_avail_kb", "mem_available_kb": "mem_avail_kb"}
_PLAIN_COLUMNS = {"majflt": "majflt", "cpu_ticks": "cpu_ticks", "cpu_temp_mc": "cpu_temp_mC",
                  "batt_temp_dc": "batt_temp_dC", "turn": "turn"}
_SIZE = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*([kKmMgGtT])?(?:i?B)?\s*$")
_SCALE_KB = {"": 1, "k": 1, "m": 1024, "g": 1024 ** 2, "t": 1024 ** 3}
_MEM_LINE = re.compile(r"^\s*t\s*=\s*(?P<t>-?\d+(?:\.\d+)?)\s*(?P<unit>ms|s)?\b(?P<rest>.*)$")
_MEM_PAIR = re.compile(r"(?P<key>[A-Za-z_][A-Za-z0-9_]*)\s*[:=]\s*(?P<value>-?\d+(?:\.\d+)?)"
                       r"\s*(?P<unit>[kKmMgG]i?B|[kKmMgG]\b|%)?")
_IDLE = re.compile(r"^\s*-{2,}\s*(?P<text>.*?)\s*-{2,}\s*$")


def is_mem_series(text: str) -> bool:
    """Whether most of the first non-blank lines are `t=N KEY: VALUE` readings."""
    head = [line for line in text.splitlines()[:50] if line.strip()]
    hits = sum(1 for line in head
               if (m := _MEM_LINE.match(line)) and _MEM_PAIR.search(m.group("rest")))
    return hits >= 2 and hits >= len(head) // 2


def mem_series(text: str) -> list[dict[str, Any]]:
    """The rows of a `.mem`-style series (module doc)."""
    rows: list[dict[str, Any]] = []
    turn: int | None = None
    idle_s: float | None = None
    for line in text.splitlines():
        found = _MEM_LINE.match(line)
        if found is None:
            header = _IDLE.match(line)
            if header is not None:
                turn, idle_s = _idle_header(header.group("text"), turn)
            continue
        t = float(found.group("t"))
        row: dict[str, Any] = {"t_ms": round(t if found.group("unit") == "ms" else t * 1000)}
        extra: dict[str, Any] = {}
        for pair in _MEM_PAIR.finditer(found.group("rest")):
            key, unit = pair.group("key"), (pair.group("unit") or "")
            value = float(pair.group("value"))
            column = _KB_COLUMNS.get(key.lower())
            if unit[:1].lower() in "kmg" and unit:
                value = value * _SCALE_KB[unit[:1].lower()]
                name = column or f"{_snake(key.removeprefix('Vm'))}_kb"
            else:
                name = column or (f"{_snake(key)}_pct" if unit == "%" else _snake(key))
            (row if name in _SAMPLE_COLUMNS else extra)[name] = _int(value)
        if turn is not None:
            row["turn"] = turn
        if idle_s is not None:
            extra["idle_s"] = idle_s
        row["extra"] = extra or None
        rows.append(row)
    return rows


def _idle_header(text: str, turn: int | None) -> tuple[int | None, float | None]:
    """`idle 240s from turn 1 done` -> (1, 240.0); another header keeps the turn, no idle."""
    found_turn = re.search(r"turn\s+(\d+)", text)
    found_idle = re.search(r"idle\s+(\d+(?:\.\d+)?)\s*(ms|s|min|m)?\b", text)
    if found_turn:
        turn = int(found_turn.group(1))
    idle = None
    if found_idle:
        idle = float(found_idle.group(1))
        idle *= {"ms": 0.001, "min": 60, "m": 60}.get(found_idle.group(2) or "s", 1)
    return turn, idle


def time_column(columns: list[str]) -> str | None:
    """The time column of a sample CSV's header, or None (then it is no sample CSV)."""
    low = {c.strip().lower(): c for c in columns}
    return next((low[name] for name in TIME_COLUMNS if name in low), None)


def csv_header(text: str, delimiter: str | None = None) -> list[str]:
    """The first non-comment line's column names."""
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            sep = delimiter or _delimiter(line)
            return [c.strip() for c in line.split(sep)]
    return []


def _delimiter(line: str) -> str:
    return max((",", ";", "\t"), key=line.count)


def sample_csv(text: str, columns: Mapping[str, str] | None = None,
               units: Mapping[str, str] | None = None, time: str | None = None,
               delimiter: str | None = None) -> list[dict[str, Any]]:
    """The rows of a sample CSV (module doc). `columns` (a design's `files:` rule): CSV column
    -> store column or extra name; `units`: CSV column -> its unit (`kB`, `MB`, `GB`, `s`,
    `ms`, `mC`, `dC`, `C`); `time`: the time column; `delimiter`."""
    import pandas as pd

    header = csv_header(text, delimiter)
    sep = delimiter or _delimiter(",".join(header)) if header else ","
    frame = pd.read_csv(io.StringIO(text), sep=sep or ",", comment="#", index_col=False,
                        dtype=str, skipinitialspace=True)
    frame = frame.loc[:, [c for c in frame.columns if not str(c).startswith("Unnamed")]]
    frame.columns = [str(c).strip() for c in frame.columns]
    tcol = time or time_column(list(frame.columns))
    if tcol is None or tcol not in frame.columns:
        raise ValueError("no time column (t, time, t_s, t_ms, seconds, elapsed, ...)")
    units = {k: v for k, v in (units or {}).items()}
    columns = dict(columns or {})
    t_unit = (units.get(tcol) or ("ms" if tcol.lower().endswith("ms") else "s")).lower()
    rows: list[dict[str, Any]] = []
    times = pd.to_numeric(frame[tcol], errors="coerce")
    first = times.min()
    epoch = bool(first > 1e9) if first == first else False   # NaN: none
    for index, raw in enumerate(frame.to_dict("records")):
        t = times.iloc[index]
        if t != t:                      # no time: not a reading
            continue
        t = (t - first) if epoch else t
        row: dict[str, Any] = {"t_ms": round(t if t_unit == "ms" else t * 1000)}
        extra: dict[str, Any] = {}
        for name, value in raw.items():
            if name == tcol or value is None or (isinstance(value, float) and value != value):
                continue
            target, number = _column_value(name, str(value), columns.get(name), units.get(name))
            if number is None:
                extra[name] = value
            elif target in _SAMPLE_COLUMNS:
                row[target] = int(round(number)) if target != "turn" else int(number)
            else:
                extra[target] = _int(number)
        row["extra"] = extra or None
        rows.append(row)
    return rows


_SAMPLE_COLUMNS = {"rss_kb", "hwm_kb", "mem_avail_kb", "majflt", "cpu_ticks", "cpu_temp_mC",
                   "batt_temp_dC", "turn"}


def _column_value(name: str, value: str, mapped: str | None,
                  unit: str | None) -> tuple[str, float | None]:
    """(the sample column or extra key, the value in its unit) of one CSV cell."""
    low = name.lower()
    size = _SIZE.match(value)
    if size is None:
        return mapped or name, None
    number = float(size.group(1))
    suffix = (size.group(2) or "").lower()
    given = (unit or "").strip()
    if given:                                    # the design's unit wins
        scale = {"kb": 1, "kib": 1, "mb": 1024, "mib": 1024, "gb": 1024 ** 2,
                 "gib": 1024 ** 2, "b": 1 / 1024}.get(given.lower())
        if scale is not None:
            return mapped or _KB_COLUMNS.get(low) or f"{_snake(name)}_kb", \
                number * _SCALE_KB[suffix] * scale if suffix else number * scale
        if given in ("C", "°C"):
            return mapped or f"{_snake(name)}_c", number
    target = mapped or _KB_COLUMNS.get(low) or _PLAIN_COLUMNS.get(low)
    if suffix:                                   # 3.5M / 4.5G: a size, in kB
        kb = number * _SCALE_KB[suffix]
        return target or (name if low.endswith("_kb") else f"{_snake(name)}_kb"), kb
    return target or name, number


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


def _int(value: float) -> float | int:
    return int(value) if float(value).is_integer() else value
