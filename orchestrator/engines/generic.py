r"""Generic adapter: any engine, described by the matrix's `engine_options`. (Its ~400
lines are one concern: the options' validation and the parser they configure go together.)

Options (validated; an unknown or bad key is a ValueError naming it):

- `argv`: the command as a list, one element per argument. Placeholders `{binary}` `{model}`
  `{prompt}` `{tokens}` `{csv}` are replaced inside elements (once: a prompt holding
  "{csv}" stays as written); an element that is exactly `{flags}` expands in place to the
  config's flags. The engine writes a per-token CSV (tailed live by the agent) iff `{csv}`
  appears.
- `csv_columns`: orch token field -> CSV column name. Fields: step, wall_ms, io_ms,
  compute_ms, stall_ms, mgmt_ms, read_bytes, cache_hit_pct, majflt, cpu_ms. Without `step`
  rows are numbered 1, 2, ... Columns not mapped are kept per row in TokenRow.extra.
- `csv_scale`: field -> factor applied to the column (a time in seconds -> `wall_ms: 1000`).
- `csv_delimiter` (default ","), `csv_comment` (default "#": such lines are skipped),
  `csv_has_header` (default true; when false give the names in `csv_header`).
- `regex`: key -> regex searched in every stdout/stderr line; the first group is read
  as a float, the last matching line wins. Keys named like bmoe's trailer feed orch's tables:
  prefill_tps, load_s, prefill_s (TTFT = load_s + prefill_s), read_MiB, io_s/tok,
  compute_s/tok, cache_hit_pct, tok/s.
- `regex_scale`: key -> factor (a time printed in ms -> `load_s: 0.001`).
- `complete_regex`: a line proving the run finished; without it a run is complete once it has
  produced a CSV row (or, with no CSV, a regex match).

Example: the Celeron study's harness (llama.cpp's `llama-expert-log`, one CSV row per token
with the token's wall time in seconds, its major faults and the pread/madvise time buckets).
The CSV column names below are assumed, not taken from the harness source; check them against
a real `-o results.csv` header::

    engine: generic
    binary: {device: /home/me/llama.cpp/build/bin/llama-expert-log}
    engine_options:
      argv: ["{binary}", "-m", "{model}", "-o", "{csv}", "-p", "{prompt}", "-n", "{tokens}",
             "{flags}"]
      csv_columns: {step: token, wall_ms: tok_s, io_ms: pread_s, mgmt_ms: madvise_s,
                    majflt: majflt, read_bytes: pread_bytes}
      csv_scale: {wall_ms: 1000, io_ms: 1000, mgmt_ms: 1000}
      regex:
        load_s: 'load time =\s*([0-9.]+) ms'
        prefill_tps: 'prompt eval time = .*\(\s*[0-9.]+ ms per token,\s*([0-9.]+) tokens per second'
      regex_scale: {load_s: 0.001}
"""
from __future__ import annotations

import csv
import math
import re
from collections import deque
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    ValidationError,
    field_validator,
    model_validator,
)

from orchestrator.engines.base import (
    TOKEN_COLUMNS,
    CellSpec,
    EngineAdapter,
    RunParser,
    TokenRow,
)
from orchestrator.record import RunRecord, trailer_fields
from orchestrator.stats.figures import rate

STDERR_TAIL = 50
MAX_STDOUT_LINES = 100_000
MAX_ERRORS = 200
PLACEHOLDERS = ("binary", "model", "prompt", "tokens", "csv")
_PLACEHOLDER = re.compile(r"\{([A-Za-z_]\w*)\}")
_INT_FIELDS = {"step", "read_bytes"}
_NONE: list[TokenRow] = []


class GenericOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    argv: list[str]
    csv_columns: dict[str, str] = {}
    csv_scale: dict[str, float] = {}
    csv_delimiter: str = ","
    csv_comment: str | None = "#"
    csv_has_header: bool = True
    csv_header: list[str] | None = None
    regex: dict[str, str] = {}
    regex_scale: dict[str, float] = {}
    complete_regex: str | None = None

    @field_validator("argv")
    @classmethod
    def _argv(cls, value: list[str]) -> list[str]:
        if not value:
            raise ValueError("needs at least the program, e.g. [\"{binary}\", ...]")
        for i, el in enumerate(value):
            for name in _PLACEHOLDER.findall(el):
                if name == "flags" and el != "{flags}":
                    raise ValueError(f"[{i}] {el!r}: {{flags}} must be an element of its own")
                if name not in PLACEHOLDERS and name != "flags":
                    known = ", ".join("{%s}" % p for p in (*PLACEHOLDERS, "flags"))
                    raise ValueError(f"[{i}] {el!r}: unknown placeholder {{{name}}} "
                                     f"(known: {known})")
        return value

    @field_validator("csv_columns")
    @classmethod
    def _columns(cls, value: dict[str, str]) -> dict[str, str]:
        for field, column in value.items():
            if field not in TOKEN_COLUMNS:
                raise ValueError(f"{field!r} is not a token field (known: "
                                 f"{', '.join(TOKEN_COLUMNS)})")
            if not column.strip():
                raise ValueError(f"{field!r}: empty column name")
        return value

    @field_validator("csv_delimiter")
    @classmethod
    def _delimiter(cls, value: str) -> str:
        if len(value) != 1:
            raise ValueError(f"{value!r}: must be one character")
        return value

    @field_validator("regex")
    @classmethod
    def _regexes(cls, value: dict[str, str]) -> dict[str, str]:
        for key, pattern in value.items():
            try:
                groups = re.compile(pattern).groups
            except re.error as exc:
                raise ValueError(f"{key!r}: not a valid regex ({exc})") from None
            if groups < 1:
                raise ValueError(f"{key!r}: needs a group around the number, e.g. '([0-9.]+)'")
        return value

    @field_validator("complete_regex")
    @classmethod
    def _complete(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"not a valid regex ({exc})") from None
        return value

    @model_validator(mode="after")
    def _consistent(self) -> "GenericOptions":
        for key in self.csv_scale:
            if key not in self.csv_columns:
                raise ValueError(f"csv_scale.{key}: not a field mapped in csv_columns")
        for key in self.regex_scale:
            if key not in self.regex:
                raise ValueError(f"regex_scale.{key}: not a key of regex")
        writes = any("{csv}" in el for el in self.argv)
        if self.csv_columns and not writes:
            raise ValueError("csv_columns: argv has no {csv}, so no CSV is written to read")
        if writes and not self.csv_columns:
            raise ValueError("csv_columns: argv writes a CSV ({csv}); map its columns")
        if self.csv_has_header and self.csv_header is not None:
            raise ValueError("csv_header: only with csv_has_header: false")
        if not self.csv_has_header:
            if not self.csv_header:
                raise ValueError("csv_header: the column names are needed when "
                                 "csv_has_header is false")
            missing = [c for c in self.csv_columns.values() if c not in self.csv_header]
            if missing:
                raise ValueError(f"csv_columns: {missing} not in csv_header")
        return self


def parse_options(options: dict[str, Any] | None) -> GenericOptions:
    """Validated options; a ValueError names each bad key as engine_options.<key>."""
    try:
        return GenericOptions.model_validate(options or {})
    except ValidationError as exc:
        known = ", ".join(GenericOptions.model_fields)
        problems = []
        for err in exc.errors():
            loc = ".".join(str(p) for p in err["loc"])
            msg = err["msg"].removeprefix("Value error, ")
            if err["type"] == "extra_forbidden":
                msg = f"unknown option (known: {known})"
            problems.append(f"engine_options{'.' + loc if loc else ''}: {msg}")
        raise ValueError("; ".join(problems)) from None


def _number(raw: str) -> int | float | str | None:
    """A CSV cell for TokenRow.extra: int, float, else the text; empty -> None."""
    raw = raw.strip()
    if not raw:
        return None
    try:
        return int(raw)
    except ValueError:
        pass
    try:
        return float(raw)
    except ValueError:
        return raw


class GenericRunParser(RunParser):
    def __init__(self, opts: GenericOptions, prompt: str | None = None) -> None:
        self.opts = opts
        self.prompt = prompt
        # with a header the column names arrive as the first CSV line
        self.columns: list[str] | None = (None if opts.csv_has_header
                                          else list(opts.csv_header or []))
        self.values: dict[str, float] = {}
        self.errors: list[str] = []
        self.n_rows = 0
        self.matched_complete = False
        self._regex = {k: re.compile(p) for k, p in opts.regex.items()}
        self._complete = re.compile(opts.complete_regex) if opts.complete_regex else None
        self._sums: dict[str, float] = {}
        self._counts: dict[str, int] = {}
        self._last_hit: float | None = None
        self._index: dict[str, int] = {}
        self._extras: list[tuple[str, int]] = []
        self._stdout: deque[str] = deque(maxlen=MAX_STDOUT_LINES)
        self._stderr: deque[str] = deque(maxlen=STDERR_TAIL)
        self._lineno = 0
        if self.columns is not None:
            self._resolve()

    def _error(self, msg: str) -> None:
        if len(self.errors) < MAX_ERRORS:
            self.errors.append(msg)

    def _resolve(self) -> None:
        assert self.columns is not None
        where = {name: i for i, name in enumerate(self.columns)}
        self._index = {}
        for field, column in self.opts.csv_columns.items():
            if column in where:
                self._index[field] = where[column]
            else:
                self._error(f"CSV has no column {column!r} (mapped to {field})")
        used = set(self._index.values())
        self._extras = [(name, i) for i, name in enumerate(self.columns) if i not in used]

    def feed(self, tag: str, text: str) -> list[TokenRow]:
        if tag == "C":
            row = self._csv_line(text)
            return _NONE if row is None else [row]
        if tag in ("O", "E"):
            (self._stdout if tag == "O" else self._stderr).append(text)
            for key, rx in self._regex.items():
                m = rx.search(text)
                if m is not None:
                    self._value(key, m.group(1))
            if self._complete is not None and self._complete.search(text):
                self.matched_complete = True
        return _NONE

    def _value(self, key: str, raw: str | None) -> None:
        try:
            v = float(raw or "")
        except ValueError:
            self._error(f"regex {key}: {raw!r} is not a number")
            return
        self.values[key] = v * self.opts.regex_scale.get(key, 1.0)

    def _csv_line(self, text: str) -> TokenRow | None:
        self._lineno += 1
        line = text.rstrip("\r\n").lstrip("\ufeff")
        if not line.strip():
            return None
        if self.opts.csv_comment and line.lstrip().startswith(self.opts.csv_comment):
            return None
        try:
            parsed = next(csv.reader([line], delimiter=self.opts.csv_delimiter))
        except csv.Error as exc:      # malformed input must cost a row, never the run
            self._error(f"CSV line {self._lineno}: {exc}; skipped")
            return None
        fields = [f.strip() for f in parsed]
        if self.columns is None:
            self.columns = fields
            self._resolve()
            return None
        if fields == self.columns:      # a header repeated (appended runs): not data
            return None
        if len(fields) != len(self.columns):
            self._error(f"CSV line {self._lineno}: {len(fields)} fields, header has "
                        f"{len(self.columns)}; skipped")
            return None
        return self._row(fields)

    def _row(self, fields: list[str]) -> TokenRow | None:
        values: dict[str, Any] = {}
        for field, i in self._index.items():
            raw = fields[i]
            if raw == "":
                values[field] = None
                continue
            try:
                v = float(raw) * self.opts.csv_scale.get(field, 1.0)
            except ValueError:
                self._error(f"CSV line {self._lineno}: {raw[:40]!r} in column "
                            f"{self.opts.csv_columns[field]!r} is not a number; row skipped")
                return None
            if not math.isfinite(v):
                values[field] = None
                continue
            values[field] = int(round(v)) if field in _INT_FIELDS else v
        step = values.pop("step", None)
        self.n_rows += 1
        for field, v in values.items():
            if v is not None:
                self._sums[field] = self._sums.get(field, 0.0) + v
                self._counts[field] = self._counts.get(field, 0) + 1
        if values.get("cache_hit_pct") is not None:
            self._last_hit = values["cache_hit_pct"]   # cumulative in bmoe's convention
        extra = {name: _number(fields[i]) for name, i in self._extras} or None
        return TokenRow(step=step if step is not None else self.n_rows, extra=extra, **values)

    def _trailer(self) -> dict[str, Any]:
        """bmoe `# summary` trailer keys from the rows (the vocabulary the regex keys use too),
        read into the record like a bmoe trailer."""
        t: dict[str, Any] = {}
        if self.n_rows:
            t["tokens"] = self.n_rows
        if self._counts.get("wall_ms"):
            # as stats/statistics.py (docs/formats.md §6): n counts every row (a speculative
            # group's later rows carry wall 0, an unreadable wall time adds no time)
            wall = self._sums["wall_ms"]
            t["s/tok"] = wall / self.n_rows / 1000.0
            t["tok/s"] = rate(self.n_rows, wall)
        for field, key, scale in (("io_ms", "io_s/tok", 1e-3), ("stall_ms", "stall_s/tok", 1e-3),
                                  ("mgmt_ms", "mgmt_s/tok", 1e-3), ("cpu_ms", "cpu_s/tok", 1e-3),
                                  ("compute_ms", "compute_s/tok", 1e-3),
                                  ("majflt", "majflt/tok", 1.0)):
            if self._counts.get(field):     # mean over the rows that have the column filled
                t[key] = self._sums[field] / self._counts[field] * scale
        if self._counts.get("io_ms"):
            t["io_s"] = self._sums["io_ms"] / 1000.0
        if "compute_s/tok" not in t and "io_s/tok" in t and t.get("s/tok") is not None:
            # no compute column: bmoe's definition (docs/formats.md §2), clamped at 0:
            # s/tok - (stall if measured, else I/O) - cache management
            wait = t.get("stall_s/tok", t["io_s/tok"])
            t["compute_s/tok"] = max(0.0, t["s/tok"] - wait - t.get("mgmt_s/tok", 0.0))
        if self._counts.get("read_bytes"):
            t["read_MiB"] = self._sums["read_bytes"] / 1048576.0
        if self._last_hit is not None:
            t["cache_hit_pct"] = self._last_hit
        t.update(self.values)     # what the engine printed itself wins over orch's arithmetic
        return t

    def record(self) -> RunRecord:
        """The figures of `_trailer()`. extra: that `trailer`, `values` (the regex matches)
        and `columns` (the CSV header)."""
        errors = list(self.errors)
        uses_csv = bool(self.opts.csv_columns)
        if uses_csv and self.columns is None:
            errors.append("no CSV header line arrived")
        elif uses_csv and not self.n_rows:
            errors.append("no CSV data rows")
        missing = [k for k in self._regex if k not in self.values]
        if missing:
            errors.append(f"regex matched no line: {', '.join(missing)}")
        if self._complete is not None:
            complete = self.matched_complete
        else:
            complete = self.n_rows > 0 if uses_csv else bool(self.values)
        text = "\n".join(self._stdout).rstrip() or None
        if text and self.prompt and text.startswith(self.prompt):
            text = text[len(self.prompt):].lstrip("\n") or None
        trailer = self._trailer()
        return RunRecord(
            complete=complete, errors=errors, text=text, stderr_tail=list(self._stderr),
            extra={"trailer": trailer or None, "values": dict(self.values),
                   "columns": list(self.columns or [])},
            **trailer_fields(trailer))


class GenericAdapter(EngineAdapter):
    name = "generic"

    def __init__(self, options: dict[str, Any] | None = None) -> None:
        self.options = parse_options(options)
        self.writes_csv = any("{csv}" in el for el in self.options.argv)

    def build_argv(self, cell: CellSpec) -> list[str]:
        values = {"binary": cell.binary, "model": cell.model_path, "prompt": cell.prompt,
                  "tokens": str(cell.tokens), "csv": cell.csv_path}

        def sub(m: re.Match[str]) -> str:
            value = values[m.group(1)]
            if value is None:
                raise ValueError(f"engine_options.argv uses {{{m.group(1)}}} but the cell has "
                                 f"none (no model for this config?)")
            return value

        argv: list[str] = []
        for el in self.options.argv:
            if el == "{flags}":
                argv.extend(cell.flags)
            else:
                # one pass: text substituted in (a prompt with "{csv}") is never rescanned
                argv.append(_PLACEHOLDER.sub(sub, el))
        return argv

    def new_parser(self, prompt: str | None = None) -> RunParser:
        return GenericRunParser(self.options, prompt=prompt)
