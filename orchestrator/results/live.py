"""What `orch serve` shows live (docs/serve.md): the runs recording now with their tokens so
far and tok/s, each device's newest temperature and free RAM, the newest failures with their
cause, and the recent sessions with their status counts, as plain JSON-ready dicts.

tok/s so far is stats/figures.py `rate` over the tokens stored so far and their summed decode
time, as `orch run`'s progress line shows it (run/progress.py rate_so_far; the division of the
figure `mean`, n / Σ decode s), read from one aggregate of the store rather than from every
token row, so a poll costs the same at token 10 and at token 100,000."""
from __future__ import annotations

import datetime as dt
from typing import Any

from orchestrator.db import live as live_db
from orchestrator.db.runs import Runs
from orchestrator.db.store import Store
from orchestrator.results.listings import run_detail
from orchestrator.stats.figures import rate

FAILURES = 20          # failures the lab page lists


def _iso(value: dt.datetime | None) -> str | None:
    if value is None:
        return None
    return (value if value.tzinfo else value.replace(tzinfo=dt.UTC)).isoformat()


def sample_dict(sample: Any, started: dt.datetime | None) -> dict[str, Any]:
    """A sample row's temperature (°C), free RAM (MiB) and when it was taken."""
    at = None
    if started is not None and sample.t_ms is not None:
        at = _iso(started + dt.timedelta(milliseconds=sample.t_ms))
    return {"temp_c": None if sample.cpu_temp_mC is None else sample.cpu_temp_mC / 1000,
            "battery_temp_c": None if sample.batt_temp_dC is None else sample.batt_temp_dC / 10,
            "mem_avail_mib": None if sample.mem_avail_kb is None else round(sample.mem_avail_kb / 1024, 1),
            "at": at}


def running(store: Store) -> list[dict[str, Any]]:
    """The runs recording now: run, session, device, cell, tokens stored so far, tok/s."""
    out = []
    rows = live_db.running_runs(store)
    progress = live_db.token_progress(store, [r.id for r in rows])
    for row in rows:
        tokens, wall_ms = progress.get(row.id, (0, 0.0))
        out.append({"run_id": row.id, "session_id": row.session_id, "device": row.device,
                    "matrix": row.matrix_name, "cell_key": row.cell_key, "model": row.model,
                    "config": row.config, "repeat": row.repeat_index, "engine": row.engine,
                    "started_at": _iso(row.started_at), "tokens": tokens,
                    "tok_s": rate(tokens, wall_ms) if tokens else None})
    return out


def device_samples(store: Store) -> dict[str, dict[str, Any]]:
    """Each device's newest agent sample (its newest run's): temperature, free RAM, when."""
    newest = live_db.newest_sampled_run_per_device(store)
    samples = live_db.latest_samples(store, newest.values())
    starts = {r.id: r.started_at for r in Runs(store).by_ids(samples)}
    return {name: {"run_id": run_id, **sample_dict(samples[run_id], starts.get(run_id))}
            for name, run_id in newest.items() if run_id in samples}


def failures(store: Store, limit: int = FAILURES) -> list[dict[str, Any]]:
    """The newest runs that did not end ok, with their status and cause."""
    return [{"run_id": r.id, "session_id": r.session_id, "device": r.device,
             "cell_key": r.cell_key, "status": r.status, "cause": r.cause, "rc": r.rc,
             "ended_at": _iso(r.ended_at)}
            for r in live_db.failed_runs(store, limit)]


def devices(store: Store) -> list[dict[str, Any]]:
    """Every device the store knows: name, kind, facts and when they were probed."""
    return [{"device": d.name, "kind": d.kind, "facts": d.facts or {},
             "facts_at": _iso(d.facts_at)} for d in live_db.devices(store)]


def sessions(store: Store, limit: int = 50) -> list[dict[str, Any]]:
    """The newest sessions with their current runs' count per status."""
    return [{"session_id": s.id, "name": s.name, "kind": s.kind, "matrix": s.matrix_name,
             "label": s.label, "started_at": _iso(s.started_at), "ended_at": _iso(s.ended_at),
             "status_counts": counts}
            for s, counts in live_db.recent_sessions(store, limit)]


def queues(store: Store, per_device: int = 20) -> dict[str, list[dict[str, Any]]]:
    """Each lab device's waiting cells, in the order it runs them (the first per_device)."""
    return {device: [{"cell_key": c.cell_key, "session_id": c.session_id, "state": c.state}
                     for c in cells]
            for device, cells in live_db.queued_cells(store, per_device).items()}


def store_mark(store: Store) -> tuple[Any, ...]:
    """Changes whenever a session or run is added or ends (db/live.py store_mark)."""
    return live_db.store_mark(store)


def run(store: Store, run_id: int) -> dict[str, Any]:
    """One run as `orch show` reads it (results/listings.py run_detail): its columns, figures,
    stderr tail for a run that did not end ok, tokens stored and newest sample."""
    detail = run_detail(store, run_id)
    row = detail.row
    fields = row.as_dict()
    for key in ("started_at", "ended_at", "session_started"):
        fields[key] = _iso(fields[key])
    samples = live_db.latest_samples(store, [run_id])
    return {"run": fields, "figures": detail.figures.stored(),
            "stderr_tail": detail.stderr_tail, "tokens": Runs(store).token_count(run_id),
            "sample": sample_dict(samples[run_id], row.started_at) if run_id in samples else None}

