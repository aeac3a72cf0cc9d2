"""A device's part of one session: the prepared device (run/prepare.py), the session's id, the
policies its cells run under, and the runner that records into that session.

`orch run` (run/session.py) and the lab's consumers (lab/cell_task.py) build it the same way:
`prepare_device`, then `begin_session` with the session's id, which builds the runner with it.
The session id enters in that one step, so no runner exists without its real session (none
is built with a placeholder id and patched afterwards). `orch run` prepares before its
session exists (it refuses a busy device first, and stores the device's facts in the new
session); a lab session exists before any device is seen, so `begin_session` also stores the
device's facts as the session's snapshot when it has none. See docs/architecture.md."""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from orchestrator.config.matrix import Cooldown, LoadedMatrix
from orchestrator.config.plan import Cell
from orchestrator.db.runs import Runs, Sessions
from orchestrator.db.store import Store, now
from orchestrator.run.agent_client import AgentClient
from orchestrator.run.device_jobs import job_state
from orchestrator.run.lifecycle import STORE_STOP, USER_STOP
from orchestrator.run.prepare import PreparedDevice
from orchestrator.run.progress import Progress
from orchestrator.run.runner import CellOutcome, DeviceRunner
from orchestrator.transports.base import LinkPolicy, TransportError
from orchestrator.stats.status import Status


@dataclass(frozen=True)
class DevicePolicy:
    """How a device's cells meet the world: the link policy (--link-grace) every device-side
    step retries by, the event that stops the device's cells (Ctrl-C when several devices
    run), --force (start beside another live job), and the sleep waits use (tests: a fast
    one)."""

    link: LinkPolicy = field(default_factory=LinkPolicy)
    stop: threading.Event | None = None
    force: bool = False
    sleep: Callable[[float], None] = time.sleep
    resume_hint: str | None = None      # the `orch run … --resume` with every option given


@dataclass
class DeviceSession:
    """One device's part of one session. Built by `begin_session`; its runner records into
    `session_id` from the start."""

    prepared: PreparedDevice
    session_id: int
    policy: DevicePolicy = field(default_factory=DevicePolicy)
    runner: DeviceRunner = field(init=False)

    def __post_init__(self) -> None:
        p, policy = self.prepared, self.policy
        self.runner = DeviceRunner(p.store, p.transport, p.adapter, p.loaded, self.session_id,
                                   p.device_id, p.progress, link=policy.link, stop=policy.stop,
                                   force=policy.force, sleep=policy.sleep, facts=dict(p.facts),
                                   model_info=dict(p.model_info), agent=p.client,
                                   resume_hint=policy.resume_hint)

    # -- what the session's steps read -------------------------------------------------------
    @property
    def store(self) -> Store:
        return self.prepared.store

    @property
    def client(self) -> AgentClient:
        return self.prepared.client

    @property
    def loaded(self) -> LoadedMatrix:
        """The matrix with every model as its path on the device."""
        return self.prepared.loaded

    @property
    def device(self) -> str:
        return self.prepared.device

    @property
    def progress(self) -> Progress:
        return self.prepared.progress

    @property
    def cooldown(self) -> Cooldown:
        return self.prepared.loaded.matrix.cooldown

    @property
    def baseline(self) -> dict[str, float] | None:
        return self.prepared.baseline

    @property
    def path_warnings(self) -> list[Any]:
        return self.prepared.path_warnings

    # -- one cell's device-side steps besides running it (run/session.py: run_or_collect) ----
    def collect(self, earlier: Any, cell: Cell) -> CellOutcome | None:
        """--resume of an interrupted run whose engine may have finished on the device: read
        the rest of its spool instead of running it again. None when it must be re-run, which
        needs evidence that its engine is gone: the agent says `dead` or `absent`, or it was
        stopped by the user (its X line is our kill's) and is dead now. An engine left
        without its supervisor (`orphan`) is killed first. A failed status query raises
        (TransportError): not knowing is no reason to start a second engine."""
        runner, jobdir = self.runner, earlier.remote_dir
        state, _ = job_state(self.client, jobdir)
        stopped = (earlier.cause or "").startswith((USER_STOP, STORE_STOP))
        if not stopped and state in ("running", "done"):
            # orch stopped it itself and could not record that (the store was away): its
            # end is orch's kill, never the engine's result; stored with orch's own cause
            marker = self.client.stopped_by_orch(jobdir)
            if marker is not None:
                self.store.update_run(earlier.id, status=Status.INTERRUPTED, cause=marker,
                                      ended_at=now())
                stopped = True
        if state in ("running", "done") and not stopped:
            # running again: its figures go until it ends again (db/figures.py)
            self.store.update_run(earlier.id, status=Status.RUNNING, cause=None, figures=None)
            return runner.follow(earlier.id, jobdir, earlier.spool_lines or 0, cell)
        if state in ("running", "orphan"):   # ours to end: stopped by the user, or unspooled
            self.progress.note(f"run #{earlier.id}: its engine still ran on the device "
                               f"({state}); killed before the cell runs again")
            self.client.kill(jobdir)
            state, _ = job_state(self.client, jobdir)
            if state in ("running", "orphan"):
                raise TransportError(f"run #{earlier.id}: its engine ({jobdir}) could not be "
                                     f"stopped; not starting a second one")
        return None

    def add_path_warnings(self, run_id: int, cell: Cell) -> None:
        """Append the model path check's warnings that concern `cell` to its run's own."""
        extra = [str(w) for w in self.path_warnings if w.applies(cell.model, cell.matrix_config)]
        if extra:
            row = Runs(self.store).get(run_id)
            have = list(row.warnings or []) if row is not None else []
            self.store.update_run(run_id, warnings=have + [w for w in extra if w not in have])


def begin_session(prepared: PreparedDevice, session_id: int,
                  policy: DevicePolicy | None = None) -> DeviceSession:
    """The prepared device's part of session `session_id`, which exists. A session without a
    device snapshot yet (a lab session, created before its device was seen) gets the
    prepared device's facts as its snapshot, as `orch run` stores them when it creates one."""
    row = Sessions(prepared.store).get(session_id)
    if row is not None and not getattr(row, "device_facts", None) and prepared.facts:
        prepared.store.update_session(session_id, device_facts=dict(prepared.facts))
    return DeviceSession(prepared, session_id, policy or DevicePolicy())
