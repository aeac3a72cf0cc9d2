"""Impossible values in a bmoe per-token CSV row (docs/formats.md §1), named with their column.

A negative time or byte count, a cache hit rate outside 0..100 (other than the -1 "no cache"
sentinel) or a step that does not increase cannot come from a working engine: the file is
corrupt, was edited, or the writer has a bug. Statistics over such rows would be wrong without
a sign (tok/s is n / Σ wall), so the parser drops the row and records the problem with its line
number, and `orch import` refuses the whole file (ingest/checks.py).
Values that are allowed although they look odd: wall_ms = 0 (speculative decoding puts a
group's whole cost on its first row), cache_hit_pct = -1 and dense_resident_frac = -1
(sentinels), io_ms > wall_ms (overlap sums the read lanes' busy time).
"""
from __future__ import annotations

import math
import operator
from typing import Any

from orchestrator.db.storable import json_problems, named_int_range
from orchestrator.engines.base import TokenRow

# token fields that are durations, byte or fault counts: never negative
_NON_NEGATIVE = ("wall_ms", "io_ms", "compute_ms", "stall_ms", "mgmt_ms", "read_bytes",
                 "majflt", "cpu_ms")
# per-token columns of the 22-column CSV (kept in TokenRow.extra) that are sizes or counts
_EXTRA_NON_NEGATIVE = ("majflt_mib", "cache_budget_mib", "rss_mib", "rss_anon_mib",
                       "rss_file_mib", "swap_mib", "mem_available_mib", "mem_free_mib",
                       "swap_free_mib", "turn")
NO_CACHE = -1.0          # cache_hit_pct sentinel: no cache / no lookups
# What the store's columns hold on every backend (db/storable.py, from db/schema.py's types):
# token.step an Integer (32-bit on PostgreSQL), read_bytes a BigInteger, an integer in the JSON
# `extra` a 64-bit one; every float column and JSON value must be finite (JSON has no Inf or
# NaN). A value outside is unstorable: the row is impossible too.
STEP_MAX = named_int_range("token", "step")[1]               # type: ignore[index]
READ_BYTES_MAX = named_int_range("token", "read_bytes")[1]   # type: ignore[index]
NOT_MEASURED = -1.0      # dense_resident_frac sentinel


def _unstorable_extra(extra: dict[str, Any]) -> str | None:
    """An `extra` value JSON or the store cannot hold (db/storable.py): a float that is not
    finite, an integer beyond 64 bits."""
    found = json_problems(extra)[1]
    if not found:
        return None
    name, value, why = found[0]
    return f"{name}={value} is {why}"


def _bad_number(value: Any) -> bool:
    """A number that is negative or not finite (NaN fails every comparison)."""
    return not (value >= 0 and math.isfinite(value))


_VALUES = operator.attrgetter(*_NON_NEGATIVE)
_INF = math.inf


def row_problem(row: TokenRow, last_step: int | None, signed: bool = True) -> str | None:
    """Why this row is impossible, or None. `last_step`: the previous row's step in the same
    generation turn (None at the start of a turn). `signed=False`: the row's text holds no
    '-', no letter of nan/inf, no exponent and no field over 18 characters (the parser's
    fast path looks), so no value can be negative, non-finite or beyond 64 bits and only the upper
    bounds and the step order are left to check: this runs for every streamed row."""
    if signed:
        for name, value in zip(_NON_NEGATIVE, _VALUES(row)):
            if value is not None and not 0 <= value < _INF:
                return f"{name}={value} is negative or not a number"
        if row.read_bytes is not None and row.read_bytes > READ_BYTES_MAX:
            return f"read_bytes={row.read_bytes} is beyond what a 64-bit integer holds"
    hit = row.cache_hit_pct
    if hit is not None and hit != NO_CACHE and not 0.0 <= hit <= 100.0:
        return f"cache_hit_pct={hit} is outside 0..100 (and not the -1 'no cache' sentinel)"
    if not 1 <= row.step <= STEP_MAX:
        if row.step < 1:
            return f"step={row.step} is not a positive token number"
        return f"step={row.step} is beyond what the step column holds ({STEP_MAX})"
    if last_step is not None and row.step <= last_step:
        return f"step={row.step} does not increase (previous row: step {last_step})"
    extra = row.extra
    if extra:
        for name in _EXTRA_NON_NEGATIVE if signed else ():
            value = extra.get(name)
            if value is not None and _bad_number(value):
                return f"{name}={value} is negative or not a number"
        if signed:
            problem = _unstorable_extra(extra)
            if problem is not None:
                return problem
        frac = extra.get("dense_resident_frac")
        if frac is not None and frac != NOT_MEASURED and not 0.0 <= frac <= 1.0:
            return f"dense_resident_frac={frac} is outside 0..1 (and not the -1 sentinel)"
    return None
