"""A run stopped because its store failed (docs/reliability.md, "Store faults during a run").

A run nobody records must not go on: the engine is stopped at once, with the stop marker left
in its job folder (AgentClient.stop), so a later `--resume` never collects orch's own kill as
the engine's result even when the store could not take the run's last update. The run is
marked `interrupted` with the true cause when the store still takes that one update (one try:
a lost store is not waited for again here), and one line says what happened and what to do,
from db/faults.py's classification: "Free the space" only for a full store.
"""
from __future__ import annotations

from sqlalchemy.exc import SQLAlchemyError

from orchestrator.db.faults import LockLost, StoreDeleted, classify
from orchestrator.db.reconnect import no_retry
from orchestrator.db.store import Store, now
from orchestrator.errors import StoreWriteError
from orchestrator.run.agent_client import AgentClient
from orchestrator.run.lifecycle import STORE_STOP
from orchestrator.stats.status import Status
from orchestrator.transports.base import TransportError

# what the runner catches as a store failure
STORE_ERRORS = (SQLAlchemyError, OverflowError, StoreDeleted, LockLost)


def store_failed(store: Store, client: AgentClient, run_id: int, jobdir: str,
                 exc: BaseException, resume: str) -> StoreWriteError:
    """Stop the job, mark the run if the store lets us, and return the one line to raise."""
    fault = classify(exc, store.path or store.url, store.path)
    cause = f"{STORE_STOP}: {fault.cause}"
    try:
        client.stop(jobdir, cause)
    except TransportError:
        pass
    try:
        with no_retry(store):
            store.update_run(run_id, status=Status.INTERRUPTED, ended_at=now(), cause=cause)
    except (*STORE_ERRORS, OSError):
        pass
    if fault.kind == "value":
        what = "a number too large to handle came" if isinstance(exc, OverflowError) else \
            "the store refused a value"
        return StoreWriteError(f"{what} during run #{run_id} ({fault.reason}); its engine was "
                               f"stopped. {fault.advice}; `{resume}` runs the cell again")
    if fault.kind == "deleted":
        return StoreWriteError(f"{fault.reason}; run #{run_id}'s engine was stopped. "
                               f"{fault.advice}; `{resume}` with the store back (or another "
                               f"--db) runs the cell again")
    return StoreWriteError(f"{fault.cause} during run #{run_id}, so it could not be written; "
                           f"its engine was stopped. {fault.advice}, then `{resume}` runs the "
                           f"cell again")
