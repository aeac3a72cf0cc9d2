"""One run's result as the engine reported it: the typed record every adapter returns.

Every engine adapter's parser turns what the engine printed into a `RunRecord`; the runner and
the importer store `record.stored()` in `run.summary` (JSON, with `schema_version`), and every
view reads it back with `load_record`. Fields are what orch's tables use, named with their unit
(`_s` seconds, `_tps` tokens per second, `_mib` MiB, `_pct` percent, `_per_token` per generated
token); everything else an engine reports goes to `extra`. A field an engine does not report is
None, never 0.

Version 2 gives orch's own facts about a run typed fields of their own (`validity`,
`route_trace`, `entry_state`); version 1 kept them in `extra`, and `load_record` moves them
out of it. Version 0 records (before this module) are the adapters' old summary dicts: `trailer` (the
bmoe `# summary` keys), `lines` (the parsed stdout summary lines), `settings`, `complete`, ...,
or a bare trailer dict. `load_record` reads them through the same trailer vocabulary that
bmoe-format engines still write (`trailer_fields`), so runs stored before keep loading.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic_core import to_jsonable_python

from orchestrator.record_versions import KIB_PER_GIB, SCHEMA_VERSION, v1_as_v2

__all__ = ["KIB_PER_GIB", "SCHEMA_VERSION", "RunRecord", "Turn", "Pressure", "EntryState",
           "load_record", "trailer_fields", "ttft", "PRESSURE_FIELDS"]


class Pressure(BaseModel):
    """Device pressure over one run: GiB and °C (None = not measured)."""

    peak_rss_gib: float | None = None
    mem_floor_gib: float | None = None
    cpu_temp_start_c: float | None = None
    cpu_temp_max_c: float | None = None
    batt_temp_max_c: float | None = None

    @classmethod
    def from_sidecar(cls, metrics: Mapping[str, Any]) -> Pressure:
        """A bench-run.sh `.metrics` sidecar (kB, milli-°C, deci-°C; None = a failed read)."""
        return cls(**{field: _div(metrics.get(raw), scale) for field, raw, scale in _SIDECAR})


# (field, `.metrics` key, divisor): units by the key's suffix (docs/formats.md §4)
_SIDECAR = (
    ("peak_rss_gib", "peak_rss_kb", KIB_PER_GIB),
    ("mem_floor_gib", "mem_avail_floor_kb", KIB_PER_GIB),
    ("cpu_temp_start_c", "cpu_temp_before_mC", 1000),
    ("cpu_temp_max_c", "cpu_temp_max_mC", 1000),
    ("batt_temp_max_c", "batt_temp_max_dC", 10),
)
PRESSURE_FIELDS: tuple[str, ...] = tuple(Pressure.model_fields)


class EntryState(BaseModel):
    """How an imported run's device was when it started (and ended), as the study's files
    recorded it: the driver log's entry line for the run, and its `.state` file's BEFORE /
    AFTER blocks (frequency caps, temperatures, free RAM)."""

    model_config = ConfigDict(extra="ignore")

    driver: dict[str, Any] | None = None    # the driver log's entry (cpu_khz, log, ...)
    state: dict[str, Any] | None = None     # the `.state` file: {file, before, after}
    lines: dict[str, Any] | None = None     # KEY=VALUE state lines of its logs (freq_cap=...)


class Turn(BaseModel):
    """One generate() of a session run (docs/sessions.md): what the engine's `BMOE_DONE` line
    (or an imported turn record, or one of two summaries in one log section) said about it, and
    when orch sent it. Turn numbers are 1-based in a session; a one-shot run has no turns."""

    model_config = ConfigDict(extra="ignore")

    turn: int                           # 1-based, in the order the requests were sent
    request_id: int | str | None = None  # the request's `id` (BMOE_BEGIN/DONE echo it)
    prompt_tokens: int | None = None    # tokens actually prefilled this turn (`n_prompt`)
    context_tokens: int | None = None   # context length after the turn (`n_past`)
    tokens: int | None = None           # generated this turn
    decode_tps: float | None = None     # the engine's own decode tok/s for the turn
    prefill_s: float | None = None
    prefill_tps: float | None = None
    load_s: float | None = None         # the model load (the first turn of a live session)
    ttft_s: float | None = None         # request sent -> first token: load (turn 1) + prefill
    idle_before_s: float | None = None  # the idle gap asked for before this turn's request
    clear_kv: bool | None = None        # a new chat (KV dropped, expert cache kept)
    cancelled: bool | None = None       # cut short by a `cancel` (its deadline)
    error: str | None = None            # a recoverable BMOE_ERROR that failed this turn
    # the engine's flash and cache figures for the turn (the BMOE_DONE keys)
    cache_hit_pct: float | None = None  # -1 = no cache
    read_mib: float | None = None
    compute_s_per_token: float | None = None
    io_s_per_token: float | None = None
    stall_s_per_token: float | None = None
    mgmt_s_per_token: float | None = None
    # when, in ms since the run started (live runs: orch's clock on the device; None: unknown)
    started_ms: float | None = None
    ended_ms: float | None = None
    text: str | None = None
    extra: dict[str, Any] = Field(default_factory=dict)


class RunRecord(BaseModel):
    """What one run's output said as a whole (docs/engines.md, "The run record")."""

    # a record written by a newer orch still loads: unknown fields are dropped, not fatal
    model_config = ConfigDict(extra="ignore")

    schema_version: int = SCHEMA_VERSION
    complete: bool | None = None        # the engine's proof that generation finished
    errors: list[str] = Field(default_factory=list)   # parse problems, worth showing
    # generation
    tokens: int | None = None           # generated tokens as the engine counts them
    decode_tps: float | None = None     # the engine's own decode tok/s
    s_per_token: float | None = None    # the engine's own decode s/token (Σ wall / n)
    prompt_tokens: int | None = None
    prefill_tps: float | None = None
    prefill_s: float | None = None
    load_s: float | None = None         # model load
    ttft_s: float | None = None         # load_s + prefill_s, else the TTFT the engine printed
    # decode time split, seconds per generated token
    compute_s_per_token: float | None = None
    io_s_per_token: float | None = None      # busy time of the read lanes (may exceed wall)
    stall_s_per_token: float | None = None   # wall time lost waiting for reads
    mgmt_s_per_token: float | None = None    # expert-cache management
    cpu_s_per_token: float | None = None     # summed over threads
    majflt_per_token: float | None = None
    # expert streaming and its cache
    streaming: bool | None = None       # weights streamed from flash (else plain mmap)
    read_mib: float | None = None       # total flash reads of the generation
    read_mib_per_token: float | None = None   # as the engine printed it (moe-stream line)
    cache_hit_pct: float | None = None  # as the engine gives it: -1 = no cache
    cache_budget_mib: float | None = None
    cache_resident_mib: float | None = None
    cache_resizes: int | None = None
    spec_read_mib: float | None = None  # speculative expert prefetch
    spec_experts: int | None = None
    spec_useful: int | None = None
    spec_recall_pct: float | None = None  # router prediction recall; -1 = no spec gate
    spec_auto_off: bool | None = None
    # identity and output
    engine_build: str | None = None     # e.g. llama.cpp "3cb7ffb1a (10453)"
    settings: dict[str, Any] = Field(default_factory=dict)   # the engine's resolved settings
    text: str | None = None             # generated text, echoed prompt removed
    stderr_tail: list[str] = Field(default_factory=list)
    pressure: Pressure | None = None    # from a `.metrics` sidecar (imported runs)
    # orch's own facts about the run (not the engine's)
    validity: dict[str, Any] | None = None      # load, throttling (run/validity.py: stored())
    energy: dict[str, Any] | None = None        # joules over decode (stats/energy.py: summarise)
    route_trace: dict[str, Any] | None = None   # a stored trace's preamble and layer sizes
    entry_state: EntryState | None = None       # an imported run's recorded start state
    extra: dict[str, Any] = Field(default_factory=dict)      # engine-specific, free form
    # a session run's turns in order (docs/sessions.md); empty for a one-shot run
    turns: list[Turn] = Field(default_factory=list)

    def stored(self) -> dict[str, Any]:
        """The record as plain JSON values for `run.summary` (NaN and inf become null)."""
        # model_dump first: a model's own serializer keeps NaN even with inf_nan_mode
        return to_jsonable_python(self.model_dump(), inf_nan_mode="null", fallback=str)


def load_record(stored: Mapping[str, Any] | None) -> RunRecord:
    """A stored `run.summary` (version 1, a version-0 dict, or None) as a RunRecord."""
    if not stored:
        return RunRecord()
    if "schema_version" in stored:
        if (stored.get("schema_version") or 0) < 2:
            return _with_later_fields(RunRecord.model_validate(v1_as_v2(stored)))
        return _with_later_fields(RunRecord.model_validate(stored))
    return _from_v0(stored)


# typed after records were first stored: a stored record without them has them from the
# trailer and summary lines it kept in `extra` (the same reading as a new record's)
_LATER_FIELDS = ("s_per_token", "read_mib_per_token")


def _with_later_fields(record: RunRecord) -> RunRecord:
    if all(getattr(record, f) is not None for f in _LATER_FIELDS):
        return record
    trailer, lines = record.extra.get("trailer"), record.extra.get("lines")
    if not isinstance(trailer, Mapping) and not isinstance(lines, Mapping):
        return record
    found = trailer_fields(trailer if isinstance(trailer, Mapping) else None,
                           lines if isinstance(lines, Mapping) else None)
    for field in _LATER_FIELDS:
        if getattr(record, field) is None and found.get(field) is not None:
            setattr(record, field, found[field])
    return record


# ---- the `# summary` trailer vocabulary (docs/formats.md §2, §3) -----------------------------

_NUMBER_KEYS = {
    "tok/s": "decode_tps", "s/tok": "s_per_token", "prefill_tps": "prefill_tps", "prefill_s": "prefill_s",
    "load_s": "load_s", "read_MiB": "read_mib", "compute_s/tok": "compute_s_per_token",
    "io_s/tok": "io_s_per_token", "stall_s/tok": "stall_s_per_token",
    "mgmt_s/tok": "mgmt_s_per_token", "cpu_s/tok": "cpu_s_per_token",
    "majflt/tok": "majflt_per_token", "cache_hit_pct": "cache_hit_pct",
    "cache_budget_MiB": "cache_budget_mib", "cache_resident_MiB": "cache_resident_mib",
    "spec_read_MiB": "spec_read_mib", "spec_recall_pct": "spec_recall_pct",
}
_COUNT_KEYS = {"tokens": "tokens", "n_prompt": "prompt_tokens", "cache_resizes": "cache_resizes",
               "spec_experts": "spec_experts", "spec_useful": "spec_useful"}
# Where the stdout summary lines print a trailer value, for runs whose trailer is missing
# (killed) or older than the key (the 2026-07-12 trailers have no spec_* keys; the lines do):
# line kind -> ((record field, line field), ...)
_FROM_LINES: dict[str, tuple[tuple[str, str], ...]] = {
    "generation": (("tokens", "tokens"), ("decode_tps", "tok_per_s"),
                   ("s_per_token", "s_per_token")),
    "prefill": (("prompt_tokens", "tokens"), ("prefill_tps", "tok_per_s"), ("load_s", "load_s"),
                ("prefill_s", "s")),
    "moe_stream": (("read_mib", "read_mib"), ("read_mib_per_token", "mib_per_token"),
                   ("compute_s_per_token", "compute_s_per_token"),
                   ("mgmt_s_per_token", "mgmt_s_per_token"), ("io_s_per_token", "io_s_per_token")),
    "moe_overlap": (("stall_s_per_token", "stall_s_per_token"),),
    "moe_cache": (("cache_hit_pct", "hit_pct"), ("cache_budget_mib", "budget_mib"),
                  ("cache_resident_mib", "resident_mib"), ("cache_resizes", "resizes")),
    "moe_prefetch": (("spec_read_mib", "spec_mib"), ("spec_experts", "experts"),
                     ("spec_useful", "useful")),
    "moe_spec_gate": (("spec_recall_pct", "recall_pct"), ("spec_auto_off", "auto_disabled")),
    "compute": (("cpu_s_per_token", "cpu_s_per_token"), ("majflt_per_token", "majflt_per_token")),
}
_COUNT_FIELDS = set(_COUNT_KEYS.values())


def trailer_fields(trailer: Mapping[str, Any] | None, lines: Mapping[str, Any] | None = None,
                   settings: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Typed record fields from a `# summary` trailer, filled from the stdout summary lines
    (parse_summary_lines' output) where the trailer lacks a key; the trailer wins where both
    have it (it prints more digits). Also `streaming` and `ttft_s`, which need both."""
    trailer, lines, settings = trailer or {}, lines or {}, settings or {}
    out: dict[str, Any] = {}
    for kind, pairs in _FROM_LINES.items():
        section = lines.get(kind)
        if section:
            for field, key in pairs:
                out[field] = section.get(key)
    for key, field in _NUMBER_KEYS.items():
        if key in trailer:
            out[field] = trailer[key]
    for key, field in _COUNT_KEYS.items():
        if key in trailer:
            out[field] = trailer[key]
    if "spec_auto_off" in trailer:
        out["spec_auto_off"] = trailer["spec_auto_off"]
    for field, value in out.items():
        if field == "spec_auto_off":
            number = _number(value)
            out[field] = None if number is None else number > 0
        else:
            out[field] = _count(value) if field in _COUNT_FIELDS else _number(value)
    printed_ttft = _number((lines.get("prefill") or {}).get("ttft_s"))
    out["ttft_s"] = ttft(out.get("load_s"), out.get("prefill_s"), printed_ttft)
    out["streaming"] = _streaming(settings.get("moe_stream"), "moe_stream" in lines,
                                  trailer, out.get("read_mib"))
    return out


def ttft(load_s: float | None, prefill_s: float | None,
         printed: float | None = None) -> float | None:
    """Time to first token as the published tables define it: load_s + prefill_s."""
    if load_s is not None and prefill_s is not None:
        return load_s + prefill_s
    return printed


def _streaming(setting: Any, stream_line: bool, trailer: Mapping[str, Any],
               read_mib: float | None) -> bool | None:
    """Whether expert weights streamed from flash: the resolved setting, else a moe-stream
    line, else whether the trailer says anything was read. None: the record cannot tell (the
    statistics then look at the token rows' read_bytes)."""
    value = _number(setting)
    if value is not None:
        return value != 0
    if stream_line:
        return True
    if trailer:
        return (read_mib or 0) > 0 or (_number(trailer.get("io_s")) or 0) > 0
    return None


def _from_v0(summary: Mapping[str, Any]) -> RunRecord:
    """A version-0 summary dict (or a bare trailer dict) as a RunRecord."""
    if not ({"trailer", "lines", "settings"} & summary.keys()):
        return RunRecord(complete=True, extra={"trailer": dict(summary)},
                         **trailer_fields(summary))
    trailer = summary.get("trailer") or {}
    lines = summary.get("lines") or {}
    settings = summary.get("settings") or {}
    complete = summary.get("complete")
    sidecar = summary.get("sidecar")
    known = {"trailer", "lines", "settings", "complete", "text", "stderr_tail", "errors",
             "engine_build", "sidecar"}
    extra = {k: v for k, v in summary.items() if k not in known}
    extra.update(trailer=trailer or None, lines=lines)
    if sidecar:
        extra["sidecar"] = sidecar
    return RunRecord(
        complete=complete if complete is not None else bool(trailer),
        errors=list(summary.get("errors") or []), settings=dict(settings),
        text=summary.get("text"), stderr_tail=list(summary.get("stderr_tail") or []),
        engine_build=summary.get("engine_build"),
        pressure=Pressure.from_sidecar(sidecar) if sidecar else None,
        extra=extra, **trailer_fields(trailer, lines, settings))


def _number(value: Any) -> float | None:
    """A finite number as float; None for anything else (a missing or garbled value)."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)) and math.isfinite(value):
        return float(value)
    return None


def _count(value: Any) -> int | None:
    number = _number(value)
    return int(number) if number is not None and number == int(number) else None


def _div(value: Any, scale: float) -> float | None:
    number = _number(value)
    return None if number is None else number / scale
