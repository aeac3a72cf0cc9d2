"""Queued cells reconciled with the broker (docs/lab.md, "When the broker forgets").

A Redis without persistence that restarts forgets every message it held: the cells stay
`queued` in the store (the lab's truth) and nobody would ever run them. A device's queue
that is empty while the store still has cells of it queued (sent more than MIN_AGE_S ago,
so a submission under way is not mistaken for a loss) has lost them: their tasks are sent
again, with the same task ids, in their order. Sending one twice is harmless: a task whose
cell is taken or ended does nothing more (cell_task.py). The device's consumer does this
between cells (its running cell's message is not in the queue, and is not `queued`), and
`orch lab wait` does it for the devices it waits on."""
from __future__ import annotations

import datetime as dt
import logging
import threading
from collections.abc import Callable
from typing import Any

from orchestrator.db import lab as lab_db
from orchestrator.db.store import Store, now
from orchestrator.lab.app import TASK, queue_name, task_id

log = logging.getLogger("orch.lab")
MIN_AGE_S = 30.0      # a cell queued for less than this may still be on its way to the broker
EVERY_S = 30.0        # how often a consumer or `lab wait` looks


def resend_lost(store: Store, app: Any, device: str, min_age_s: float = MIN_AGE_S) -> int:
    """Send again the tasks of `device`'s queued cells when its broker queue is empty; how
    many were sent (0: nothing was lost, or the broker could not say)."""
    if _depth(app, device) != 0:
        return 0
    lost = lab_db.queued_cells(store, device, now() - dt.timedelta(seconds=min_age_s))
    if not lost:
        return 0
    with app.producer_or_acquire() as producer:
        for row in lost:
            app.send_task(TASK, args=[row.id], queue=queue_name(device),
                          task_id=task_id(row.id), producer=producer)
    log.warning("%s: the broker had lost %d queued cell(s) (a restart without persistence?); "
                "sent again", device, len(lost))
    return len(lost)


def _depth(app: Any, device: str) -> int | None:
    """Messages in the device's queue; 0 for a queue the broker does not know (Redis forgets
    a queue with its bindings on a restart); None when the broker cannot be asked."""
    try:
        with app.connection_for_read() as conn:
            conn.ensure_connection(max_retries=1)
            try:
                return int(conn.default_channel.queue_declare(queue=queue_name(device),
                                                              passive=True).message_count)
            except conn.channel_errors:    # a passive declare of a queue nobody declared
                return 0
    except Exception:  # noqa: BLE001 - kombu wraps a lost broker many ways: cannot say
        return None


class Reconciler:
    """A consumer's look at its queue every `every_s` while no cell runs, in a daemon thread
    of its own (the solo pool's thread runs the cells)."""

    def __init__(self, store: Store, broker: str, device: str, idle: Callable[[], bool],
                 stop: threading.Event, every_s: float = EVERY_S) -> None:
        self.store, self.broker, self.device, self.idle = store, broker, device, idle
        self.stop, self.every_s = stop, every_s
        self.thread = threading.Thread(target=self._loop, name="orch-reconcile", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def _loop(self) -> None:
        from orchestrator.lab.app import make_app

        app = make_app(self.broker)
        while not self.stop.wait(self.every_s):
            if not self.idle():
                continue
            try:
                resend_lost(self.store, app, self.device, min_age_s=self.every_s)
            except Exception as exc:  # noqa: BLE001 - a store or broker hiccup: next time
                log.warning("%s: queued cells not reconciled with the broker: %s: %s",
                            self.device, type(exc).__name__, str(exc).splitlines()[:1])
