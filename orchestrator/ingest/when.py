"""When an imported run started, from what the study recorded, and where that came from.

Sources, first found wins (each a `time_source` value stored with the run):
- `file name`: a timestamp in the stem (`bmoe-20260721-090406`, ingest/naming.py);
- `preamble`, `trailer`, `metrics`: a time key (`started=`, `start=`, `date=`, `time=`,
  `timestamp=`, `started_at=`, `start_time=`) in the CSV preamble, its `# summary` trailer or
  the `.metrics` sidecar;
- `log`: a timestamp in the driver-log section the run was matched to;
- `state`: the `date:` line of the `.state` file's BEFORE block;
- `folder name`: only a day, from a date in the name of the run's folder (innermost first:
  `2026-07-14-warmup`), when nothing gives the time: stored as that day's midnight, and shown
  as a date alone.
All are the study's clock as written: local time, returned naive, with no time zone invented
(a trailing zone name such as `CEST` is dropped, not converted). `--measured` and the design's
`measured` (`option`, `design`) come before `folder name`; only when none of them says
anything does the importer fall back to the file's mtime (`mtime`, UTC).
"""
from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from orchestrator.ingest.naming import name_time

TIME_KEYS = ("started_at", "started", "start_time", "start", "timestamp", "date", "time")
_ISO = re.compile(r"(?<!\d)(\d{4})-(\d{2})-(\d{2})[T_ ](\d{2})[:.-](\d{2})(?:[:.-](\d{2}))?(?!\d)")
_COMPACT = re.compile(r"(?<!\d)(\d{8})[-_T](\d{6})(?!\d)")
# `date` output: Wed Jul 15 09:07:51 CEST 2026
_DATE_CMD = re.compile(r"(?:[A-Z][a-z]{2}\s+)?([A-Z][a-z]{2})\s+(\d{1,2})\s+(\d{2}):(\d{2}):(\d{2})"
                       r"(?:\s+[A-Z]{2,5}[+-]?\d*)?\s+(\d{4})")
_MONTHS = {m: i for i, m in enumerate(("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug",
                                       "Sep", "Oct", "Nov", "Dec"), start=1)}


def file_time(path: Path) -> dt.datetime | None:
    """When `path` was last written (UTC), or None when its mtime is no date Python holds
    (before year 1 or past 9999: a broken clock, a tool, `touch -d`) or cannot be read: the
    run is then imported without a time and says why (ingest/write.py), never refused."""
    try:
        return dt.datetime.fromtimestamp(path.stat().st_mtime, dt.UTC)
    except (OSError, OverflowError, ValueError):
        return None


MTIME_OUT_OF_RANGE = "the file's time (mtime) is out of range: the run is imported without one"


def parse_time(text: str) -> dt.datetime | None:
    """A timestamp anywhere in `text` (ISO-like, compact, or `date` output), or None."""
    found = _ISO.search(text)
    if found:
        y, mo, d, h, mi, s = (int(g) if g else 0 for g in found.groups())
        return _make(y, mo, d, h, mi, s)
    found = _COMPACT.search(text)
    if found:
        try:
            return dt.datetime.strptime(found.group(1) + found.group(2), "%Y%m%d%H%M%S")
        except ValueError:
            return None
    found = _DATE_CMD.search(text)
    if found and found.group(1) in _MONTHS:
        mon, day, hour, minute, second, year = found.groups()
        return _make(int(year), _MONTHS[mon], int(day), int(hour), int(minute), int(second))
    return None


def _make(year: int, month: int, day: int, hour: int = 0, minute: int = 0,
          second: int = 0) -> dt.datetime | None:
    try:
        return dt.datetime(year, month, day, hour, minute, second)
    except ValueError:
        return None


def keyed_time(values: Mapping[str, Any] | None) -> dt.datetime | None:
    """The first time key of a key=value mapping (preamble, trailer, sidecar) that parses."""
    for key in TIME_KEYS:
        value = (values or {}).get(key)
        if value is not None:
            found = parse_time(str(value))
            if found is not None:
                return found
    return None


def section_time(lines: Iterable[str]) -> dt.datetime | None:
    """A timestamp a driver printed in a run's section (`started 2026-07-21 09:04:06`, a
    `date` line), or None. Lines of generated text are not read: only short chatter lines
    before the engine's output that look like a driver's."""
    for line in lines:
        low = line.strip().lower()
        if low.startswith(("start", "date", "time", "begin", "[", "#", "===", "---")) \
                or low[:4].isdigit():
            found = parse_time(line)
            if found is not None:
                return found
    return None


def recorded_start(stem: str, settings: Mapping[str, Any] | None,
                   trailer: Mapping[str, Any] | None, sidecar: Mapping[str, Any] | None,
                   section: Iterable[str] | None, state: Mapping[str, Any] | None
                   ) -> tuple[dt.datetime | None, str | None]:
    """(start, time_source) from what the study recorded, or (None, None)."""
    found = name_time(stem)
    if found is not None:
        return found, "file name"
    for source, values in (("preamble", settings), ("trailer", trailer), ("metrics", sidecar)):
        found = keyed_time(values)
        if found is not None:
            return found, source
    found = section_time(section or [])
    if found is not None:
        return found, "log"
    before = (state or {}).get("before") or {}
    found = parse_time(str(before.get("date") or ""))
    if found is not None:
        return found, "state"
    return None, None


_FOLDER_DATE = re.compile(r"(?<!\d)(\d{4})-?(\d{2})-?(\d{2})(?!\d)")


def folder_date(parts: Iterable[str]) -> dt.datetime | None:
    """The day in the first folder name (innermost first) that holds a date, as midnight."""
    for part in parts:
        found = _FOLDER_DATE.search(part)
        if found:
            year, month, mday = (int(g) for g in found.groups())
            day = _make(year, month, mday)
            if day is not None and 1990 <= day.year <= 2100:
                return day
    return None
