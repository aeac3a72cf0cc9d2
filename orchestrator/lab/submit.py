"""`orch lab submit`: a matrix on lab devices. One batch row holds the matrix as submitted,
one session per device holds its runs (as `orch run -d A -d B` makes), one lab_cell row and
one Celery task per (device, cell), sent to the device's queue in the device's run order
(as written, interleaved, pairs or shuffled: the plan is the one `orch run` makes)."""
from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import Any

from orchestrator.config.matrix import LoadedMatrix
from orchestrator.config.plan import plan_cells
from orchestrator.config.session import session_prompt_texts
from orchestrator.db import lab as lab_db
from orchestrator.db.store import Store, now
from orchestrator.lab.app import TASK, LabError, check_broker, queue_name, task_id
from orchestrator.run.controller import SessionProvenance


@dataclass
class Submission:
    batch_id: int
    sessions: dict[str, int] = field(default_factory=dict)   # device -> session id
    cells: int = 0
    enqueue_s: float = 0.0


def refuse_unsupported(loaded: LoadedMatrix) -> None:
    """What the lab does not do (yet), refused before anything is written."""
    matrix = loaded.matrix
    if matrix.quality is not None:
        raise LabError(f"{loaded.path}: quality probes are not run by the lab yet; run them "
                       f"with `orch run` on one device")
    if matrix.repeat.adaptive:
        raise LabError(f"{loaded.path}: adaptive repeats (repeat.until) need the results of "
                       f"each round before the next is planned; the lab plans every cell up "
                       f"front: give a fixed `repeat:` or use `orch run`")


def check_devices(store: Store, devices: list[str]) -> dict[str, Any]:
    """Every device must be served by a lab worker (registered in the store) and not removed.
    A quarantined device is accepted: its cells wait until it is released."""
    known = {row.name: row for row in lab_db.lab_devices(store)}
    for name in devices:
        if name not in known:
            served = ", ".join(sorted(known)) or "none yet"
            raise LabError(f"device {name!r} is served by no lab worker (served: {served}); "
                           f"start `orch lab worker --inventory FILE` on its host first")
        if known[name].state == lab_db.REMOVED:
            raise LabError(f"device {name!r} was removed from the lab; `orch lab devices add "
                           f"{name}` first")
    return {name: known[name] for name in devices}


def submit(store: Store, app: Any, loaded: LoadedMatrix, devices: list[str],
           command: str | None = None, progress: Any = None) -> Submission:
    """Store the batch, its sessions and cells, then send the tasks. The broker is checked
    first; if sending fails half-way, the batch is deleted again (tasks already sent find no
    cell and do nothing) and the error raised."""
    refuse_unsupported(loaded)
    check_broker(app)
    served = check_devices(store, devices)
    matrix = loaded.matrix
    seed = matrix.seed
    if matrix.order == "shuffled" and seed is None:
        seed = random.SystemRandom().randrange(1 << 31)
    cells = plan_cells(matrix, seed)
    provenance = SessionProvenance.collect(command)
    batch_id = lab_db.create_batch(store, matrix_name=matrix.name, matrix_path=loaded.path,
                                   matrix_text=loaded.text, prompt_text=loaded.prompt_text,
                                   session_prompts=session_prompt_texts(loaded.matrix) or None,
                                   command=provenance.command,
                                   submitted_from=provenance.controller_host)
    result = Submission(batch_id)
    rows: list[dict[str, Any]] = []
    for device in devices:
        session_id = store.create_session(
            kind="run", name=matrix.name, matrix_name=matrix.name, matrix_path=loaded.path,
            matrix_text=loaded.text, matrix_sha256=loaded.sha256, **provenance.columns(),
            seed=seed)
        result.sessions[device] = session_id
        store.upsert_device(device, served[device].kind)
        rows += [{"batch_id": batch_id, "session_id": session_id, "device": device,
                  "cell_key": cell.key, "position": position, "state": "queued",
                  "attempts": 0, "enqueued_at": now()}
                 for position, cell in enumerate(cells)]
    ids = lab_db.insert_cells(store, rows)
    began = time.perf_counter()
    try:
        with app.producer_or_acquire() as producer:
            for index, (row, cell_id) in enumerate(zip(rows, ids)):
                app.send_task(TASK, args=[cell_id], queue=queue_name(row["device"]),
                              task_id=task_id(cell_id), producer=producer)
                if progress is not None:
                    progress(index + 1, len(ids))
    except Exception as exc:  # noqa: BLE001 - any broker failure: undo the batch
        for session_id in result.sessions.values():
            store.delete_session(session_id)
        raise LabError(f"sending the tasks failed after some were sent ({type(exc).__name__}: "
                       f"{exc}); the batch was withdrawn, submit again") from None
    result.enqueue_s = time.perf_counter() - began
    result.cells = len(ids)
    return result
