"""Every device-side step outside the followed run rides out a lost link the same way: facts,
agent and helper installs, pushes (binary, model, job files), the path check, cooldown, status
and collection. One policy, one place: a step is a callable; when it raises
LinkLost the transport is reconnected and the step called again, with the link policy's
tenacity backoff (LinkPolicy.retrying), until the device has been unreachable for
`--link-grace` (transport.link.grace_s). Only LinkLost is retried: a command that ran and
failed, a refused key (AccessDenied) or a timeout are answers, not outages.

A step must be safe to repeat. Pushes are (they resume: see the transports); starting a job
is made so by AgentClient.start (an "already started" answer to a repeat is success).
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from orchestrator.transports.base import LinkLost, Outage, Transport

log = logging.getLogger(__name__)
T = TypeVar("T")


class LinkRetry:
    """One retried step on one transport. The outage clock starts at the first failure and
    restarts when the step reports progress (`alive()`: a push that moved bytes, a cooldown
    that gave a reading), so a long push cut twice gets the grace for each cut, while a step
    that never gets anywhere is given up after the grace."""

    def __init__(self, transport: Transport, what: str,
                 note: Callable[[str], None] | None = None,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.transport, self.what, self.note, self.sleep = transport, what, note, sleep
        self.outage = Outage()
        self.attempts = 0   # attempts started so far (the step may ask: a repeat?)

    @property
    def repeat(self) -> bool:
        """True while an attempt after a lost link runs."""
        return self.attempts > 1

    def alive(self) -> None:
        """The step made progress over the current connection: a later loss is a new outage."""
        self.outage.end()

    def _reconnect(self) -> None:
        grace = self.transport.link.grace_s
        since = self.outage.since if self.outage.since is not None else time.monotonic()
        self.transport.reconnect(within=max(0.0, grace - (time.monotonic() - since)))

    def call(self, step: Callable[[], T]) -> T:
        for attempt in self.transport.link.retrying(outage=self.outage, sleep=self.sleep,
                                                    only=LinkLost):
            with attempt:
                if self.attempts:   # the last attempt lost the link: a fresh connection first
                    self._reconnect()
                self.attempts += 1
                try:
                    return step()
                except LinkLost as exc:
                    message = f"link to {self.transport.name} lost during {self.what} ({exc}); " \
                              f"reconnecting"
                    log.info("%s", message)
                    if self.note is not None and self.outage.since is None:
                        self.note(message)
                    raise
        raise AssertionError("unreachable: tenacity re-raises the last error")  # pragma: no cover


def retry_link(transport: Transport, what: str, step: Callable[[], T],
               note: Callable[[str], None] | None = None) -> T:
    """step() through the link policy: reconnect and repeat on LinkLost, for at most
    `--link-grace` of unreachability (then the last error is raised)."""
    return LinkRetry(transport, what, note).call(step)
