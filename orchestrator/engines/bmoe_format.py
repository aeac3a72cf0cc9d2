"""Pure parsers for bmoe-cli artifacts (docs/formats.md §1-§5).

Nothing here does I/O: callers pass lines or whole texts. Problems are recorded, never raised,
because a half-written or corrupted artifact must still yield what it can (a killed run keeps
its token rows).
"""
from __future__ import annotations

import dataclasses
import re
from operator import attrgetter
from typing import Any

from orchestrator.engines.base import TOKEN_COLUMNS, TokenRow
from orchestrator.engines.bmoe_checks import STEP_MAX, row_problem
from orchestrator.engines.bmoe_lines import (
    BOM,
    MAX_LINE,
    match_summary_line,
    parse_summary_lines,
)

# what a negative, non-finite or unstorable number needs in a CSV field: a minus sign, the
# letters of nan / inf / infinity (float() takes any case) or an exponent (1e309 is Inf);
# or more than _SHORT characters (an integer beyond 2^63-1 has 19 digits; a long fraction
# merely takes the full check). One C-level search and one max(map(len)) per row: an
# alternation with \d{19} in the regex would cost several times the search.
_SIGNED = re.compile(r"[-nNiIeE]")
_SHORT = 18
MAX_ERRORS = 200              # a garbage stream must not grow the error list without bound

_INT_COLUMNS = {"step", "read_bytes", "turn"}
_FLOAT_FIELDS = set(TOKEN_COLUMNS) - _INT_COLUMNS
# Control characters that never occur in engine text output; NUL and U+FFFD (what a lossy
# decode leaves behind) mark binary garbage.
_GARBAGE = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ufffd]")
_INT_RE = re.compile(r"[+-]?\d+")
_FLOAT_RE = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?|[+-]?(inf|nan)", re.IGNORECASE)


def convert(value: str) -> Any:
    """'42' -> 42, '4.5' -> 4.5, anything else stays a string (settings like model=x.gguf)."""
    if _INT_RE.fullmatch(value):
        return int(value)
    if _FLOAT_RE.fullmatch(value):
        return float(value)
    return value


def _number(value: str) -> int | float | None:
    """A CSV field as a number; None for an empty field; ValueError when not numeric."""
    value = value.strip()
    if value == "":
        return None
    out = convert(value)
    if isinstance(out, str):
        raise ValueError(value)  # noqa: TRY004 (callers catch ValueError: a bad field)
    return out


def _extra_number(value: str) -> int | float | None:
    """Columns orch has no field for (steps, turn, rss_mib, ...): int when integral."""
    value = value.strip()
    if not value:
        return None
    if "." in value or "e" in value or "E" in value or "n" in value.lower():
        return float(value)
    return int(value)


def parse_kv_tokens(text: str) -> dict[str, Any]:
    """Whitespace-separated key=value tokens (trailer and preamble); keys may contain '/'."""
    out: dict[str, Any] = {}
    for tok in text.split():
        if "=" in tok:
            key, _, val = tok.partition("=")
            out[key] = convert(val)
    return out


# where feed_values' tuple has these fields (TokenRow's field order)
_FIELDS = tuple(f.name for f in dataclasses.fields(TokenRow))
_EXTRA, _HIT, _TURN = _FIELDS.index("extra"), _FIELDS.index("cache_hit_pct"), _FIELDS.index("turn")
_row_values = attrgetter(*_FIELDS)


def _values(row: TokenRow | None) -> tuple[Any, ...] | None:
    return None if row is None else _row_values(row)


class BmoeCsvParser:
    """Incremental parser of a bmoe per-token CSV, fed one line at a time (live tailing)."""

    def __init__(self) -> None:
        self.settings: dict[str, Any] = {}
        self.version: int | None = None      # the preamble's `# bmoe_metrics vN`
        self.columns: list[str] | None = None
        self.trailers: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self.error_count = 0
        self.n_rows = 0
        self.impossible: list[str] = []       # rows dropped for impossible values (bmoe_checks)
        self._last_step: int | None = None    # within the current generation turn
        self._turn: Any = None
        self.steps_target: int | float | None = None  # the `steps` column: the -n target
        self._lineno = 0
        self._finished = False
        self._built_for: list[str] | None = None
        self._build: Any = None
        self._build_full: Any = None
        self._steps_index: int | None = None

    @property
    def complete(self) -> bool:
        # A killed or crashed run has rows but no trailer (docs/formats.md §1); the trailer is
        # the only proof that the engine finished its generation turn.
        return bool(self.trailers)

    def _error(self, msg: str, always: bool = False) -> None:
        self.error_count += 1
        if always or len(self.errors) < MAX_ERRORS:
            self.errors.append(f"line {self._lineno}: {msg}")

    def feed(self, line: str) -> TokenRow | None:
        """The line's token row, or None (not a data row, or a row dropped with an error)."""
        values = self.feed_values(line)
        return None if values is None else TokenRow(*values)

    def feed_values(self, line: str) -> tuple[Any, ...] | None:
        """feed's row as the tuple of its fields in TokenRow's order (db/writes.py TOKEN_KEYS
        after run_id and seq), or None: the recorder's hot path stores the tuple as it is,
        without a TokenRow to build and take apart again (2 us of the ~25 us a row costs)."""
        self._lineno += 1
        # Fast path, one per token: a data row under a known header. Anything unusual (a
        # comment, a header, a BOM, a bad field) takes the careful path below.
        if self.columns is not None and line[:1].isdigit() and len(line) <= MAX_LINE:
            fields = line.rstrip("\r\n").split(",")
            if len(fields) == len(self.columns):
                if self._built_for is not self.columns:
                    self._builder()
                try:
                    values = self._build_full(fields)
                except ValueError:
                    values = None
                if values is not None:
                    if self.steps_target is None and self._steps_index is not None:
                        self.steps_target = _extra_number(fields[self._steps_index])
                    # _SIGNED's characters, as `in` tests (each a C memchr: cheaper than the
                    # regex search on this path)
                    signed = ("-" in line or "e" in line or "E" in line or "n" in line
                              or "N" in line or "i" in line or "I" in line
                              or max(map(len, fields)) > _SHORT)
                    if not signed and values[_EXTRA] is None and values[_TURN] is None \
                            and self._turn is None:
                        # what _checked and row_problem find for such a row, inline: no value
                        # can be negative or non-finite, so only a cache hit over 100 and the
                        # step's range and order are left; a row with a problem takes
                        # _checked, which names it
                        step, hit, last = values[0], values[_HIT], self._last_step
                        if 1 <= step <= STEP_MAX and (last is None or step > last) \
                                and (hit is None or hit <= 100.0):
                            self._last_step = step
                            self.n_rows += 1
                            return values
                    return _values(self._checked(TokenRow(*values), signed))
        return _values(self._feed_careful(line))

    def _feed_careful(self, line: str) -> TokenRow | None:
        if len(line) > MAX_LINE:
            self._error(f"line too long ({len(line)} chars > {MAX_LINE}), skipped")
            return None
        line = line.rstrip("\r\n")
        if line.startswith(BOM):   # PowerShell copies; tolerated on any line, not just the first
            line = line.lstrip(BOM)
        if _GARBAGE.search(line):
            self._error("binary garbage (control or undecodable bytes), skipped")
            return None
        if not line.strip():
            return None
        if line.startswith("#"):
            self._comment(line[1:].strip())
            return None
        if self.columns is None:
            if line.startswith("step,"):
                self.columns = [c.strip() for c in line.split(",")]
                dup = {c for c in self.columns if self.columns.count(c) > 1}
                if dup:
                    self._error(f"duplicate header columns {sorted(dup)}")
                return None
            self._error("data before the header row, skipped")
            return None
        if line.startswith("step,"):
            cols = [c.strip() for c in line.split(",")]
            if cols != self.columns:      # an appended second run with another engine version
                self._error("header changed mid-file; using the new one")
                self.columns = cols
            self._last_step = None
            return None
        return self._row(line)

    def _comment(self, body: str) -> None:
        if body.startswith("summary"):
            self.trailers.append(parse_kv_tokens(body[len("summary"):]))
            self._last_step = None     # a new generation turn counts its steps afresh
            return
        m = re.fullmatch(r"bmoe_metrics\s+v(\d+)", body)
        if m:
            self.version = int(m.group(1))
            return
        # Preamble lines (`# model=... arch=...`): the resolved settings. Other comments are
        # ignored: a future engine may annotate freely.
        self.settings.update(parse_kv_tokens(body))

    def _builder(self) -> Any:
        """A row constructor compiled once per header (like namedtuple does): one expression
        with a conversion per column, no per-field loop or dict; ingest has to keep up with
        the engine."""
        if self._built_for is not self.columns:
            assert self.columns is not None
            self._built_for = self.columns
            idx = {name: i for i, name in enumerate(self.columns)}
            parts, fast = [], []     # positional, in TokenRow's field order: no keywords
            for name in TOKEN_COLUMNS:
                if name in idx:
                    conv = "int" if name in _INT_COLUMNS else "float"
                    parts.append(f"({conv}(f[{idx[name]}]) if f[{idx[name]}] else None)")
                    fast.append(f"{conv}(f[{idx[name]}])")
                else:
                    parts.append("None")
                    fast.append("None")
            extras = [n for n in self.columns if n not in TOKEN_COLUMNS and n != "steps"]
            if extras:
                parts.append("{" + ", ".join(f"{n!r}: _x(f[{idx[n]}])" for n in extras) + "}")
                fast.append(parts[-1])
            else:
                parts.append("None")
                fast.append("None")
            names = {"TokenRow": TokenRow, "_x": _extra_number}
            self._build = eval(f"lambda f: TokenRow({', '.join(parts)})", names)
            # the fast path's, as a tuple of TokenRow's fields (feed_values): no empty field
            # (float('') raises, and the row takes the careful path, which builds it with
            # self._build)
            self._build_full = eval(f"lambda f: ({', '.join(fast)})", names)
            self._steps_index = idx.get("steps")
        return self._build

    def _row(self, line: str) -> TokenRow | None:
        assert self.columns is not None
        fields = line.split(",")
        if len(fields) != len(self.columns):
            self._error(f"wrong column count (expected {len(self.columns)}, got {len(fields)})")
            return None
        # Fast path; any surprise (a space, a non-number, an empty step) falls back to the
        # careful path that names the bad field.
        try:
            row = self._builder()(fields)
        except ValueError:
            return self._row_careful(fields)
        if row.step is None:
            return self._row_careful(fields)
        # `steps` is the -n target, the same on every row: kept once, not per row.
        if self.steps_target is None and self._steps_index is not None:
            self.steps_target = _extra_number(fields[self._steps_index])
        # Sentinels (-1 cache_hit_pct, -1 dense_resident_frac) are kept as given: only the
        # consumer knows whether -1 means "no cache" or "not measured".
        return self._checked(row)

    def _checked(self, row: TokenRow, signed: bool = True) -> TokenRow | None:
        """The row, or None (dropped, with a line-numbered error) when a value is impossible
        (engines/bmoe_checks.py): a live run keeps its other rows and shows the error.
        signed=False: the line has no '-', no letter of nan/inf, no exponent and no field over
        18 characters, so the sign, finiteness and 64-bit checks are skipped (one regex
        search in C instead of a Python loop per row)."""
        turn = row.turn
        if turn != self._turn:
            self._turn, self._last_step = turn, None
        problem = row_problem(row, self._last_step, signed)
        if problem is not None:
            if len(self.impossible) < MAX_ERRORS:
                self.impossible.append(f"line {self._lineno}: {problem}")
            self._error(f"impossible value: {problem}, row dropped")
            return None
        self._last_step = row.step
        self.n_rows += 1
        return row

    def _row_careful(self, fields: list[str]) -> TokenRow | None:
        assert self.columns is not None
        values: dict[str, Any] = {}
        for name, raw in zip(self.columns, fields):
            try:
                values[name] = _number(raw)
            except ValueError:
                self._error(f"non-numeric value {raw[:40]!r} in column {name!r}, row skipped")
                return None
        step = values.pop("step", None)
        if not isinstance(step, int):
            self._error(f"step {step!r} is not an integer, row skipped")
            return None
        known: dict[str, Any] = {}
        for name in list(values):
            if name in _FLOAT_FIELDS:
                v = values.pop(name)
                known[name] = float(v) if v is not None else None
            elif name in _INT_COLUMNS:
                v = values.pop(name)
                known[name] = int(v) if v is not None else None
        steps = values.pop("steps", None)
        if isinstance(steps, int):
            self.steps_target = steps
        return self._checked(TokenRow(step=step, extra=values or None, **known))

    def finish(self) -> list[str]:
        """End of input: record what the whole file lacks. Returns all errors."""
        if not self._finished:
            self._finished = True
            if self.columns is None:
                self._error("no header row (expected a line starting 'step,')", always=True)
            elif self.n_rows == 0:
                self._error("header but no data rows", always=True)
            if not self.trailers and self.n_rows:
                self._error("no '# summary' trailer: run killed, crashed or file truncated",
                            always=True)
        return self.errors


# ---- sidecars and logs (docs/formats.md §4, §5) --------------------------------------------

def parse_metrics_sidecar(text: str) -> dict[str, Any]:
    """The bench-run.sh `.metrics` key=value lines; an empty value (failed read) -> None."""
    out: dict[str, Any] = {}
    for line in text.lstrip(BOM).splitlines():
        line = line.strip()
        if not line or "=" not in line or " " in line.split("=", 1)[0]:
            continue
        key, _, val = line.partition("=")
        out[key.strip()] = convert(val.strip()) if val.strip() else None
    return out


SIDECAR_KEY = re.compile(r"[a-z_]+_(kb|dC|mC)=")


def split_log(text: str) -> dict[str, Any]:
    """A PowerShell `.log` (BOM, summary lines, then sidecar lines) or one driver-log section.

    Returns {"lines": parse_summary_lines(...) without text, "metrics": sidecar dict,
    "other": lines that are neither (driver chatter such as `print_info:`)}.
    """
    summary: list[str] = []
    sidecar: list[str] = []
    other: list[str] = []
    for line in text.lstrip(BOM).splitlines():
        if SIDECAR_KEY.match(line.strip()):
            sidecar.append(line)
        elif match_summary_line(line):
            summary.append(line)
        elif line.strip():
            other.append(line)
    lines = parse_summary_lines(summary)
    lines.pop("text", None)
    return {"lines": lines, "metrics": parse_metrics_sidecar("\n".join(sidecar)), "other": other}


_SECTION = re.compile(r"^=+ (.+?) =+$")


def split_sections(text: str) -> list[tuple[str, str]]:
    """Split a driver/matrix log on `==== TAG ====` separators -> [(tag, body)].

    Text before the first separator gets the tag "". A `DONE` tag (driver logs) is kept; the
    caller decides what a tag means.
    """
    sections: list[tuple[str, list[str]]] = [("", [])]
    for line in text.lstrip(BOM).splitlines():
        m = _SECTION.match(line.strip())
        if m:
            sections.append((m.group(1).strip(), []))
        else:
            sections[-1][1].append(line)
    return [(tag, "\n".join(body)) for tag, body in sections if tag or any(s.strip() for s in body)]
