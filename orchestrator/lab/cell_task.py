"""What one lab task does on its device's consumer: run lab_cell <id> exactly once.

Idempotent by the cell key in the store: a task whose cell already ended does nothing; a cell
whose run is `running` or `interrupted` on the device is re-attached to the agent's spool (the
job survives the consumer) or, with positive evidence that its engine is gone, run again. The
device is checked (health.py) before each cell; a link lost for longer than the link grace
counts as a failed check and the cell is then collected, not lost."""
from __future__ import annotations

import hashlib
import logging
import threading
from dataclasses import dataclass
from typing import Any

import yaml

from orchestrator.config.inventory import Inventory, open_transport
from orchestrator.config.matrix import LoadedMatrix, Matrix
from orchestrator.config.plan import Cell, plan_cells
from orchestrator.config.session import apply_session_prompt_texts
from orchestrator.db import lab as lab_db
from orchestrator.db.runs import Runs, Sessions
from orchestrator.db.store import Store, now
from orchestrator.errors import ConfigError, StoreWriteError
from orchestrator.lab.health import HealthGate, HealthLimits, Stopping, check_device
from orchestrator.plugins import get_adapter
from orchestrator.run.agent_client import AgentClient
from orchestrator.run.device_session import DevicePolicy, DeviceSession, begin_session
from orchestrator.lab.store_retry import STORE_GRACE_S, StoreGone, lost_store, wait_for_store, \
    with_store
from orchestrator.run.lifecycle import STORE_STOP, USER_STOP, DeviceBusy
from orchestrator.run.prepare import prepare_device
from orchestrator.run.progress import Progress
from orchestrator.run.runner import CellOutcome
from orchestrator.run.session import run_or_collect
from orchestrator.transports.base import LinkPolicy, TransportError
from orchestrator.stats.status import Status

log = logging.getLogger("orch.lab")
FINAL_SKIP = ("ok", "kept")


class LogProgress(Progress):
    """A consumer has no terminal: one log line per cell and per note."""

    def __init__(self, device: str) -> None:
        self.device = device

    def cell_running(self, cell: Any, tokens: int) -> None:
        log.info("%s: %s (repeat %d) running", self.device, cell.config, cell.repeat)

    def cell_done(self, status: str, tokens: int) -> None:
        log.info("%s: cell ended %s, %d tokens", self.device, status, tokens)

    def note(self, message: str) -> None:
        log.info("%s: %s", self.device, message)


@dataclass
class _Session:
    device: DeviceSession       # this device's part of the session (run/device_session.py)
    cells: dict[str, Cell]      # the session's plan, by cell key


def loaded_from_batch(batch: Any) -> LoadedMatrix:
    """The matrix as it was submitted: its text and its prompt as read on the submitting host
    (paths in it, a model's `local:` say, are resolved on this host)."""
    data = yaml.safe_load(batch.matrix_text)
    matrix = Matrix.model_validate(data)
    # `session:` prompt files as read on the submitting host (this host may not have them)
    apply_session_prompt_texts(matrix, getattr(batch, "session_prompts", None) or {})
    return LoadedMatrix(matrix=matrix, path=batch.matrix_path, text=batch.matrix_text,
                        sha256=hashlib.sha256(batch.matrix_text.encode()).hexdigest(),
                        prompt_text=batch.prompt_text or "")


def _raised(exc: BaseException, kind: type[BaseException]) -> bool:
    """`kind` in exc's chain (a later store call in a `finally` may have replaced it)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, kind):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


class DeviceConsumer:
    """Runs the lab cells of one device, one at a time, for one worker process."""

    def __init__(self, store: Store, inventory: Inventory, device: str, worker: str,
                 limits: HealthLimits, link: LinkPolicy | None = None,
                 store_grace_s: float = STORE_GRACE_S) -> None:
        self.store, self.inventory, self.device, self.worker = store, inventory, device, worker
        self.store_grace_s = store_grace_s
        self.busy = False           # a task runs (lab/reconcile.py looks only between cells)
        self.kind = inventory.get(device).kind
        self.device_id = store.upsert_device(device, self.kind)
        self.link = link or LinkPolicy()
        self.stop = threading.Event()
        self.gate = HealthGate(store, device, limits, self.stop)
        self.limits = limits
        self.progress = LogProgress(device)
        self.transport: Any = None
        self.client: AgentClient | None = None
        self.sessions: dict[int, _Session] = {}

    # -- the device connection and each session's preparation -----------------------------
    def _connected(self) -> Any:
        if self.transport is None:
            transport = open_transport(self.inventory, self.device)
            transport.link = self.link
            transport.connect()
            self.transport = transport
        return self.transport

    def _drop_connection(self) -> None:
        if self.transport is not None:
            try:
                self.transport.close()
            except Exception as exc:  # noqa: BLE001 - a dead link may fail to close; dropped
                log.debug("%s: closing the link: %s", self.device, exc)
        self.transport, self.client, self.sessions = None, None, {}

    def _session(self, row: Any) -> _Session:
        if row.session_id not in self.sessions:
            batch = lab_db.batch_row(self.store, row.batch_id)
            loaded = loaded_from_batch(batch)
            session = Sessions(self.store).get(row.session_id)
            assert session is not None, row.session_id  # a cell goes with its session (ON DELETE CASCADE)
            seed = session.seed
            adapter = get_adapter(loaded.matrix.engine, loaded.matrix.engine_options)
            prepared = prepare_device(self.store, self._connected(), adapter, loaded,
                                      self.device, self.kind, self.device_id, self.progress)
            # the session was submitted before its device was seen: begin_session stores
            # this device's facts as its snapshot
            device = begin_session(prepared, row.session_id, DevicePolicy(link=self.link))
            # planned from the prepared matrix, as `orch run` plans (run/session.py): its
            # `{local: FILE}` models are their paths on the device now (run/model_push.py);
            # the cell keys are the submitted plan's (a key names the model, not its file)
            cells = {cell.key: cell for cell in plan_cells(prepared.loaded.matrix, seed)}
            self.sessions[row.session_id] = _Session(device, cells)
        return self.sessions[row.session_id]

    def _check(self) -> str | None:
        try:
            if self.client is None:
                client = AgentClient(self._connected())
                client.install()
                self.client = client
        except TransportError as exc:
            self._drop_connection()
            return f"unreachable: {exc}"
        reason = check_device(self.client, self.limits, self._own_jobs())
        if reason is not None and reason.startswith("unreachable"):
            self._drop_connection()
        return reason

    def _own_jobs(self) -> set[str]:
        """Job dirs of this device's runs that are this lab's to collect (taken cells)."""
        return lab_db.own_job_dirs(self.store, self.device)

    # -- tasks ---------------------------------------------------------------------------------
    def execute(self, cell_id: int) -> str:
        """The task body. Returns what happened (for the log): a state or `ignored`. A store
        that is lost is waited out (the worker's store grace) before the cell is looked at."""
        self.busy = True
        try:
            return with_store(lambda: self._execute(cell_id), self.store_grace_s,
                              f"{self.device}: cell {cell_id}")
        except StoreGone:
            raise
        except Exception as exc:
            if lost_store(exc):
                raise self._gone(exc) from None
            raise
        finally:
            self.busy = False

    def _execute(self, cell_id: int) -> str:
        row = lab_db.cell_row(self.store, cell_id)
        if row is None:
            log.warning("%s: task for cell %s, which is not in this store: ignored",
                        self.device, cell_id)
            return "ignored"
        if row.device != self.device:
            log.warning("%s: task for cell %s of device %s: ignored", self.device, cell_id,
                        row.device)
            return "ignored"
        if row.state not in lab_db.PENDING:
            log.info("%s: cell %s already ended (%s): nothing to do", self.device, cell_id,
                     row.state)
            return row.state
        if not lab_db.take_cell(self.store, cell_id, self.worker):
            log.info("%s: cell %s ended before it was taken (cancelled): nothing to do",
                     self.device, cell_id)
            return lab_db.CANCELLED
        return self._guarded(lab_db.cell_row(self.store, cell_id))

    def _guarded(self, row: Any) -> str:
        """_run, with an unexpected error ending the cell `failed` (logged with its
        traceback) rather than leaving it taken for ever. Stopping is not an error: the cell
        stays taken and the device's next consumer finishes it."""
        try:
            return self._run(row)
        except (Stopping, StoreGone):
            raise
        except Exception as exc:  # a task must end its cell, whatever happened
            if lost_store(exc):
                return self._after_store_loss(row, exc)
            log.exception("%s: cell %s failed unexpectedly", self.device, row.id)
            self._drop_connection()
            cause = f"{type(exc).__name__}: {exc}"
            return self._end(row, "failed", self._note_on_run(row, cause), cause)

    def _after_store_loss(self, row: Any, exc: BaseException) -> str:
        """The store went away during the cell (a restart): not the cell's failure. Once it
        answers again the cell goes on from what the store holds: a run whose engine still
        runs is re-attached (its spool collected), one the runner stopped because it could not
        record it is marked so (STORE_STOP: run again, never collected as orch's own kill).
        The store gone for the whole grace: StoreGone, and the cell stays taken for the
        device's next consumer."""
        log.warning("%s: cell %s: the store was lost (%s); waiting for it", self.device, row.id,
                    type(exc).__name__)
        self.sessions = {}          # prepared against the old connections: prepared again
        try:
            wait_for_store(self.store, self.store_grace_s, f"{self.device}: cell {row.id}")
        except StoreGone as gone:
            raise self._gone(gone) from None
        if _raised(exc, StoreWriteError):   # the runner stopped the engine it could not record
            with_store(lambda: self._mark_store_stopped(row), self.store_grace_s, self.device)
        log.info("%s: the store answers again; cell %s goes on", self.device, row.id)
        return self._guarded(row)

    def _mark_store_stopped(self, row: Any) -> None:
        for run in Runs(self.store).current(session=row.session_id, cell_key=row.cell_key):
            if run.status == Status.RUNNING:
                self.store.update_run(run.id, status=Status.INTERRUPTED, ended_at=now(),
                                      cause=f"{STORE_STOP} (the store was lost)")

    def _gone(self, exc: BaseException) -> StoreGone:
        """The store stayed away for the whole grace: the consumer stops (the cell stays
        taken, its message unacknowledged) and its worker starts it again."""
        return exc if isinstance(exc, StoreGone) else StoreGone(
            f"the store at {self.store.url} was unreachable for {self.store_grace_s:g} s")

    def recover(self) -> int:
        """Before consuming: finish the cells an earlier consumer of this device took and did
        not end (it was killed), in the order it took them. Returns how many."""
        reopened = lab_db.reopen_stranded(self.store, self.device)
        if reopened:
            log.warning("%s: cell(s) %s were stored failed while their engine ran on: taken "
                        "again to re-attach it", self.device, ", ".join(map(str, reopened)))
        rows = lab_db.taken_cells(self.store, self.device)
        for row in rows:
            log.info("%s: cell %s was taken by a consumer that ended; finishing it",
                     self.device, row.id)
            self._guarded(row)
        return len(rows)

    def _run(self, row: Any) -> str:
        while True:
            self.gate.pass_(self._check)
            try:
                session = self._session(row)
            except TransportError as exc:
                self._drop_connection()
                self.gate.failed(f"unreachable: {exc}")
                continue
            except ConfigError as exc:   # the matrix cannot run on this device: every cell fails
                return self._end(row, "failed", None, str(exc))
            cell = session.cells.get(row.cell_key)
            if cell is None:
                return self._end(row, "failed", None, f"cell {row.cell_key} is not in the "
                                                      f"submitted matrix's plan")
            earlier = self._earlier(row, cell)
            if earlier is not None and earlier.status == Status.OK:
                return self._end(row, "kept", earlier.id)
            lab_db.update_device(self.store, self.device, current_cell_id=row.id)
            try:
                outcome = run_or_collect(session.device, cell, earlier,
                                         self._first(row.session_id))
            except (TransportError, DeviceBusy) as exc:
                self._drop_connection()
                self.gate.failed(f"unreachable: {exc}" if isinstance(exc, TransportError)
                                   else f"busy: {exc}")
                continue
            finally:
                lab_db.update_device(self.store, self.device, current_cell_id=None)
            if self._lost_link(outcome):
                self._drop_connection()
                self.gate.failed(f"unreachable: {outcome.cause}")
                continue
            self.gate.ran(outcome.status, outcome.cause)   # three thermal aborts: quarantine
            return self._end(row, outcome.status, outcome.run_id,
                             None if outcome.status == Status.OK else
                             outcome.cause or f"the run ended {outcome.status}")

    def _lost_link(self, outcome: CellOutcome) -> bool:
        """An interrupted run that the user did not stop: the device went away for longer
        than the link grace. Its job may still run there: collected once it is back."""
        return outcome.status == Status.INTERRUPTED and not (outcome.cause or "").startswith(USER_STOP)

    def _earlier(self, row: Any, cell: Cell) -> Any | None:
        runs = Runs(self.store).current(session=row.session_id, cell_key=row.cell_key)
        return max(runs, key=lambda r: r.id) if runs else None

    def _first(self, session_id: int) -> bool:
        """The session's first cell on this device (no cooldown timer before it)."""
        return not Runs(self.store).has_any(session_id)

    def _note_on_run(self, row: Any, cause: str) -> int | None:
        """An error out of the cell's task: the cell's newest run, if one was started, gets
        it as its cause when it has none (its status stays: a run still `running` may have
        an engine on the device, which the next consumer re-attaches). Its id, else None."""
        try:
            runs = Runs(self.store).current(session=row.session_id, cell_key=row.cell_key)
            run = max(runs, key=lambda r: r.id) if runs else None
            if run is not None and not run.cause:
                self.store.update_run(run.id, cause=cause)
            return run.id if run is not None else None
        except Exception as exc:  # noqa: BLE001 - the cell's own error is what to store
            log.warning("%s: cell %s: its run's cause was not stored (%s)", self.device,
                        row.id, exc)
            return None

    def _end(self, row: Any, status: str, run_id: int | None, cause: str | None = None) -> str:
        """End the cell: its state, its run, and why it did not end ok (`error`, one line)."""
        error = None if status in lab_db.GOOD or not cause else \
            (cause.strip().splitlines() or [status])[0]
        with_store(lambda: lab_db.update_cell(self.store, row.id, state=status, run_id=run_id,
                                              ended_at=now(), error=error),
                   self.store_grace_s, self.device)
        if cause:
            log.error("%s: cell %s %s: %s", self.device, row.id, status, cause)
        if lab_db.session_pending(self.store, row.session_id) == 0:
            self.store.update_session(row.session_id, ended_at=now())
            self.sessions.pop(row.session_id, None)   # a consumer lives for weeks: let it go
        return status

    def close(self) -> None:
        self._drop_connection()
