"""`orch lab status` and `orch lab wait`: the lab as the store sees it (devices, their worker,
state and health, cells waiting, the running cell), and a submission followed to its end."""
from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rich.table import Table

from orchestrator.db import lab as lab_db
from orchestrator.db.store import Store
from orchestrator.lab.app import LabError
from orchestrator.lab.store_retry import STORE_GRACE_S, with_store


def status_rows(store: Store, depths: dict[str, int | None] | None = None) -> list[dict[str, Any]]:
    """One dict per lab device: name, kind, worker, host, state, health, waiting (cells not
    ended, from the store), broker (messages in its queue, when the broker was asked),
    running (the cell now running), seen_s (heartbeat age), failed and failures (the newest
    submission's cells that failed on it, and their causes: results/lab_failures.py)."""
    from orchestrator.results.lab_failures import newest_batch_failures

    pending = lab_db.pending_counts(store)
    failed: dict[str, list[dict[str, Any]]] = {}
    for group in newest_batch_failures(store):
        for device in group.devices:
            n = sum(1 for c in group.cells if c.device == device)
            failed.setdefault(device, []).append({"cause": group.cause, "cells": n})
    out = []
    for row in lab_db.lab_devices(store):
        running = None
        if row.current_cell_id is not None:
            cell = lab_db.cell_row(store, row.current_cell_id)
            if cell is not None:
                running = f"{cell.cell_key} (session {cell.session_id})"
        seen = lab_db.heartbeat_age(row)
        health = "ok" if not row.failures else f"{row.failures} failed: {row.reason}"
        if row.state == lab_db.QUARANTINED:
            health = f"quarantined: {row.reason}"
        out.append({"device": row.name, "kind": row.kind, "worker": row.worker,
                    "host": row.host, "state": row.state, "health": health,
                    "waiting": pending.get(row.name, 0),
                    "broker": (depths or {}).get(row.name), "running": running,
                    "seen_s": None if seen is None else round(seen, 1),
                    # the newest submission's failed cells on it, by cause
                    "failed": sum(f["cells"] for f in failed.get(row.name, [])),
                    "failures": failed.get(row.name, []),
                    "alive": lab_db.consumer_alive(row)})
    return out


def status_table(rows: list[dict[str, Any]]) -> Table:
    table = Table(title="lab devices", title_justify="left")
    for name in ("device", "kind", "worker@host", "state", "waiting", "failed", "broker",
                 "running", "health", "consumer"):
        table.add_column(name, justify="right" if name in ("waiting", "failed", "broker")
                         else "left")
    for r in rows:
        seen = "not running" if not r["alive"] else f"seen {r['seen_s']:g} s ago"
        table.add_row(r["device"], r["kind"], f"{r['worker']}@{r['host']}", r["state"],
                      str(r["waiting"]), str(r["failed"]),
                      "—" if r["broker"] is None else str(r["broker"]),
                      r["running"] or "—", r["health"], seen)
    return table


@dataclass
class WaitResult:
    sessions: list[int]
    states: Counter
    ok: bool


def sessions_to_wait(store: Store, session: int | None) -> list[int]:
    """The session given (with the other sessions of its submission: one per device), else
    every session of the newest submission."""
    if session is not None:
        batch = lab_db.session_batch(store, session)
        if batch is None:
            raise LabError(f"session {session} was not submitted to the lab "
                           f"(`orch lab status` lists what waits)")
        return [session]
    batch = lab_db.newest_batch(store)
    if batch is None:
        raise LabError("nothing was submitted to the lab in this store (orch lab submit)")
    return lab_db.batch_sessions(store, batch)


def wait(store: Store, sessions: list[int], on_change: Callable[[Counter, int], None],
         poll_s: float = 1.0, timeout_s: float | None = None,
         every: Callable[[set[str]], None] | None = None, every_s: float = 30.0) -> WaitResult:
    """Poll the sessions' cells until none is pending (or timeout_s: then ok is False);
    `every(devices with queued cells)` every `every_s` (the broker's reconciliation)."""
    began = time.monotonic()
    last = None
    looked = time.monotonic()
    while True:
        # a store restart while waiting is waited out (lab/store_retry.py), not an error
        cells = with_store(lambda: lab_db.cells_of_sessions(store, sessions), STORE_GRACE_S,
                           "lab wait")
        states = Counter(cell.state for cell in cells)
        if states != last:
            on_change(states, len(cells))
            last = states
        if not any(states[s] for s in lab_db.PENDING):
            ok = all(cell.state in lab_db.GOOD for cell in cells)
            return WaitResult(sessions, states, ok)
        if timeout_s is not None and time.monotonic() - began > timeout_s:
            return WaitResult(sessions, states, False)
        if every is not None and time.monotonic() - looked >= every_s:
            looked = time.monotonic()
            every({cell.device for cell in cells if cell.state == "queued"})
        time.sleep(poll_s)
