"""What a file holds when its name does not say: the shapes `orch import` recognises by
content, whatever the extension (`.txt`, `.out`, `.log`, `.mem`, `.csv`, none):
- `turns`: bmoe-cli session protocol lines (`BMOE_DONE {json}` ...);
- `series`: a `.mem`-style device series (`t=N KEY: VALUE kB ...` lines);
- `samples`: a CSV (`,`, `;` or tab) whose header has a time column and no `step` column;
- `summary-log`: engine summary lines (`generation:` ...) or section headers with them.
A file of none of these is None (skipped with why by ingest/scan.py). The file is decoded by
its BOM first (ingest/encoding.py): a UTF-16 capture is as readable as a UTF-8 one.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path

from orchestrator.engines.bmoe_format import match_summary_line
from orchestrator.ingest.checks import text_reason
from orchestrator.ingest.encoding import decode, has_wide_bom
from orchestrator.ingest.series import csv_header, is_mem_series, time_column

SNIFF_CHARS = 4 << 20       # a shape shows in the first 4 MiB characters


def sniff(path: Path, limit: int = SNIFF_CHARS) -> str | None:
    """The file's kind by content (module doc), or None; only its first `limit` bytes read."""
    try:
        data = read_head(path, limit)
    except OSError:
        return None
    if not has_wide_bom(data) and text_reason(data):
        return None
    text = decode(data)[0][:SNIFF_CHARS].lstrip("\ufeff")
    return kind_of(text)


def read_head(path: Path, limit: int) -> bytes:
    """The file's first `limit` bytes (a regular file only, as ingest/checks.py read_regular)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path.name}: not a regular file, not read")
        return os.read(fd, limit)
    finally:
        os.close(fd)


def kind_of(text: str) -> str | None:
    """kind_of(a file's text): see the module doc."""
    if "BMOE_DONE" in text or "BMOE_ERROR" in text:
        return "turns"
    if is_mem_series(text):
        return "series"
    header = csv_header(text)
    if len(header) >= 2 and "step" not in header and time_column(header) is not None:
        return "samples"
    if any(match_summary_line(line) for line in text.splitlines()):
        return "summary-log"
    return None
