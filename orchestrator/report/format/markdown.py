"""Markdown text from data: cell escaping and the one table renderer (`orch table`, the report
and `orch compare` lay their tables out with `render`).

Names, flags, causes and prompts are data and may hold any character: every escape here keeps
a table row one row with as many cells as its header, and keeps data from opening markup.
"""
from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from orchestrator.escape import visible
from orchestrator.stats.values import DASH

_NEWLINES = re.compile(r"\s*[\r\n\x0b\x0c\x85\u2028\u2029]+\s*")


@dataclass
class Table:
    """A header, alignments and rows of markdown-ready (already escaped) cells."""

    headers: list[str]
    aligns: list[str]                      # markdown alignment rows: "---", "---:", ":--:"
    rows: list[list[str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)   # markdown lines printed under the table

    def drop_empty(self, keep: Iterable[int] = (0,)) -> Table:
        """Leave out the columns that are empty (—) in every row: a column of dashes says
        nothing, and engines differ in what they report (mmap runs have no cache hit, ...)."""
        keep = set(keep)
        cols = [i for i in range(len(self.headers))
                if i in keep or any(r[i] not in (DASH, "") for r in self.rows)]
        return Table([self.headers[i] for i in cols], [self.aligns[i] for i in cols],
                     [[r[i] for i in cols] for r in self.rows], list(self.notes))

    def column(self, header: str) -> list[str]:
        i = self.headers.index(header)
        return [r[i] for r in self.rows]

    def __bool__(self) -> bool:
        return bool(self.rows)


def render(table: Table) -> str:
    """The table as GFM markdown lines (no trailing newline); nothing for a table without
    columns."""
    if not table.headers:
        return ""
    lines = ["| " + " | ".join(table.headers) + " |", "|" + "|".join(table.aligns) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in table.rows]
    return "\n".join(lines)


def escape_cell(value: Any) -> str:
    """A table cell that cannot end the cell or the row: `\\` -> `\\\\`, `|` -> `\\|`, line
    breaks -> one space. Markup in the value (a bold figure) is kept."""
    text = str(value).replace("\\", "\\\\").replace("|", "\\|")
    return visible(_NEWLINES.sub(" ", text), keep="")


def md_escape(value: Any) -> str:
    """Inline text that cannot break a table row, open an HTML tag or a code span: the cell
    escape plus `<`, `*` and backticks."""
    text = escape_cell("" if value is None else value)
    return text.replace("<", "&lt;").replace("*", "\\*").replace("`", "\\`")


_CODE_SPAN = re.compile(r"`([^`\r\n]+)`")


def md_prose(value: Any) -> str:
    """orch's own sentences with data in them (a warning, its advice): md_escape, except
    that a `code span` the sentence writes stays one (md_code), so a flag or a YAML snippet
    reads as code instead of as escaped backticks. A lone backtick is escaped as before."""
    text = "" if value is None else str(value)
    out, last = [], 0
    for m in _CODE_SPAN.finditer(text):
        out += [md_escape(text[last:m.start()]), md_code(m.group(1))]
        last = m.end()
    return "".join(out) + md_escape(text[last:])


def md_code(value: Any) -> str:
    """An inline code span for a flag string or a hash. Backslash escapes do not work inside a
    code span, so the fence grows past the longest backtick run instead; `|` keeps its table
    escape (GFM removes it before the span is parsed)."""
    if value is None or value == "":
        return DASH
    text = visible(_NEWLINES.sub(" ", str(value)).replace("|", "\\|"), keep="")
    ticks = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * (ticks + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def md_flags(value: Any) -> str:
    """A flag string as one code span per option with its values (`--cache-mb 2000`
    `--overlap`), separated by spaces: a narrow cell wraps between options, never inside one
    (page.html.j2 keeps a code span whole), and a copy of the cell is the flag string."""
    if value is None or value == "":
        return DASH
    groups: list[list[str]] = []
    for token in _NEWLINES.sub(" ", str(value)).split():
        if token.startswith("-") or not groups:
            groups.append([token])
        else:
            groups[-1].append(token)
    return " ".join(md_code(" ".join(group)) for group in groups)


def md_fence(text: str, info: str = "") -> str:
    """A fenced block whose fence is longer than any backtick run inside (a prompt may hold
    ``` itself)."""
    text = visible(text)   # tab and newline kept, an escape shown
    ticks = max((len(m) for m in re.findall(r"`{3,}", text)), default=2)
    fence = "`" * (ticks + 1)
    return f"{fence}{info}\n{text.rstrip(chr(10))}\n{fence}"
