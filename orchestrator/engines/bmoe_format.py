"""Pure parsers for bmoe-cli artifacts (docs: shared reference bmoe-formats.md §1-§5).

Nothing here does I/O: callers pass lines or whole texts. Problems are recorded, never raised,
because a half-written or corrupted artifact must still yield what it can (a killed run keeps
its token rows).
"""
from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from orchestrator.engines.base import TOKEN_COLUMNS, TokenRow

BOM = "\ufeff"
MAX_LINE = 64 * 1024          # longer lines are not engine output (runaway or corrupt stream)
MAX_ERRORS = 200              # a garbage stream must not grow the error list without bound

_INT_COLUMNS = {"step", "read_bytes"}
_FLOAT_FIELDS = set(TOKEN_COLUMNS) - _INT_COLUMNS
# Control characters that never occur in engine text output; NUL and U+FFFD (what a lossy
# decode leaves behind) mark binary garbage.
_GARBAGE = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ufffd]")
_INT_RE = re.compile(r"[+-]?\d+")
_FLOAT_RE = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?|[+-]?(inf|nan)", re.I)


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
        raise ValueError(value)
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
        self.steps_target: int | None = None  # the `steps` column: the -n target
        self._lineno = 0
        self._finished = False
        self._built_for: list[str] | None = None
        self._build: Any = None
        self._steps_index: int | None = None

    @property
    def complete(self) -> bool:
        # A killed or crashed run has rows but no trailer (§1); the trailer is the only proof
        # that the engine finished its generation turn.
        return bool(self.trailers)

    def _error(self, msg: str, always: bool = False) -> None:
        self.error_count += 1
        if always or len(self.errors) < MAX_ERRORS:
            self.errors.append(f"line {self._lineno}: {msg}")

    def feed(self, line: str) -> TokenRow | None:
        self._lineno += 1
        # Fast path, one per token: a data row under a known header. Anything unusual (a
        # comment, a header, a BOM, a bad field) takes the careful path below.
        if self.columns is not None and line[:1].isdigit() and len(line) <= MAX_LINE:
            fields = line.rstrip("\r\n").split(",")
            if len(fields) == len(self.columns):
                try:
                    row = self._builder()(fields)
                except ValueError:
                    row = None
                if row is not None and row.step is not None:
                    if self.steps_target is None and self._steps_index is not None:
                        self.steps_target = _extra_number(fields[self._steps_index])
                    self.n_rows += 1
                    return row
        return self._feed_careful(line)

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
            return None
        return self._row(line)

    def _comment(self, body: str) -> None:
        if body.startswith("summary"):
            self.trailers.append(parse_kv_tokens(body[len("summary"):]))
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
            parts = []
            for name in TOKEN_COLUMNS:
                if name in idx:
                    conv = "int" if name in _INT_COLUMNS else "float"
                    parts.append(f"{name}=({conv}(f[{idx[name]}]) if f[{idx[name]}] else None)")
            extras = [n for n in self.columns if n not in TOKEN_COLUMNS and n != "steps"]
            if extras:
                parts.append("extra={" + ", ".join(f"{n!r}: _x(f[{idx[n]}])" for n in extras) + "}")
            self._build = eval(f"lambda f: TokenRow({', '.join(parts)})",  # noqa: S307
                               {"TokenRow": TokenRow, "_x": _extra_number})
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
        self.n_rows += 1
        # Sentinels (-1 cache_hit_pct, -1 dense_resident_frac) are kept as given: only the
        # consumer knows whether -1 means "no cache" or "not measured".
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
        self.n_rows += 1
        return TokenRow(step=step, extra=values or None, **known)

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


# ---- stdout summary lines (§3) -------------------------------------------------------------

_NUM = r"([0-9]+(?:\.[0-9]+)?)"
_LINE_RES: dict[str, re.Pattern[str]] = {
    "generation": re.compile(
        rf"generation: {_NUM} tokens, {_NUM} s/token \({_NUM} tok/s\)"),
    "prefill": re.compile(
        rf"prefill: {_NUM} tokens, {_NUM} s \({_NUM} tok/s\)"
        rf"(?: \| model load {_NUM} s)?(?: \| TTFT {_NUM} s)?"),
    "moe_stream": re.compile(
        rf"moe-stream: read {_NUM} MiB \({_NUM} MiB/token\), decode {_NUM} s/token "
        rf"\(compute {_NUM}(?: \+ cache mgmt {_NUM})? \+ flash I/O {_NUM} s/token, {_NUM} MiB/s\)"),
    "moe_cache": re.compile(
        rf"moe-cache: {_NUM}% hit, resident {_NUM} MiB(?:, budget {_NUM} MiB(?: \(([^)]*)\))?)?"),
    "moe_overlap": re.compile(rf"moe-overlap: stall {_NUM} s/token(?: \([^)]*\))?"),
    "moe_prefetch": re.compile(
        rf"moe-prefetch: {_NUM} MiB speculative, (\d+)/(\d+) experts useful \({_NUM}%\)"),
    "compute": re.compile(
        rf"compute: {_NUM}% CPU occupancy \({_NUM} cpu-s/token over (\d+) threads\), "
        rf"{_NUM} major faults/token"),
    "moe_spec_gate": re.compile(
        rf"moe-spec-gate: {_NUM}% router prediction recall(?: \(auto-disabled below {_NUM}%\))?"),
}
_PREFIX = {k: r.pattern.split(":", 1)[0] + ":" for k, r in _LINE_RES.items()}
_ANY_PREFIX = re.compile("|".join(re.escape(p) for p in _PREFIX.values()))


def _f(s: str | None) -> float | None:
    return float(s) if s is not None else None


def _fields(kind: str, g: tuple[str | None, ...]) -> dict[str, Any]:
    if kind == "generation":
        return {"tokens": int(g[0]), "s_per_token": _f(g[1]), "tok_per_s": _f(g[2])}
    if kind == "prefill":
        return {"tokens": int(g[0]), "s": _f(g[1]), "tok_per_s": _f(g[2]),
                "load_s": _f(g[3]), "ttft_s": _f(g[4])}
    if kind == "moe_stream":
        return {"read_mib": _f(g[0]), "mib_per_token": _f(g[1]), "decode_s_per_token": _f(g[2]),
                "compute_s_per_token": _f(g[3]), "mgmt_s_per_token": _f(g[4]),
                "io_s_per_token": _f(g[5]), "mib_per_s": _f(g[6])}
    if kind == "moe_cache":
        note = g[3] or ""
        resized = re.search(r"resized (\d+)", note)
        return {"hit_pct": _f(g[0]), "resident_mib": _f(g[1]), "budget_mib": _f(g[2]),
                "budget_auto": ("auto" in note) if g[2] is not None else None,
                "resizes": int(resized.group(1)) if resized else None}
    if kind == "moe_overlap":
        return {"stall_s_per_token": _f(g[0])}
    if kind == "moe_prefetch":
        return {"spec_mib": _f(g[0]), "useful": int(g[1]), "experts": int(g[2]),
                "useful_pct": _f(g[3])}
    if kind == "compute":
        return {"cpu_pct": _f(g[0]), "cpu_s_per_token": _f(g[1]), "threads": int(g[2]),
                "majflt_per_token": _f(g[3])}
    # moe_spec_gate
    return {"recall_pct": _f(g[0]), "auto_disabled": g[1] is not None,
            "auto_off_below_pct": _f(g[1])}


def match_summary_line(line: str) -> tuple[str, dict[str, Any], str] | None:
    """(kind, fields, glued_head) if the line is a §3 summary line, else None.

    Rule: a prefix at the start of the line needs its full regex to match the rest of the line.
    A prefix found later in the line (stderr or generated text glued before it, no newline) is
    accepted only when everything from that prefix to the END of the line matches the full
    regex; the text before it is returned as `glued_head`. The regexes are specific enough
    (fixed wording, units, numbers) that generated prose cannot satisfy them by accident, while
    a loose "prefix anywhere" rule would pick up e.g. a model writing "compute: ...".
    In the fixtures every summary line starts its line (after the .log BOM); the only glued text
    there is the echoed prompt running into the first generated token.
    """
    line = line.rstrip("\r\n").lstrip(BOM).rstrip()
    for m in _ANY_PREFIX.finditer(line):
        for kind, prefix in _PREFIX.items():
            if prefix == m.group(0):
                full = _LINE_RES[kind].fullmatch(line, m.start())
                if full:
                    return kind, _fields(kind, full.groups()), line[:m.start()]
    return None


def parse_summary_lines(lines: Iterable[str], prompt: str | None = None) -> dict[str, Any]:
    """Parse the engine's stdout summary lines; also the generated `text` of a full .out log.

    Returns {kind: fields} for each summary line kind seen (a later line of the same kind wins,
    e.g. in a multi-turn log), plus `text`: everything before the first summary line with
    trailing blank lines removed (the engine echoes the prompt first; pass `prompt` to strip
    it), or None when no summary line was found (then the text cannot be delimited).
    """
    out: dict[str, Any] = {}
    before: list[str] = []
    first_seen = False
    for raw in lines:
        line = raw.rstrip("\r\n")
        hit = match_summary_line(line) if len(line) <= MAX_LINE else None
        if hit is None:
            if not first_seen:
                before.append(line.lstrip(BOM) if not before else line)
            continue
        kind, fields, head = hit
        if not first_seen and head:
            before.append(head)     # generated text that ran into the summary line
        first_seen = True
        out[kind] = fields
    text = None
    if first_seen:
        text = "\n".join(before).rstrip("\n")
        if prompt and text.startswith(prompt):
            text = text[len(prompt):]
    out["text"] = text
    return out


# ---- sidecars and logs (§4, §5) ------------------------------------------------------------

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
