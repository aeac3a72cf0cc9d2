"""A big text's lines one at a time, as str.splitlines gives them: the importer and its checks
read CSVs of millions of rows without a list of millions of strings."""
from __future__ import annotations

from collections.abc import Iterator

LINES_CHUNK = 1 << 20      # characters per str.splitlines call in lines()


def lines(text: str) -> Iterator[str]:
    """text.splitlines(), one line at a time: a 2M-row CSV is never a list of 2M strings.
    The text is cut after a newline about every LINES_CHUNK characters and each piece split
    by str.splitlines itself, which gives the same lines (a piece ends with its line break,
    and "\r\n" never straddles the cut)."""
    start, end = 0, len(text)
    while start < end:
        cut = text.find("\n", start + LINES_CHUNK)
        stop = end if cut < 0 else cut + 1
        yield from text[start:stop].splitlines()
        start = stop

