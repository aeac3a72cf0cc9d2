"""orch's own deadline for a followed job: a watch beside the follower that gives up on a
job whose agent cannot end it (a stopped supervisor), docs/reliability.md "A stopped
supervisor". Used by the speed cells (run/runner.py) and the quality probes (run/quality.py)."""
from __future__ import annotations

import threading
import time

from orchestrator.run.agent_client import AgentClient
from orchestrator.transports.base import Outage
from orchestrator.stats.status import Status

# orch's own deadline for a followed job (docs/reliability.md, "A stopped supervisor"): the
# cell timeout is the agent's to enforce, but a supervisor that is stopped (SIGSTOP, a frozen
# cgroup) enforces nothing and writes nothing, and orch would wait for ever. With a timeout,
# orch gives up once timeout + DEADLINE_KILL_S + 2 sample intervals + DEADLINE_SLACK_S have
# passed since the start without the X line: the agent's TERM, its KILL 3 s later (checked
# once per interval), the last sample, and slack for a slow link. Without one (or before
# it), a spool silent for max(STALL_MIN_S, STALL_INTERVALS sample intervals) while the
# supervisor is stopped (state T or t in /proc/PID/stat) is the same failure: S lines come
# every interval from a supervisor that runs, so silence alone may be the link's (its own
# dead-link rule covers that) but silence from a stopped supervisor is no link's.
DEADLINE_KILL_S = 3.0
DEADLINE_SLACK_S = 30.0
STALL_MIN_S = 60.0
STALL_INTERVALS = 30
WATCH_TICK_S = 0.5
TIMEOUT = Status.TIMEOUT


class DeadlineWatch:
    """A thread beside the follower (whose stream blocks while nothing comes) that ends a job
    orch has given up on: past its deadline with no X line, or silent with its supervisor
    stopped. It kills the engine and everything tagged with the job (AgentClient.kill) and
    the supervisor, so the agent's follower ends (it exits once the supervisor is gone, on
    every transport) and the runner goes on; `verdict` is then (status, cause). It acts
    only while the link works (during an outage the link policy decides) and never on a job
    whose X line is written (`done`): the follower brings that."""

    def __init__(self, client: AgentClient, jobdir: str, outage: Outage, timeout_s: float,
                 interval_s: float, elapsed_s: float = 0.0) -> None:
        self.client, self.jobdir, self.outage = client, jobdir, outage
        self.timeout_s, self.interval_s = timeout_s, interval_s
        self.grace_s = DEADLINE_KILL_S + 2 * interval_s + DEADLINE_SLACK_S
        start = time.monotonic()
        # a collected (--resume) run started earlier; it still gets the grace from now
        self.deadline = (start + max(timeout_s + self.grace_s - elapsed_s, self.grace_s)
                         if timeout_s > 0 else None)
        self.stall_s = max(STALL_MIN_S, STALL_INTERVALS * interval_s)
        self.last_line = start
        self.verdict: tuple[str, str] | None = None
        self.warning: str | None = None         # what was stopped, once it gave up
        self.last_error: Exception | None = None   # the last failed look (retried)
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True,
                                        name=f"orch-deadline-{jobdir.rsplit('/', 1)[-1]}")

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """End the watch; an action under way (a kill) finishes first."""
        self._done.set()
        self._thread.join(timeout=120)

    def line(self) -> None:
        """A line came: the spool is not stalled."""
        self.last_line = time.monotonic()

    def _watch(self) -> None:
        while not self._done.wait(WATCH_TICK_S) and self.verdict is None:
            if self.outage.since is not None:
                continue
            try:
                self._check(time.monotonic())
            except Exception as exc:  # noqa: BLE001 - a failed look is retried next tick
                self.last_error = exc

    def _check(self, now_: float) -> None:
        if self.deadline is not None and now_ >= self.deadline:
            if self.client.status(self.jobdir, retry=False) == "done":
                self.deadline = now_ + self.grace_s   # the X line is there: the follower
                return                                # brings it (asked again a grace later)
            self._give_up(TIMEOUT, f"the agent did not end the run within its timeout "
                                   f"({self.timeout_s:g} s) + {self.grace_s:g} s "
                                   f"(supervisor stopped?); killed by orch")
        elif now_ - self.last_line >= self.stall_s:
            sup = self.client.supervisor_state(self.jobdir)
            if sup is not None and sup[1] in ("T", "t"):
                self._give_up(Status.FAILED, f"the agent's supervisor (pid {sup[0]}) is stopped "
                                        f"(state {sup[1]}) and its spool sent nothing for "
                                        f"{self.stall_s:g} s; killed by orch")
            else:
                self.last_line = now_   # silent but not stopped: look again a period later

    def _give_up(self, status: str, cause: str) -> None:
        killed = self.client.stop(self.jobdir, f"{status}: {cause}")   # orch-stopped: ours
        supervisor = self.client.stop_supervisor(self.jobdir)
        stopped = [part for part in (killed, supervisor and f"supervisor {supervisor}") if part]
        self.warning = f"{cause}: stopped {' '.join(stopped) or 'nothing (it had ended)'}"
        self.verdict = (status, cause)
