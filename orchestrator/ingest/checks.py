"""Whether a file `orch import` read is what its name says, and why not.

A per-token CSV is refused whole, with the reason printed, when it is empty, binary, has no
`step,` header, no token row, or any impossible value (engines/bmoe_checks.py: negative times
or bytes, a cache hit outside 0..100, a step that does not increase). Refusing the file rather
than dropping the row: one impossible value means the file is corrupt, edited or written by a
broken engine, and its other rows cannot be trusted either; the reason names the line so the
file can be mended and imported again. (A live run cannot be refused: there the parser drops
the row and records the error on the run.)
"""
from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from orchestrator.engines.bmoe_format import BOM, BmoeCsvParser
from orchestrator.ingest.lines import lines

BINARY_PROBE = 64 * 1024
_TEXT_CONTROLS = {9, 10, 12, 13, 27}   # tab, newlines, form feed, ESC (ANSI colours)
_BLANK = re.compile(rb"\s*\Z")      # bytes.strip()'s whitespace (bytes' \s) and nothing else


def read_regular(path: Path) -> bytes:
    """The file's bytes, refusing anything but a regular file at the moment of opening (it may
    have been swapped for a FIFO since the folder was scanned): O_NONBLOCK makes even that
    open return at once, and fstat then says what was opened."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path.name}: not a regular file, not read")
        with os.fdopen(fd, "rb", closefd=False) as handle:
            return handle.read()
    finally:
        os.close(fd)


def is_binary(data: bytes) -> bool:
    """NUL bytes, or more than 1% control or undecodable bytes in the first 64 KiB: not text
    an engine or a shell script wrote."""
    head = data[:BINARY_PROBE]
    if b"\0" in head:
        return True
    text = head.decode("utf-8", errors="replace")
    odd = sum(1 for ch in text if ch == "\ufffd" or (ord(ch) < 32 and ord(ch) not in _TEXT_CONTROLS))
    return odd > max(1, len(text) // 100)


def text_reason(data: bytes) -> str | None:
    """Why these bytes are no text file to read (empty, binary), or None."""
    if _BLANK.match(data):      # not data.strip(): no copy of a 100 MB file to say it
        return "empty"
    if is_binary(data):
        return "binary (NUL, control or undecodable bytes)"
    return None


class Refused(Exception):
    """A per-token CSV found impossible while its run was written (ingest/write.py): the run
    is deleted and the importer plans the folder again without the file (ingest/importer.py),
    which is then skipped with `reason`, as if csv_reason had said it."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(reason)
        self.path, self.reason = path, reason


def impossible_reason(parser: BmoeCsvParser) -> str | None:
    """The refusal of a file whose every line the parser read: its first impossible value,
    with how many more rows had one; None without."""
    if not parser.impossible:
        return None
    more = len(parser.impossible) - 1
    return (f"impossible value at {parser.impossible[0]}"
            + (f" (and {more} more row(s))" if more else ""))


def csv_reason(text: str) -> str | None:
    """Why this text is no importable bmoe per-token CSV, or None: no header, no token row
    (with the parser's first problems), impossible values (with their line numbers).
    Read up to its first storable token row only: the impossible values after it are found
    by the one pass that writes the run (ingest/write.py raises Refused), not by a second
    parse of every row here."""

    if not any(line.startswith("step,") for line in lines(text.lstrip(BOM))):
        return "not a per-token CSV (no header row starting 'step,')"
    parser = BmoeCsvParser()
    for line in lines(text.lstrip(BOM)):
        parser.feed(line)
        if parser.n_rows and not parser.impossible:
            return None
    reason = impossible_reason(parser)
    if reason is not None:
        return reason
    if parser.n_rows == 0:
        problems = [e for e in parser.finish() if "no '# summary'" not in e]
        return "no token rows" + (f": {'; '.join(problems[:3])}" if problems else "")
    return None
