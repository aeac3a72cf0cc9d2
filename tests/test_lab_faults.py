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


@pytest.mark.parametrize("stored_failed", [False, True], ids=["now", "older-orch"])
def test_a_hard_stop_leaves_the_cell_taken_and_the_next_worker_finishes_it(lab, stored_failed):
    """docs/lab.md: a second SIGTERM stops at once; the engine goes on on the device and the
    next consumer re-attaches it: the cell is never `failed`, its run gets every row, and the
    device (busy with that very job) is not quarantined. `older-orch`: the cell was stored
    `failed` (as orch did before), its run left `running`: re-attached all the same."""
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
    if stored_failed:
        with store.engine.begin() as conn:
            conn.execute(text("UPDATE lab_cell SET state = 'failed' WHERE state = 'delivered'"))

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


def test_a_broker_that_accepts_and_never_answers_is_one_line_and_exit_1(lab, monkeypatch):
    """A hung Redis (or a proxy on the wrong port): status, submit and worker each print one
    line naming the broker and exit 1 within a minute, instead of waiting for ever."""

    from lab_helpers import SilentPeer, Worker

    ws, store, _ = lab
    from orchestrator.db import lab as lab_db

    lab_db.register_device(store, "s1", "local", "gone", "nowhere")
    m = matrix(ws, "silent", repeat=1)
    with SilentPeer() as peer:
        url = f"redis://127.0.0.1:{peer.port}/0"
        monkeypatch.setenv("ORCH_BROKER", url)
        for argv in (["lab", "status"], ["lab", "submit", str(m), "-d", "s1"]):
            # a hang is caught by the suite's per-test timeout: the bound is the call returning
            code, out = orch(*argv)
            assert code == 1, (argv, code, out)
            line = [l for l in out.splitlines() if f"127.0.0.1:{peer.port}" in l]
            assert len(line) == 1 and "did not answer" in line[0], (argv, out)
            assert "Traceback" not in out
        worker = Worker(ws, "ws", inventory(ws, "inv", ["s1"]), url,
                        store.engine.url.render_as_string(hide_password=False)).start()
        try:
            assert worker.proc.wait(timeout=90) == 1, worker.log()
        finally:
            worker.stop()
        assert "did not answer" in worker.log() and "Traceback" not in worker.log()
    assert store.fetch(text("SELECT count(*) AS n FROM lab_cell"))[0].n == 0


def test_a_postgresql_restart_mid_cell_leaves_the_worker_serving_and_every_cell_whole(
        lab, pg_url):
    """A real restart of the store's server while a cell streams: the worker and its
    consumer stay the same processes, the interrupted cell ends with its true result (every
    row), never orch's own kill, and the next cell runs."""
    from pg_fixture import restart_pg_server

    ws, store, start = lab
    worker = start("wp", inventory(ws, "inv", ["p1"]))
    wait_for("the consumer", lambda: registered(store, ["p1"]), on_fail=worker.log)
    code, out = orch("lab", "submit", str(matrix(ws, "pgrestart", tokens=40, delay=0.1,
                                                 repeat=1, order="as-written")), "-d", "p1")
    assert code == 0, out
    wait_for("the first cell to stream", _streaming(store), on_fail=worker.log)
    consumers = consumer_pids("wp")
    restart_pg_server(pg_url, down_s=3.0)
    store.engine.dispose()                   # the test's own connections were cut too
    code, out = orch("lab", "wait", "--timeout", "240")
    assert code == 0, out + worker.log()
    assert worker.proc.poll() is None, worker.log()      # the worker survived ...
    assert consumer_pids("wp") == consumers              # ... and so did its consumer
    current = [r for r in _runs(store) if not r.superseded]
    assert [(r.status, r.tokens, r.steps) for r in current] == [("ok", 40, 40)] * 2, \
        _runs(store)
    causes = store.fetch(text("SELECT status, cause FROM run"))
    assert not [c for c in causes if "killed" in (c.cause or "") or c.status == "killed"]
    assert [c.state for c in _cells(store)] == ["ok", "ok"]
    _nothing_left(ws, worker)


def test_a_redis_restart_without_persistence_mid_cell_loses_no_cell(lab, redis_url):
    """A real restart of the broker (no persistence: every message it held is gone) while a
    cell streams: the consumer reconnects, the running cell ends whole, and the queued cells
    the broker forgot are sent again (reconciled with the store) and run once each."""
    from redis_fixture import restart_redis

    ws, store, start = lab
    worker = start("wb", inventory(ws, "inv", ["b1"]), "--reconcile-every", "2")
    wait_for("the consumer", lambda: registered(store, ["b1"]), on_fail=worker.log)
    code, out = orch("lab", "submit", str(matrix(ws, "redisrestart", tokens=40, delay=0.1,
                                                 repeat=2, order="as-written")), "-d", "b1")
    assert code == 0, out
    wait_for("the first cell to stream", _streaming(store), on_fail=worker.log)
    consumers = consumer_pids("wb")
    restart_redis(redis_url, down_s=2.0)
    code, out = orch("lab", "wait", "--timeout", "240")
    assert code == 0, out + worker.log()
    assert worker.proc.poll() is None and consumer_pids("wb") == consumers, worker.log()
    runs = _runs(store)
    assert [(r.status, r.tokens, r.steps, r.superseded) for r in runs] == \
        [("ok", 40, 40, False)] * 4, runs                  # each cell once, whole
    assert [c.state for c in _cells(store)] == ["ok"] * 4
    assert "sent again" in worker.log()
    _nothing_left(ws, worker)
