"""The store's bulk insert: executemany straight on the DBAPI cursor, for the streaming write
path (db/writes.py) and imports. Its own module so db/store.py stays about connections."""
from __future__ import annotations

import json
from itertools import repeat
from operator import is_not, itemgetter
from typing import Any, Sequence

from sqlalchemy import JSON, Connection, Table

_COMPILED: dict[tuple[str, str, tuple[str, ...]], tuple[str, tuple[str, ...] | None]] = {}


def bulk_insert(conn: Connection, table: Table, rows: Sequence[Any],
                keys: Sequence[str] | None = None) -> None:
    """executemany straight on the DBAPI cursor with a statement compiled once per shape.

    SQLAlchemy's Core executemany costs ~10 us per row in parameter processing, which made
    ingest 20x slower than sqlite3 itself; token rows are plain numbers, so the only
    processing they need is JSON-encoding the `extra` column, done here. Rows are dicts, or
    tuples in the order of `keys`.
    """
    if not rows:
        return
    if keys is None:
        keys = tuple(rows[0])
        rows = [tuple(r[k] for k in keys) for r in rows]
    keys = tuple(keys)
    cache_key = (conn.dialect.name, table.name, keys)
    if cache_key not in _COMPILED:
        compiled = table.insert().compile(dialect=conn.dialect, column_keys=list(keys))
        positions = compiled.positiontup if compiled.positional else None
        order = tuple(positions) if positions is not None else None
        _COMPILED[cache_key] = (str(compiled), order)
    sql, order = _COMPILED[cache_key]
    json_at = [i for i, k in enumerate(keys) if isinstance(table.c[k].type, JSON)]
    # any JSON value to encode: a scan in C (map/is_not), not a generator per row (a 2M-row
    # import paid 0.26 s for the generator)
    if json_at and any(any(map(is_not, map(itemgetter(i), rows), repeat(None)))
                       for i in json_at):
        dumps = json.dumps
        rows = [tuple(dumps(v) if i in json_at and v is not None else v for i, v in enumerate(r))
                for r in rows]
    if order is None:  # a dialect with named parameters (PostgreSQL's drivers)
        params: list[Any] = [dict(zip(keys, r)) for r in rows]
    elif tuple(order) == keys:
        params = list(rows)
    else:
        at = [keys.index(k) for k in order]
        params = [tuple(r[i] for i in at) for r in rows]
    conn.exec_driver_sql(sql, params)
