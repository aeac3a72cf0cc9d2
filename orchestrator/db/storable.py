"""What each column of the store can hold on every supported backend, the narrowest winning,
derived from db/schema.py's column types so that it cannot drift from them.

SQLite holds any integer up to 64 bits in any integer column; PostgreSQL holds 16 bits in a
SmallInteger, 32 in an Integer, 64 in a BigInteger. A Float must be finite to be a number a
reader can use (and a JSON document holds no Inf or NaN); an integer inside a JSON value must fit
64 bits (SQLite's JSON functions, most readers). A device (or an imported file) can send any of
these: a thermal zone reading 2^70, a clock that jumped past 2^31 ms. Such a value is dropped
(NULL; the row skipped when its column cannot be NULL) and named in the run's warnings
(`DROPPED`), instead of the driver raising mid-run (docs/reliability.md).
"""
from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Column,
    Connection,
    Float,
    Integer,
    SmallInteger,
    Table,
    select,
)

from orchestrator.db import schema
from orchestrator.errors import StoreError

log = logging.getLogger(__name__)

INT64_MIN, INT64_MAX = -(2 ** 63), 2 ** 63 - 1
# a warning naming a dropped value starts with this (a run keeps them: storable_values)
DROPPED = "value dropped, the store cannot hold it: "


def int_range(column: Column[Any]) -> tuple[int, int] | None:
    """The integers `column` holds on every backend, (lowest, highest); None for a column
    that is not an integer one."""
    kind = column.type
    if isinstance(kind, BigInteger):
        bits = 64
    elif isinstance(kind, SmallInteger):
        bits = 16
    elif isinstance(kind, Integer):
        bits = 32
    else:
        return None
    return -(2 ** (bits - 1)), 2 ** (bits - 1) - 1


def named_int_range(table: str, column: str) -> tuple[int, int] | None:
    """`int_range` of TABLE.COLUMN, for modules outside db/ (they never read the schema)."""
    return int_range(schema.metadata.tables[table].c[column])


def _shown(value: Any) -> str:
    """The value as a warning names it (a 10,000-digit number cut short)."""
    text = str(value)
    return text if len(text) <= 40 else f"{text[:20]}...({len(text)} characters)"


def _number_problem(value: Any, bounds: tuple[int, int] | None) -> str | None:
    """Why an integer column (`bounds`) or a float one (None) cannot hold `value`, or None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return "not a finite number"
    if bounds is None:
        if isinstance(value, int) and not -1.7e308 < value < 1.7e308:
            return "beyond what a floating-point number holds"
        return None
    low, high = bounds
    if not low <= value <= high:
        return f"beyond what a {high.bit_length() + 1}-bit integer holds"
    return None


def json_problems(value: Any, path: str = "") -> tuple[Any, list[tuple[str, Any, str]]]:
    """`value` with every number JSON or the store cannot hold replaced by None, and those
    numbers as (path, value, why)."""
    if isinstance(value, dict):
        found: list[tuple[str, Any, str]] = []
        out = {}
        for key, item in value.items():
            out[key], more = json_problems(item, f"{path}.{key}" if path else str(key))
            found += more
        return (out, found) if found else (value, [])
    if isinstance(value, (list, tuple)):
        found = []
        items = []
        for i, item in enumerate(value):
            kept, more = json_problems(item, f"{path}[{i}]")
            items.append(kept)
            found += more
        return (items, found) if found else (value, [])
    why = _number_problem(value, (INT64_MIN, INT64_MAX))
    return (None, [(path, value, why)]) if why else (value, [])


def value_problems(column: Column[Any], value: Any) -> tuple[Any, list[str]]:
    """`value` as `column` can hold it (None when it cannot; in a JSON value only the numbers
    that cannot are None), and the warnings naming what was dropped."""
    if value is None:
        return None, []
    where = f"{column.table.name}.{column.name}"
    if isinstance(column.type, JSON):
        kept, found = json_problems(value)
        return kept, [f"{DROPPED}{where}: {path}={_shown(v)} ({why})" for path, v, why in found]
    bounds = int_range(column)
    if bounds is None and not isinstance(column.type, Float):
        return value, []
    why = _number_problem(value, bounds)
    if why is None:
        return value, []
    return None, [f"{DROPPED}{where}={_shown(value)} ({why})"]


def storable_row(table: Table, row: dict[str, Any],
                 required: Iterable[str] = ()) -> tuple[dict[str, Any] | None, list[str]]:
    """`row` (column name -> value) as `table` can hold it on every backend, and the warnings
    naming what was dropped. None instead of the row when a value that cannot be held is in a
    column that cannot be NULL (a key, NOT NULL) or in `required` (the row means nothing
    without it): the row is skipped."""
    warnings: list[str] = []
    out = row
    need = set(required)
    for name, value in row.items():
        column = table.c.get(name)
        if column is None or value is None:
            continue
        kept, found = value_problems(column, value)
        if not found:
            continue
        warnings += found
        if kept is None and (name in need or column.primary_key or not column.nullable):
            return None, warnings
        if out is row:
            out = dict(row)
        out[name] = kept
    return out, warnings


def warning_key(warning: str) -> str:
    """What a DROPPED warning is about (`sample.cpu_temp_mC`, `sample.extra: tz0_mC`): a run's
    warnings name each once, with its first value."""
    return warning[len(DROPPED):].split("=", 1)[0]


def merged(have: Iterable[str], new: Iterable[str]) -> list[str]:
    """`have` and those of the DROPPED warnings `new` whose subject `have` does not name yet."""
    out = list(have)
    seen = {warning_key(w) for w in out if w.startswith(DROPPED)}
    for warning in new:
        key = warning_key(warning)
        if key not in seen:
            seen.add(key)
            out.append(warning)
    return out


def storable_values(conn: Connection, table: Table, row_id: int | None,
                    values: dict[str, Any]) -> dict[str, Any]:
    """`values` of one row's insert (row_id None) or update as every backend can hold them: a
    number that cannot be held is dropped. A run names what was dropped in its warnings, once
    each, and keeps those warnings when a later write replaces its warnings (the runner's list
    at the run's end); another table's drop is logged. A value a NOT NULL column cannot hold
    is a StoreError: the write cannot be made."""
    kept, dropped = storable_row(table, values)
    if kept is None:
        raise StoreError("; ".join(dropped))
    if table is not schema.run:
        for warning in dropped:
            log.warning(warning)
        return kept
    found = None
    if row_id is not None and (dropped or "warnings" in kept):
        found = conn.execute(select(table.c.warnings).where(table.c.id == row_id)).first()
    before = [w for w in (found.warnings or []) if isinstance(w, str)] if found else []
    stored = [w for w in before if w.startswith(DROPPED)]
    if not dropped and not stored:
        return kept
    have = (kept["warnings"] or []) if "warnings" in kept else before
    return {**kept, "warnings": merged(have, stored + dropped) or None}


def name_on_run(conn: Connection, run_id: int, dropped: list[str]) -> None:
    """Add the DROPPED warnings a run does not name yet to its warnings."""
    run = schema.run
    found = conn.execute(select(run.c.warnings).where(run.c.id == run_id)).first()
    have = [w for w in (found.warnings or []) if isinstance(w, str)] if found else []
    warnings = merged(have, dropped)
    if warnings != have:
        conn.execute(run.update().where(run.c.id == run_id).values(warnings=warnings))


def storable_samples(rows: Iterable[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """Sample rows as the store can hold them (a row whose time cannot be held is skipped:
    a reading at no known time means nothing), and the warnings naming what was dropped."""
    kept: list[dict[str, Any]] = []
    dropped: list[str] = []
    for row in rows:
        good, found = storable_row(schema.sample, row, required=("t_ms",))
        if good is not None:
            kept.append(good)
        dropped += found
    return kept, dropped


# the token row's value columns in TOKEN_KEYS' order after run_id and seq (db/writes.py)
_TOKEN_COLUMNS = tuple(schema.token.columns)[2:]
# an integer's bounds in each: its integer range, or what a float holds (a Float column)
_FLOAT_HOLDS = (-1.7e308, 1.7e308)
_TOKEN_BOUNDS = tuple(int_range(c) or (_FLOAT_HOLDS if isinstance(c.type, Float) else None)
                      for c in _TOKEN_COLUMNS)


def storable_token(values: tuple[Any, ...]) -> tuple[tuple[Any, ...] | None, list[str]]:
    """A token row's values (TOKEN_KEYS' order after run_id and seq) as the store can hold
    them, and the warnings naming what was dropped; None when its step cannot be held. A
    row of plain numbers in range (every row of a working engine) is checked in one pass
    and returned as it is: this runs for each token of the engines without a parser of
    their own checks (engines/bmoe_checks.py is bmoe's). Anything else (another type, a
    value out of range) takes the full check, storable_row."""
    for value, bounds in zip(values, _TOKEN_BOUNDS):
        kind = value.__class__
        if value is None or kind is str or kind is bool:
            continue
        if kind is float:
            if value - value == 0.0:      # finite (Inf - Inf and NaN are NaN)
                continue
        elif kind is int:
            if bounds is None or bounds[0] <= value <= bounds[1]:
                continue
        elif kind is dict or kind is list:
            if not json_problems(value)[1]:
                continue
        break
    else:
        return values, []
    row = dict(zip((c.name for c in _TOKEN_COLUMNS), values))
    kept, dropped = storable_row(schema.token, row, required=("step",))
    return (None if kept is None else tuple(kept.values())), dropped
