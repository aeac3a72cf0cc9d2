"""The lab's watcher (docs/regressions.md): after a session ends, or when a device stops
producing data, POST one JSON event to the webhook of the inventory's `lab:` key.

Events:
- `step`: a config of the session that ended ran significantly slower than in the last
  earlier session of its matrix on its device (results/regression_feed.py session_steps);
- `change_point`: a step down in a config's history that starts at a session that ended
  while the lab watched (a change point shows once sessions after it confirm it);
- `silent`: a device with queued cells and no cell ended for longer than `silent_after`.

Once per event: the store's `alert` table holds each event's key (unique), claimed before
the POST, so neither this worker nor another one posts it twice; a session is evaluated once
too. An acknowledged regression (`orch ack`) is not posted. A POST is bounded
(`webhook_timeout`, the whole request in a thread) and a dead endpoint is one log line: the
lab goes on.
"""
from __future__ import annotations

import datetime as dt
import json
import logging
import threading
import time
import urllib.request
from dataclasses import dataclass
from typing import Any

from orchestrator.config.inventory import LabAlerts
from orchestrator.db import annotations as db
from orchestrator.db import lab as lab_db
from orchestrator.db.runs import Runs
from orchestrator.db.store import Store, now
from orchestrator.results.regression_feed import RegressionEntry, regression_entries, \
    session_steps

log = logging.getLogger("orch.lab")
SINCE_KEY = "watch:since"       # when the lab began watching: older sessions are history
EVERY_S = 30.0                  # between two looks at the store


@dataclass(frozen=True)
class Event:
    key: str                    # the once-only key in the `alert` table
    kind: str                   # step | change_point | silent
    payload: dict[str, Any]     # the JSON posted


def _aware(when: dt.datetime) -> dt.datetime:
    return when if when.tzinfo else when.replace(tzinfo=dt.UTC)


def watch_since(store: Store) -> dt.datetime:
    """When the lab began watching this store (recorded the first time it is asked)."""
    db.claim_alert(store, SINCE_KEY, "since", {"since": now().isoformat()})
    row = db.alert(store, SINCE_KEY)
    assert row is not None      # claimed just now, or before
    return dt.datetime.fromisoformat(row.payload["since"])


def regression_event(e: RegressionEntry, settings: LabAlerts) -> Event:
    payload = {**e.record(), "event": e.kind, "site": settings.site_url,
               "text": f"{e.device}: {e.model} {e.config} ({e.matrix}) "
                       f"{e.delta_pct:+.1f}% at session {e.session} (p={e.p_value:.2g}); "
                       f"{e.compare_command}; orch ack {e.id}"}
    return Event(f"regression:{e.id}", e.kind, payload)


def session_events(store: Store, session_id: int, watched: set[int],
                   settings: LabAlerts) -> list[Event]:
    """The regressions a session's end shows: its significant steps, and the change points
    of its matrix on its devices that start at a watched session."""
    found = session_steps(store, session_id)
    pairs = {(r.device, r.matrix_name) for r in Runs(store).current(session_id)
             if r.matrix_name}
    for device, matrix in sorted(pairs):
        found += [e for e in regression_entries(store, matrix, device) if e.session in watched]
    return [regression_event(e, settings) for e in found if e.ack is None]


def silent_events(store: Store, settings: LabAlerts) -> list[Event]:
    """Devices with queued work and no cell ended for longer than `silent_after`."""
    out = []
    for row in lab_db.device_activity(store):
        last = row.last_end or row.first_queued
        if last is None:
            continue
        quiet = (now() - _aware(last)).total_seconds()
        if quiet <= settings.silent_after:
            continue
        payload = {"event": "silent", "device": row.name, "pending": row.pending,
                   "last_cell_ended": row.last_end.isoformat() if row.last_end else None,
                   "silent_for_s": round(quiet), "site": settings.site_url,
                   "compare": "orch lab status",
                   "text": f"{row.name}: no cell ended for {quiet / 3600:.1f} h with "
                           f"{row.pending} cell(s) queued (orch lab status)"}
        out.append(Event(f"silent:{row.name}:{_aware(last).isoformat()}", "silent", payload))
    return out


def post(url: str, payload: dict[str, Any], timeout_s: float) -> str:
    """POST the JSON; its outcome ("posted 200", "failed: ..."). Bounded as a whole: the
    request runs in a daemon thread that is left behind if it outlasts `timeout_s`."""
    result: list[str] = []

    def send() -> None:
        body = json.dumps(payload, default=str).encode()
        request = urllib.request.Request(url, data=body, method="POST", headers={
            "Content-Type": "application/json", "User-Agent": "orch-lab"})
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as answer:  # noqa: S310 - an http(s) URL (config/inventory.py)
                result.append(f"posted {answer.status}")
        except Exception as exc:  # noqa: BLE001 - any failure is the endpoint's: one line
            result.append(f"failed: {type(exc).__name__}: {exc}")

    thread = threading.Thread(target=send, name="orch-webhook", daemon=True)
    thread.start()
    thread.join(timeout_s + 1.0)
    return result[0] if result else f"failed: no answer within {timeout_s:g} s"


def check(store: Store, settings: LabAlerts, since: dt.datetime | None = None
          ) -> list[tuple[Event, str]]:
    """Evaluate the sessions that ended since the lab began watching (`since`, default: as
    the store recorded it) and not yet evaluated, and the devices; post each new event once.
    The events posted with their outcomes."""
    if not settings.webhook:
        return []
    since = since if since is not None else watch_since(store)
    ended = db.sessions_ended_since(store, since)
    watched = {s.id for s in ended}
    events: list[Event] = []
    for s in ended:
        if db.claim_alert(store, f"evaluated:session:{s.id}", "evaluated", None):
            events += session_events(store, s.id, watched, settings)
    events += silent_events(store, settings)
    done = []
    for event in events:
        if not db.claim_alert(store, event.key, event.kind, event.payload):
            continue                           # posted already (here or by another worker)
        outcome = post(settings.webhook, event.payload, settings.webhook_timeout)
        db.set_alert_outcome(store, event.key, outcome)
        if outcome.startswith("failed"):
            log.warning("webhook %s: %s not delivered (%s)", settings.webhook, event.key,
                        outcome)
        done.append((event, outcome))
    return done


class Watcher:
    """`check` every EVERY_S in a thread of its own, so the worker's loop never waits on
    the store's figures or on an endpoint."""

    def __init__(self, store: Store, settings: LabAlerts, every_s: float = EVERY_S) -> None:
        self.store, self.settings, self.every_s = store, settings, every_s
        self.thread: threading.Thread | None = None
        self.last = 0.0

    def tick(self) -> None:
        if not self.settings.webhook or time.monotonic() - self.last < self.every_s:
            return
        if self.thread is not None and self.thread.is_alive():
            return
        self.last = time.monotonic()
        self.thread = threading.Thread(target=self._check, name="orch-watch", daemon=True)
        self.thread.start()

    def _check(self) -> None:
        try:
            check(self.store, self.settings)
        except Exception as exc:  # noqa: BLE001 - the watcher never stops the lab
            log.warning("watcher: %s: %s", type(exc).__name__, exc)
