"""The lab (docs/lab.md): many devices on several hosts, one Celery queue per device.

`orch lab submit` stores a batch (one session per device) and sends one Celery task per
(device, cell) to queue `dev.<device>`; on each host `orch lab worker` runs one consumer
process per device it serves (concurrency 1, prefetch 1, late ack), which runs the cell with
the same runner `orch run` uses. The store, not the broker, is the lab's truth: a task whose
cell already ended does nothing, a cell a dead consumer had taken is re-attached or re-run when
its device's consumer starts again, and quarantine lives in `lab_device`.

Modules: app (the Celery app and its settings), state (the lab tables), submit, health
(infrastructure checks, quarantine), consumer (one device's worker process), cell_task (what
a task does), supervisor (`orch lab worker`), status (status and wait).
"""
