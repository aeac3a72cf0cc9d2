"""`orch lab cancel` and `orch lab resubmit`: withdraw a submission's waiting cells, or
submit its matrix again.

Cancelling is the store's doing: the batch's `queued` cells become `cancelled`, and a
consumer that meets their task does nothing (as for a cell that ended; cell_task.py), so
no cell that was cancelled runs, whatever the broker does with its message. The tasks are
also revoked in Celery (when a broker is given) so that live consumers drop the messages
without opening the store. A cell a consumer has already taken is not stopped: it ends as
when its worker is stopped with Ctrl-C (the running cell finishes and is stored)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from orchestrator.db import lab as lab_db
from orchestrator.db.store import Store
from orchestrator.errors import NotFound
from orchestrator.lab.app import is_timeout, silent, task_id
from orchestrator.lab.submit import Submission, submit


@dataclass(frozen=True)
class Cancelled:
    batch_id: int
    cancelled: int          # cells that were waiting and will not run
    running: int            # cells a consumer had taken: they finish
    revoked: bool           # the tasks were revoked in Celery too
    broker_error: str | None = None   # why they could not be (the store's cancel stands)


def _batch(store: Store, batch_id: int) -> Any:
    row = lab_db.batch_row(store, batch_id)
    if row is None:
        newest = lab_db.newest_batch(store)
        raise NotFound(f"no lab submission {batch_id} (newest: "
                       f"{newest if newest is not None else 'none yet'})")
    return row


def cancel(store: Store, batch_id: int, app: Any | None = None) -> Cancelled:
    """Mark the batch's waiting cells cancelled, then revoke their tasks (with `app`)."""
    _batch(store, batch_id)
    ids, running = lab_db.cancel_queued(store, batch_id)
    if app is not None and ids:
        try:
            app.control.revoke([task_id(i) for i in ids])
        except Exception as exc:  # noqa: BLE001 - a broker down or silent: the store decides
            why = str(silent(app)) if is_timeout(exc) else f"{type(exc).__name__}: {exc}"
            return Cancelled(batch_id, len(ids), running, False, why.splitlines()[0])
    return Cancelled(batch_id, len(ids), running, app is not None)


def resubmit(store: Store, app: Any, batch_id: int, command: str | None = None) -> Submission:
    """The batch's matrix, as stored when it was submitted, on the same devices: a new batch
    with new sessions (the old ones keep what they ran)."""
    from orchestrator.lab.cell_task import loaded_from_batch

    batch = _batch(store, batch_id)
    return submit(store, app, loaded_from_batch(batch), lab_db.batch_devices(store, batch_id),
                  command=command)
