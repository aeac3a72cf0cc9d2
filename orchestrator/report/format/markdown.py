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


# Markdown's inline punctuation, backslash-escaped: emphasis (* ~, and _ where it can open or
# close: not inside a word, so qwen_kdef stays as it reads), code spans (`), the `]` that
# would end a link's or an image's text or a reference definition (before `(`, `[`, `:`; a
# bracket elsewhere, "tok/s [95% CI]", links nothing), entities (& before a name and `;`);
# `<` (raw HTML, <https://..> autolinks) becomes &lt;.
_INLINE = re.compile(r"[*~`]|\](?=[(\[:])|(?<![0-9A-Za-z])_|_(?![0-9A-Za-z])|&(?=#?\w+;)")
# what GitHub's extended autolinks start at: a scheme's `://` and `www.` (a bare URL in data
# would be a live link); `:\/\/` and `www\.` read the same and link nothing
_AUTOLINK = re.compile(r"(?i)(:)(//)|\b(www)(\.)")
# a start that opens a heading or a quote where a template puts the text at a line's start
# (a list marker, `- x` or `1. x`, is left as it reads: it loads and links nothing)
_BLOCK_START = re.compile(r"^([#>])")


def md_escape(value: Any) -> str:
    """Data as inline text that shows literally (docs/report.md, "Text from devices and
    users"): it cannot break a table row, open an HTML tag, a code span, emphasis, a link or
    an image (`![x](https://host/beacon.png)` stays those characters), be autolinked, or
    start a heading or a quote where a template puts it at a line's start."""
    text = escape_cell("" if value is None else value)
    text = _INLINE.sub(lambda m: "\\" + m.group(), text).replace("<", "&lt;")
    text = _AUTOLINK.sub(lambda m: f"{m[1]}\\/\\/" if m[1] else f"{m[3]}\\.", text)
    return _BLOCK_START.sub(r"\\\1", text)


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


# In an author's markdown: what fetches or links (images, links, autolinks, raw HTML, entities)
_AUTHOR_INLINE = re.compile(r"\](?=[(\[:])|&(?=#?\w+;)")
_FENCE_LINE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")


def md_author(value: Any) -> str:
    """A study author's markdown (a design file's notes and reasons) as written, bold, lists
    and code spans included, except that nothing in it links or loads: an image, a link, an
    autolink, raw HTML and entities show as their characters (a design file is data that can
    come from anyone; docs/report.md, "Text from devices and users"). Code spans and fenced
    blocks are left as they are (nothing in them is markup)."""
    out, fenced = [], False
    for line in visible("" if value is None else str(value)).split("\n"):
        if _FENCE_LINE.match(line):
            fenced = not fenced
        if fenced or _FENCE_LINE.match(line):
            out.append(line)
            continue
        parts, last = [], 0
        for m in _CODE_SPAN.finditer(line):
            parts += [_author_text(line[last:m.start()]), m.group()]
            last = m.end()
        out.append("".join(parts) + _author_text(line[last:]))
    return "\n".join(out)


def _author_text(text: str) -> str:
    text = _AUTHOR_INLINE.sub(lambda m: "\\" + m.group(), text).replace("<", "&lt;")
    return _AUTOLINK.sub(lambda m: f"{m[1]}\\/\\/" if m[1] else f"{m[3]}\\.", text)
