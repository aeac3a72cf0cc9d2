"""The report's tables as data: a header, alignments and rows of markdown-ready cells.

Cells are built once, already escaped, so templates only lay them out; numbers are formatted by
the same Col formatters as `orch table` (orchestrator.results.tables), so a figure reads the same in
the report, the published summary.md and the terminal.
"""
from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from orchestrator.results import tables

DASH = tables.DASH
MINUS = "−"                    # the published documents print deltas with a real minus sign


@dataclass
class Table:
    headers: list[str]
    aligns: list[str]                      # markdown alignment rows: "---", "---:", ":--:"
    rows: list[list[str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)   # markdown lines printed under the table

    def drop_empty(self, keep: Iterable[int] = (0,)) -> "Table":
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


def ok(v: Any) -> bool:
    return v is not None and not (isinstance(v, float) and math.isnan(v))


# ---- escaping ----------------------------------------------------------------------------

def md_escape(value: Any) -> str:
    """Inline markdown text that cannot break a table row, open an HTML tag or a code span:
    the cell escape of `orch table` plus `<`, `*` and backticks (names and flags are data)."""
    text = tables.escape_cell("" if value is None else value)
    return text.replace("<", "&lt;").replace("*", "\\*").replace("`", "\\`")


def md_code(value: Any) -> str:
    """An inline code span for a flag string or a hash. Backslash escapes do not work inside a
    code span, so the fence grows past the longest backtick run instead; `|` keeps its table
    escape (GFM removes it before the span is parsed)."""
    if value is None or value == "":
        return DASH
    text = tables._NEWLINES.sub(" ", str(value)).replace("|", "\\|")
    ticks = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * (ticks + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def md_fence(text: str, info: str = "") -> str:
    """A fenced block whose fence is longer than any backtick run inside (a prompt may hold
    ``` itself)."""
    ticks = max((len(m) for m in re.findall(r"`{3,}", text)), default=2)
    fence = "`" * (ticks + 1)
    return f"{fence}{info}\n{text.rstrip(chr(10))}\n{fence}"


def md_table(table: Table) -> str:
    if not table.headers:
        return ""
    lines = ["| " + " | ".join(table.headers) + " |", "|" + "|".join(table.aligns) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in table.rows]
    return "\n".join(lines)


# ---- numbers -----------------------------------------------------------------------------

def _tables_fmt(key: str) -> Callable[[Any], str]:
    for spec in tables.TABLES.values():
        for col in spec:
            if col.key == key:
                return col.fmt
    raise KeyError(key)


# Below these, the published precision prints 0 (a synthetic moe-probe geometry reads well
# under a MiB per token and its process stays in MiB): more digits instead of a false zero.
_SMALL: dict[str, tuple[float, Callable[[float], str]]] = {
    "read_mib_per_token": (10.0, lambda v: "%.2f MiB" % v),
    "peak_rss_gib": (0.1, lambda v: "%.1f MiB" % (v * 1024)),
}


def fmt(key_or_pattern: str) -> Callable[[Any], str]:
    """A cell formatter: a stats key (the published format of that column) or a %-pattern."""
    f = (lambda v: key_or_pattern % v) if "%" in key_or_pattern else _tables_fmt(key_or_pattern)
    limit, small = _SMALL.get(key_or_pattern, (0.0, f))

    def cell(v: Any) -> str:
        if not ok(v):
            return DASH
        return small(v) if 0 < v < limit else f(v)
    return cell


def pct(v: float | None) -> str:
    """A signed percentage with a real minus: +24.3%, −26.8%."""
    return (("%+.1f%%" % v).replace("-", MINUS)) if ok(v) else DASH


def ratio(v: float | None) -> str:
    return "%.2f×" % v if ok(v) else DASH


def gib_from_kb(kb: Any) -> str:
    try:
        return "%.1f GiB" % (float(kb) / 1048576)
    except (TypeError, ValueError):
        return DASH


def when(t: Any) -> str:
    """Timestamps as stored (UTC): to the second, so two runs of one session are told apart."""
    return t.strftime("%Y-%m-%d %H:%M:%S") if t is not None else DASH


def id_list(ids: Sequence[int]) -> str:
    """Run ids as `3, 5–9`: consecutive repeats collapse to a range, so a config with 50
    repeats still fits a cell; every id stays recoverable."""
    out: list[str] = []
    nums = sorted(set(ids))
    i = 0
    while i < len(nums):
        j = i
        while j + 1 < len(nums) and nums[j + 1] == nums[j] + 1:
            j += 1
        out.append(str(nums[i]) if j == i else f"{nums[i]}–{nums[j]}")
        i = j + 1
    return ", ".join(out) if out else DASH


def expand_ids(cell: str) -> list[int]:
    """The inverse of id_list (for readers and tests that trace numbers to runs)."""
    ids: list[int] = []
    for part in re.findall(r"\d+(?:–\d+)?", cell):
        a, _, b = part.partition("–")
        ids.extend(range(int(a), int(b or a) + 1))
    return ids


def split_cell(rec: Mapping[str, Any]) -> str:
    """decode: compute + I/O (s/tok), as the published write-up prints it."""
    c, i = rec.get("compute_s_per_token"), rec.get("io_s_per_token")
    if not ok(c) and not ok(i):
        return DASH
    return f"{'%.3f' % c if ok(c) else DASH} + {'%.3f' % i if ok(i) else DASH}"


def temp_cell(rec: Mapping[str, Any]) -> str:
    a, b = rec.get("cpu_temp_start_c"), rec.get("cpu_temp_max_c")
    if not ok(a) and not ok(b):
        return DASH
    return f"{'%.1f' % a if ok(a) else DASH} → {'%.1f' % b if ok(b) else DASH} °C"


def spread_cell(spread: Mapping[str, Any] | None) -> str:
    """Spread of repeated runs' means: ± sample stdev, range (n). Empty for a single run."""
    if not spread or spread.get("n", 0) < 2:
        return DASH
    unit = " repetitions" if spread.get("unit") == "repetitions" else ""
    return "±%.2f, %.2f–%.2f (n=%d%s)" % (spread["stdev"], spread["min"], spread["max"],
                                            spread["n"], unit)
