"""The lab under faults of its own parts, with real parts: a worker stopped hard mid-cell,
PostgreSQL and Redis restarted mid-cell, a broker that accepts and never answers, queued
messages a restarted Redis lost. Each test checks the cells' stored states, the runs' rows,
and that nothing is left running (worker, consumers, engines)."""
from __future__ import annotations

import signal

import pytest
from cli_helpers import orch
from lab_helpers import consumer_pids, inventory, matrix, processes_mentioning, registered, \
    wait_for
from sqlalchemy import text
from test_lab import _runs, lab  # noqa: F401 - the lab fixture: workers, store, broker

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("lab")]


def _cells(store) -> list:
    return store.fetch(text("SELECT id, state, attempts FROM lab_cell ORDER BY position"))


def _streaming(store, rows: int = 5):
    def check() -> bool:
        runs = _runs(store)
        return bool(runs) and runs[-1].status == "running" and runs[-1].tokens >= rows
    return check


def _nothing_left(ws, *workers) -> None:
    for worker in workers:
        worker.stop()
    wait_for("no engine, agent or consumer left", lambda: not processes_mentioning(str(ws)),
             timeout=30, on_fail=lambda: f"left: {processes_mentioning(str(ws))}")


def test_a_hard_stop_leaves_the_cell_taken_and_the_next_worker_finishes_it(lab):
    """docs/lab.md: a second SIGTERM stops at once; the engine goes on on the device and the
    next consumer re-attaches it: the cell is never `failed`, its run gets every row, and the
    device (busy with that very job) is not quarantined."""
    ws, store, start = lab
    inv = inventory(ws, "inv", ["h1"])
    worker = start("wh", inv)
    wait_for("the consumer", lambda: registered(store, ["h1"]), on_fail=worker.log)
    m = matrix(ws, "hard", tokens=40, delay=0.1, repeat=1, order="as-written")
    code, out = orch("lab", "submit", str(m), "-d", "h1")
    assert code == 0, out
    wait_for("the first cell to stream", _streaming(store), on_fail=worker.log)
    worker.proc.send_signal(signal.SIGTERM)
    wait_for("the first SIGTERM to be seen", lambda: "stopping:" in worker.log(),
             on_fail=worker.log)
    worker.proc.send_signal(signal.SIGTERM)
    assert worker.proc.wait(timeout=60) == 0, worker.log()
    wait_for("its consumer to end", lambda: not consumer_pids("wh"))
    assert _cells(store)[0].state == "delivered", worker.log()   # taken: not failed
    assert "NotImplementedError" not in worker.log()

    second = start("wh", inv)
    code, out = orch("lab", "wait")
    assert code == 0, out + second.log()
    runs = _runs(store)
    assert [(r.status, r.tokens, r.steps) for r in runs] == [("ok", 40, 40)] * 2, runs
    assert [c.state for c in _cells(store)] == ["ok", "ok"]
    device = store.fetch(text("SELECT state, failures FROM lab_device WHERE name = 'h1'"))[0]
    assert (device.state, device.failures) == ("active", 0), second.log()
    assert "finishing it" in second.log()
    _nothing_left(ws, second)
