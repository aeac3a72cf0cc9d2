"""Store -> statistics: the statistics of stored runs, for every view (terminal, table, report).

Each run's record is read back from `run.summary` with `load_record` (any schema version); its
device pressure comes from the agent's samples when orch measured the run, else from the
record (the `.metrics` sidecar an imported run brought along: statistics.runs_table decides).
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd
from sqlalchemy import func, select

from orchestrator.config.yamlfile import ConfigError
from orchestrator.db import schema
from orchestrator.db.store import Store
from orchestrator.record import KIB_PER_GIB, load_record
from orchestrator.results import statistics
from orchestrator.results.values import DAGGER, plain


def runs_stats(store: Store, run_rows: Sequence[Any], quantile_method: str = "linear") -> pd.DataFrame:
    """statistics.runs_table for these runs, indexed by run id (every row present)."""
    ids = [r.id for r in run_rows]
    if not ids:
        return pd.DataFrame(columns=list(statistics.STAT_COLUMNS))
    tokens = store.frame("token", ids)
    records = {row.id: load_record(row.summary) for row in run_rows}
    stats = statistics.runs_table(tokens, records, pressure_by_run(store.frame("sample", ids)),
                                  quantile_method=quantile_method)
    return stats.reindex(ids)


def pressure_by_run(samples: pd.DataFrame) -> dict[int, dict[str, float | None]]:
    """Device pressure of every sampled run from its agent samples (t_ms, hwm_kb, rss_kb,
    mem_avail_kb, cpu_temp_mC, batt_temp_dC), in GiB and °C, in one groupby (per-run calls
    were half of a 1,000-run report's time).

    The agent omits unreadable keys, so missing values are NaN and skipped. Peak RSS is the max
    VmHWM (the kernel's own high-water mark, which catches peaks between samples); VmRSS only
    when no HWM was readable. "start" is the first sample in time with a reading.
    """
    if samples is None or not len(samples):
        return {}
    s = samples.sort_values(["run_id", "t_ms"], kind="stable")
    g = s.groupby("run_id")

    def agg(column: str, how: str, scale: float) -> pd.Series:
        if column not in s:
            return pd.Series(dtype=float)
        values = pd.to_numeric(s[column], errors="coerce")
        grouped = values.groupby(s["run_id"])
        out = {"max": grouped.max, "min": grouped.min, "first": grouped.first}[how]()
        return out / scale

    peak = agg("hwm_kb", "max", KIB_PER_GIB)
    peak = peak.combine_first(agg("rss_kb", "max", KIB_PER_GIB))
    frame = pd.DataFrame({
        "peak_rss_gib": peak,
        "mem_floor_gib": agg("mem_avail_kb", "min", KIB_PER_GIB),
        "cpu_temp_start_c": agg("cpu_temp_mC", "first", 1000),
        "cpu_temp_max_c": agg("cpu_temp_mC", "max", 1000),
        "batt_temp_max_c": agg("batt_temp_dC", "max", 10),
    }).reindex(list(g.groups))
    return {int(rid): {k: plain(v) for k, v in rec.items()}
            for rid, rec in frame.to_dict("index").items()}


def stats_dicts(store: Store, run_rows: Sequence[Any]) -> dict[int, dict[str, Any]]:
    """Per-run statistics as plain dicts (None for missing), keyed by run id."""
    stats = runs_stats(store, run_rows)
    return {rid: {k: plain(v) for k, v in rec.items()}
            for rid, rec in stats.to_dict("index").items()}


def resolve_session(store: Store, session: str | None, matrix: str | None) -> int:
    """A session id from `SESSION` (id or name) or `--matrix NAME` (its latest session)."""
    table = schema.session
    if session is not None:
        if session.isdigit():
            if store.session_row(int(session)) is None:
                raise ConfigError(f"no session {session} in {store.url}")
            return int(session)
        rows = store.fetch(select(table.c.id).where(table.c.name == session).order_by(table.c.id.desc()))
    elif matrix is not None:
        rows = store.fetch(select(table.c.id).where(table.c.matrix_name == matrix)
                           .order_by(table.c.id.desc()))
    else:
        rows = store.fetch(select(table.c.id).order_by(table.c.id.desc()).limit(1))
    if not rows:
        what = session or matrix or "any"
        raise ConfigError(f"no session {what!r} in {store.url}")
    return rows[0].id


def labelled(rows: Iterable[Any]) -> dict[int, str]:
    """Row labels: the config name (and repeat), with a dagger on runs that did not end ok."""
    out = {}
    for row in rows:
        label = row.config + (f" #{row.repeat_index + 1}" if row.repeat_index else "")
        out[row.id] = label if row.status == "ok" else f"{label} {DAGGER}"
    return out


# ---- sides of a comparison ---------------------------------------------------------------

@dataclass(frozen=True)
class Side:
    """One side of `orch compare`: the current runs of one session on one device."""

    label: str                    # the device name (-d) or "session N" (--session)
    device: str
    session: Any                  # the session row
    rows: list[Any]               # its runs on `device` (Store.runs rows), in run order


def select_sides(store: Store, sessions: Sequence[str] = (), devices: Sequence[str] = (),
                 matrix: str | None = None) -> list[Side]:
    """The sides to compare, reference first: every `--session` (id or name) in the order
    given, then every `--device`'s newest session of `matrix` (or its newest session of any
    matrix, imports included, without one). Every failure is a one-line ConfigError."""
    if matrix is not None and not devices:
        raise ConfigError("--matrix picks each --device's session: give --device too")
    sides = [session_side(store, s) for s in sessions]
    sides += [device_side(store, d, matrix) for d in devices]
    if len(sides) < 2:
        raise ConfigError("compare needs two or more sides: give --device or --session "
                          "at least twice in all")
    seen: dict[tuple[int, str], str] = {}
    for side in sides:
        key = (side.session.id, side.device)
        if key in seen:
            raise ConfigError(f"{seen[key]} and {side.label} are the same runs (session "
                              f"{side.session.id} on {side.device})")
        seen[key] = side.label
    return sides


def session_side(store: Store, session: str) -> Side:
    """`--session S`: its runs; a session that ran on several devices is refused, since its
    configs would mix devices."""
    sid = resolve_session(store, session, None)
    rows = store.runs(sid)
    if not rows:
        raise ConfigError(f"session {sid} has no runs")
    devices = list(dict.fromkeys(r.device for r in rows))
    if len(devices) > 1:
        raise ConfigError(f"session {sid} ran on {', '.join(devices)}: compare them with "
                          f"--device instead")
    return Side(f"session {sid}", devices[0], store.session_row(sid), list(rows))


def device_side(store: Store, device: str, matrix: str | None) -> Side:
    """`--device D`: D's runs in its newest session of `matrix`, or in its newest session."""
    run, dev, ses = schema.run, schema.device, schema.session
    # explicit left side and ON clauses: inferred joins over these three tables are ambiguous
    # to SQLAlchemy ("Can't determine which FROM clause to join from")
    stmt = (select(func.max(run.c.session_id)).select_from(run)
            .join(dev, run.c.device_id == dev.c.id).join(ses, run.c.session_id == ses.c.id)
            .where(dev.c.name == device, run.c.superseded.is_(False)))
    sid = store.fetch(stmt if matrix is None else stmt.where(ses.c.matrix_name == matrix))[0][0]
    if sid is None:
        if matrix is None or store.fetch(stmt)[0][0] is None:
            raise ConfigError(f"device {device} has no runs in {store.url}")
        raise ConfigError(f"device {device} never ran a matrix named {matrix!r}")
    rows = [r for r in store.runs(sid) if r.device == device]
    return Side(device, device, store.session_row(sid), rows)
