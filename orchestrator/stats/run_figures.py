"""One run's statistics for `orch show`, from the figures kept with the run, in plain Python.

`orch show N` is a fresh process, and a fresh process pays for every import: numpy (~45 ms),
pydantic and record.py's models (~95 ms) were over half of its start-up (bench/startup, goal
<= 1.5x a bare SQLAlchemy read of the run). So this module imports neither:

- `read_fields` reads a stored `run.summary` of the current format (record.py
  SCHEMA_VERSION) into the values `load_record` would give its fields, without pydantic. It
  accepts only what `RunRecord.stored()` writes (a float field holds a float, an int or
  None; an int field an int; ...): anything else, an older format (whose upgrades live in
  record.py alone) or a newer one, gives None, and the caller reads the RunRecord instead.
  So a stored value pydantic would coerce or refuse is read by pydantic, as before.
- `one_run_stats` is statistics.py's vectorised `_scalars` and `runs_table` written for one
  run: the same IEEE operations on the same values in the same order, so every figure is
  the same to the bit (tests/test_big_runs.py, tests/test_startup.py).

The two must change with record.py's RunRecord and statistics.py's `_scalars`;
tests/test_startup.py compares _KINDS with RunRecord's fields and every figure with
statistics.py's on every fixture record.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from orchestrator.stats.energy import ENERGY_FIELDS, energy_note
from orchestrator.stats.values import plain

if TYPE_CHECKING:
    from orchestrator.record import RunRecord

# record.py's SCHEMA_VERSION, KIB_PER_GIB and PRESSURE_FIELDS (importing record.py imports
# pydantic; tests/test_startup.py checks they are the same)
SCHEMA_VERSION = 2
KIB_PER_GIB = 1048576
PRESSURE_FIELDS = ("peak_rss_gib", "mem_floor_gib", "cpu_temp_start_c", "cpu_temp_max_c",
                   "batt_temp_max_c")

STAT_COLUMNS: tuple[str, ...] = (
    "n", "mean", "min", "max", "median", "p5", "p95", "prefill_tps", "ttft_s",
    "cache_hit_pct", "read_mib_per_token", "stall_ms_per_token", "compute_s_per_token",
    "io_s_per_token", "majflt_per_token", "latency_p50_ms", "latency_p90_ms", "latency_p99_ms",
    "steady_from_token", "steady_mean", "streaming", "complete", "cache_budget_mib",
    "cache_resident_mib", "cache_resizes", "spec_read_mib", "spec_read_mib_per_token",
    "spec_experts", "spec_useful", "spec_useful_pct", "spec_recall_pct", "spec_auto_off",
    *PRESSURE_FIELDS,
    *ENERGY_FIELDS, "energy_note",
)

# what statistics._token_stats gives a run (the internal sums and the last hit included): all
# runs_table reads of its token rows at trim 0
TOKEN_FIGURES = ("n", "mean", "min", "max", "median", "p5", "p95", "latency_p50_ms",
                 "latency_p90_ms", "latency_p99_ms", "steady_from_token", "steady_mean",
                 "stall_ms_per_token", "_majflt", "_read_bytes", "_last_hit")

# ---- the record's fields without pydantic ----------------------------------------------------

# what each RunRecord field holds, as stored() writes it; "pressure" and "entry_state" are the
# nested models (Pressure, EntryState)
FLOAT, INT, BOOL, STR, STRS, DICT, PRESSURE, ENTRY = (
    "float", "int", "bool", "str", "list[str]", "dict", "Pressure", "EntryState")
_KINDS: dict[str, str] = {
    "schema_version": INT, "complete": BOOL, "errors": STRS, "tokens": INT,
    "decode_tps": FLOAT, "prompt_tokens": INT, "prefill_tps": FLOAT, "prefill_s": FLOAT,
    "load_s": FLOAT, "ttft_s": FLOAT, "compute_s_per_token": FLOAT, "io_s_per_token": FLOAT,
    "stall_s_per_token": FLOAT, "mgmt_s_per_token": FLOAT, "cpu_s_per_token": FLOAT,
    "majflt_per_token": FLOAT, "streaming": BOOL, "read_mib": FLOAT, "cache_hit_pct": FLOAT,
    "cache_budget_mib": FLOAT, "cache_resident_mib": FLOAT, "cache_resizes": INT,
    "spec_read_mib": FLOAT, "spec_experts": INT, "spec_useful": INT, "spec_recall_pct": FLOAT,
    "spec_auto_off": BOOL, "engine_build": STR, "settings": DICT, "text": STR,
    "stderr_tail": STRS, "pressure": PRESSURE, "validity": DICT, "energy": DICT,
    "route_trace": DICT, "entry_state": ENTRY, "token_stats": DICT, "extra": DICT,
}
# fields whose default is not None (RunRecord's default_factory): a fresh empty value each
_EMPTY = {"errors": list, "settings": dict, "stderr_tail": list, "extra": dict}
_EXACT_FLOAT = 2 ** 53     # an int above this may round; pydantic's conversion is not ours then


class _Unusual(Exception):
    """A stored value outside what stored() writes: read it with pydantic instead."""


def _value(kind: str, value: Any) -> Any:
    """A stored value as its RunRecord field holds it; _Unusual where pydantic would have to
    coerce (a string for a number, 1 for True, ...) or refuse it."""
    if kind == FLOAT:
        if isinstance(value, float):
            return value
        if type(value) is int and abs(value) <= _EXACT_FLOAT:
            return float(value)
    elif kind == INT:
        if type(value) is int:
            return value
    elif kind == BOOL:
        if isinstance(value, bool):
            return value
    elif kind == STR:
        if isinstance(value, str):
            return value
    elif kind == STRS:
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return list(value)
    elif kind == DICT:
        if isinstance(value, dict) and all(isinstance(k, str) for k in value):
            return dict(value)
    elif kind == PRESSURE:
        if isinstance(value, dict):   # extra keys ignored, missing ones None, as the model
            return {k: _optional(FLOAT, value.get(k)) for k in PRESSURE_FIELDS}
    elif kind == ENTRY:
        if isinstance(value, dict):
            return {k: _optional(DICT, value.get(k)) for k in ("driver", "state")}
    raise _Unusual


def _optional(kind: str, value: Any) -> Any:
    return None if value is None else _value(kind, value)


def read_fields(stored: Any) -> dict[str, Any] | None:
    """A stored `run.summary` as `fields_of(load_record(stored))` gives it, without
    pydantic; None unless it is a record of the current format holding only what
    RunRecord.stored() writes (the caller then reads it through load_record)."""
    if not isinstance(stored, dict) or type(stored.get("schema_version")) is not int \
            or stored["schema_version"] != SCHEMA_VERSION:
        return None
    out: dict[str, Any] = {}
    try:
        for name, kind in _KINDS.items():
            value = stored.get(name)
            if value is None and name in _EMPTY:
                if name in stored:      # an explicit null where the model wants a list/dict
                    return None
                out[name] = _EMPTY[name]()
            else:
                out[name] = _optional(kind, value)
    except _Unusual:
        return None
    return out


def fields_of(record: RunRecord) -> dict[str, Any]:
    """A RunRecord's fields as read_fields gives them: the nested models as plain dicts."""
    out = {name: getattr(record, name) for name in _KINDS}
    if record.pressure is not None:
        out["pressure"] = {k: getattr(record.pressure, k) for k in PRESSURE_FIELDS}
    if record.entry_state is not None:
        out["entry_state"] = {"driver": record.entry_state.driver,
                              "state": record.entry_state.state}
    return out


# ---- one run's row of runs_table -----------------------------------------------------------

NAN = math.nan


def _num(value: Any) -> float:
    """numpy's object-to-float cast of one value: None -> NaN."""
    return NAN if value is None else float(value)


def one_run_stats(figures: Mapping[str, Any], fields: Mapping[str, Any],
                  pressure: Mapping[str, Any] | None) -> dict[str, Any]:
    """runs_table's row of one run at trim 0 with linear quantiles, as Runs.stats_dicts gives
    it (plain values, None for missing), from the run's token_figures, its record's fields
    (read_fields / fields_of) and its samples' pressure (None: the run has no samples). Each
    line is statistics._scalars' for an array of one (the figures are the same to the bit)."""
    tok = {key: _num(figures.get(key)) for key in TOKEN_FIGURES}
    n = int(figures.get("n") or 0)
    f = fields
    if not pressure:
        pressure = f["pressure"]
    n_all = NAN if float(n) == 0 else float(n)   # the record's totals are over every token
    hit = _num(f["cache_hit_pct"])
    hit = tok["_last_hit"] if math.isnan(hit) else hit
    rb = tok["_read_bytes"]
    read = _num(f["read_mib"])
    read = rb / 1048576 if math.isnan(read) else read
    # streaming: what the record says, else whether the rows read anything (see _scalars)
    streaming = f["streaming"]
    if streaming is None and not math.isnan(rb):
        streaming = rb > 0
    mmap = streaming is False
    stall = tok["stall_ms_per_token"]
    stall = _num(f["stall_s_per_token"]) * 1000.0 if math.isnan(stall) else stall
    majflt = _num(f["majflt_per_token"])
    majflt = tok["_majflt"] if math.isnan(majflt) else majflt
    experts, useful = _num(f["spec_experts"]), _num(f["spec_useful"])
    recall = _num(f["spec_recall_pct"])
    recall = NAN if recall < 0 else recall             # -1.0: no spec gate
    auto_off = _num(f["spec_auto_off"])
    spec_mib = _num(f["spec_read_mib"])
    out: dict[str, Any] = dict(tok)
    out.update({
        "prefill_tps": _num(f["prefill_tps"]), "ttft_s": _num(f["ttft_s"]),
        "cache_hit_pct": NAN if hit < 0 else hit,
        "read_mib_per_token": NAN if mmap else read / n_all,
        "stall_ms_per_token": NAN if mmap else stall,
        "majflt_per_token": majflt,
        "compute_s_per_token": _num(f["compute_s_per_token"]) if streaming is True else NAN,
        "io_s_per_token": _num(f["io_s_per_token"]) if streaming is True else NAN,
        "streaming": streaming, "complete": f["complete"],
        "cache_budget_mib": _num(f["cache_budget_mib"]),
        "cache_resident_mib": _num(f["cache_resident_mib"]),
        "cache_resizes": _num(f["cache_resizes"]),
        "spec_read_mib": spec_mib, "spec_read_mib_per_token": spec_mib / n_all,
        "spec_experts": experts, "spec_useful": useful,
        "spec_useful_pct": 100.0 * useful / experts if experts > 0 else NAN,
        "spec_recall_pct": recall,
        # np.nan_to_num: a missing flag is 0, so False once the gate's recall is known
        "spec_auto_off": None if math.isnan(recall) else
        (0.0 if math.isnan(auto_off) else auto_off) > 0,
    })
    for key in PRESSURE_FIELDS:
        out[key] = _num((pressure or {}).get(key))
    energy = f["energy"] or {}
    for key in ENERGY_FIELDS:
        out[key] = _num(energy.get(key))
    out["energy_note"] = energy_note(energy)
    out["n"] = n
    if not n:   # engines without per-token rows: the engine's own tok/s
        out["mean"] = _num(f["decode_tps"])
    return {key: plain(out[key]) for key in STAT_COLUMNS}
