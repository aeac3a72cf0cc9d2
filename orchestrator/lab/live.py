"""The lab page's data (`orch serve`, /api/lab; docs/serve.md): every device with its state,
its running cell (tokens so far, tok/s), its newest temperature and free RAM, its queue, and
the newest failures with their cause.

A lab device's row is `orch lab status`'s (status.py status_rows: one reading of the lab's
tables); a device that only plain `orch run` uses has no lab row and shows from its runs. The
state, one word:

- quarantined: the lab quarantined it (`orch lab release` frees it);
- lost: a lab device whose consumer has not said it lives for 30 s (db/lab.py STALE_S);
- running: a run of it is recording (status `running` in the store);
- cooling: a lab cell is taken but its run has not begun (the cooldown and the device's
  checks before a cell come first);
- idle: none of these.
"""
from __future__ import annotations

import datetime as dt
from typing import Any

from orchestrator.db.store import Store, now
from orchestrator.lab.status import status_rows
from orchestrator.results import live

QUARANTINED, LOST, RUNNING, COOLING, IDLE = "quarantined", "lost", "running", "cooling", "idle"
STATES = (IDLE, RUNNING, COOLING, LOST, QUARANTINED)


def device_state(lab_row: dict[str, Any] | None, runs: list[dict[str, Any]]) -> str:
    """One device's state from its `orch lab status` row (None: not a lab device) and its
    runs recording now."""
    if lab_row is not None and lab_row["state"] == QUARANTINED:
        return QUARANTINED
    if lab_row is not None and not lab_row["alive"]:
        return LOST
    if runs:
        return RUNNING
    if lab_row is not None and lab_row["running"]:
        return COOLING
    return IDLE


def lab_view(store: Store) -> dict[str, Any]:
    """Every device (lab devices and those of plain `orch run` sessions) with state, lab
    status, running runs, newest sample and queue; the newest failures; when it was read."""
    lab_rows = {r["device"]: r for r in status_rows(store)}
    running = live.running(store)
    samples = live.device_samples(store)
    queues = live.queues(store)
    known = {d["device"]: d for d in live.devices(store)}
    names = sorted(set(known) | set(lab_rows) | {r["device"] for r in running})
    out = []
    for name in names:
        lab_row = lab_rows.get(name)
        runs = [r for r in running if r["device"] == name]
        out.append({"device": name,
                    "kind": (lab_row or known.get(name) or {}).get("kind"),
                    "state": device_state(lab_row, runs),
                    "lab": lab_row, "running": runs, "sample": samples.get(name),
                    "queue": queues.get(name, [])})
    return {"at": now().astimezone(dt.UTC).isoformat(), "states": list(STATES),
            "devices": out, "failures": live.failures(store)}
