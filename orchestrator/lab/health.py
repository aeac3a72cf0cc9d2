"""Infrastructure checks before each lab cell, and quarantine.

A device that fails `after` checks in a row (unreachable, battery low, too hot at the start,
another orch job running there) is quarantined with the reason; the cell that found it so
waits, with every later cell of the device behind it in its queue, until `orch lab release`.
A cell's own failure (the engine crashed, ran out of memory) is a result, never a health
failure: it is stored as it is and the next cell runs."""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from orchestrator.db import lab as lab_db
from orchestrator.db.store import Store
from orchestrator.run.agent_client import AgentClient
from orchestrator.run.cooldown import run_agent_cooldown
from orchestrator.run.device_jobs import live_jobs
from orchestrator.transports.base import TransportError
from orchestrator.stats.status import Status

log = logging.getLogger("orch.lab")


@dataclass(frozen=True)
class HealthLimits:
    after: int = 3                  # failed checks in a row that quarantine the device
    min_battery_pct: int = 20       # below this (when the device reports a level): a failure
    max_start_temp_c: float = 70.0  # CPU hotter than this before a cell: a failure
    retry_s: float = 10.0           # between failed checks before quarantine
    poll_s: float = 2.0             # how often a held cell looks whether it was released


class Stopping(Exception):
    """The consumer is shutting down while a cell waited: the cell stays taken, and the
    device's next consumer finishes it."""


def check_device(client: AgentClient, limits: HealthLimits, own_jobs: set[str]) -> str | None:
    """None when the device may run a cell, else the reason it may not. Three agent calls:
    facts (reachable, battery), one CPU temperature reading, the live jobs."""
    try:
        facts = client.facts()
        level = str(facts.get("battery.level_pct", ""))
        charging = str(facts.get("battery.status", "")) in ("Charging", "Full")
        if level.isdigit() and int(level) < limits.min_battery_pct and not charging:
            return f"battery low: {level}% < {limits.min_battery_pct}% and not charging"
        reading = run_agent_cooldown(client, "cpu", 10 ** 9, 0.0, 0.0, 0.05)
        temp_mC = reading.value_mC
        if temp_mC is None and reading.readings:
            temp_mC = reading.readings[-1].values.get("cpu_mC")
        if temp_mC is not None and temp_mC / 1000.0 > limits.max_start_temp_c:
            return (f"too hot to start: CPU {temp_mC / 1000.0:.1f} °C > "
                    f"{limits.max_start_temp_c:g} °C")
        jobs = live_jobs(client)
        if any(job.state == "stray" for job in jobs):   # leftovers of ended orch jobs
            client.reap(f"{client.transport.workdir}/runs")
            jobs = live_jobs(client)
        others = [job for job in jobs if job.jobdir not in own_jobs]
        if others:
            return f"busy: another orch job runs there ({others[0].jobdir}, pid {others[0].pid})"
    except TransportError as exc:
        return f"unreachable: {exc}"
    return None


@dataclass
class HealthGate:
    """Held before each cell: returns when the device passed its checks. `check` returns the
    reason the device may not run (None: it may)."""

    store: Store
    device: str
    limits: HealthLimits
    stop: threading.Event
    aborts: int = 0                 # cells in a row stopped at the thermal ceiling

    def ran(self, status: str, cause: str | None) -> None:
        """A cell ended with `status`. Runs stopped at the matrix's thermal ceiling (status
        `aborted`, the agent's `abort:`) `after` times in a row quarantine the device with
        that reason: a device that cannot stay below the ceiling measures nothing."""
        self.aborts = self.aborts + 1 if status == Status.ABORTED else 0
        if self.aborts >= self.limits.after:
            reason = (f"aborted at the thermal ceiling {self.aborts} times in a row "
                      f"(last: {cause or 'aborted'})")
            lab_db.update_device(self.store, self.device, reason=reason,
                                 state=lab_db.QUARANTINED)
            log.warning("%s: quarantined: %s (`orch lab release %s` when it is fixed)",
                        self.device, reason, self.device)
            self.aborts = 0

    def pass_(self, check: Callable[[], str | None]) -> None:
        while True:
            row = lab_db.lab_device(self.store, self.device)
            if row is not None and row.state == lab_db.QUARANTINED:
                self._hold(row.reason)
                continue
            reason = check()
            if reason is None:
                if row is not None and row.failures:
                    lab_db.update_device(self.store, self.device, failures=0, reason=None)
                return
            self.failed(reason)

    def failed(self, reason: str) -> None:
        """One more failed check in a row: quarantine at `after`, else wait retry_s. A cell
        that lost its device mid-run counts here too."""
        row = lab_db.lab_device(self.store, self.device)
        failures = (row.failures if row is not None else 0) + 1
        if failures >= self.limits.after:
            lab_db.update_device(self.store, self.device, failures=failures, reason=reason,
                                 state=lab_db.QUARANTINED)
            log.warning("%s: quarantined after %d failed checks in a row: %s "
                        "(`orch lab release %s` when it is fixed)", self.device, failures,
                        reason, self.device)
            return
        lab_db.update_device(self.store, self.device, failures=failures, reason=reason)
        log.warning("%s: check %d of %d failed: %s; again in %g s", self.device, failures,
                    self.limits.after, reason, self.limits.retry_s)
        self._wait(self.limits.retry_s)

    def _hold(self, reason: str | None) -> None:
        """Quarantined: wait until someone releases the device (or the consumer stops)."""
        log.info("%s: quarantined (%s); its cells wait for `orch lab release %s`",
                 self.device, reason, self.device)
        while True:
            self._wait(self.limits.poll_s)
            row = lab_db.lab_device(self.store, self.device)
            if row is None or row.state != lab_db.QUARANTINED:
                log.info("%s: released", self.device)
                return

    def _wait(self, seconds: float) -> None:
        if self.stop.wait(seconds):
            raise Stopping(self.device)
