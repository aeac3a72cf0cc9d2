"""The lab with real parts: a redis-server and a PostgreSQL server started by the
tests, `orch lab worker` processes, and devices of kind local (own workdirs) and ssh (the
test sshd). Waits end on events in the store, never on the clock."""
from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys

import pytest
import waiting
from cli_helpers import adb_device, orch, ssh_device
from lab_helpers import Worker, consumer_pids, inventory, matrix, registered, wait_for
from pg_fixture import fresh_pg_database
from sqlalchemy import text

from orchestrator.db.runs import Sessions
from orchestrator.db.store import Store

# One xdist worker runs this file's tests one after the other (scripts/test: --dist
# loadgroup): they find a test's Celery consumers in /proc by worker name.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("lab")]
_names = itertools.count()


@pytest.fixture
def lab(tmp_path, monkeypatch, redis_db, pg_url):
    """(workspace, broker, db URL, store, started workers) with ORCH_BROKER / ORCH_DB set for
    the in-process `orch lab` commands; every worker started is stopped at the end."""
    monkeypatch.chdir(tmp_path)
    db = fresh_pg_database(pg_url, f"lab_{os.getpid()}_{next(_names)}")
    monkeypatch.setenv("ORCH_BROKER", redis_db)
    monkeypatch.setenv("ORCH_DB", db)
    store = Store.open(db)
    workers: list[Worker] = []

    def start(name: str, inv, *options: str) -> Worker:
        worker = Worker(tmp_path, name, inv, redis_db, db, *options).start()
        workers.append(worker)
        return worker

    yield tmp_path, store, start
    for worker in workers:
        worker.stop()
    for worker in workers:
        # a SIGKILLed consumer takes a moment to leave /proc on a loaded machine: wait for
        # that (bounded); one still there after it outlived its worker
        assert waiting.wait_until(lambda w=worker: not consumer_pids(w.name), 30.0), \
            f"consumers of {worker.name} outlived it: {consumer_pids(worker.name)}"
    store.engine.dispose()


def _runs(store: Store) -> list:
    return store.fetch(text(
        "SELECT r.id, d.name AS device, r.session_id, r.cell_key, r.status, r.order_index, "
        "r.started_at, r.ended_at, r.superseded, "
        "(SELECT count(*) FROM token t WHERE t.run_id = r.id) AS tokens, "
        "(SELECT count(DISTINCT step) FROM token t WHERE t.run_id = r.id) AS steps "
        "FROM run r JOIN device d ON d.id = r.device_id ORDER BY r.started_at"))


def _logs(workers) -> str:
    return "\n".join(w.log() for w in workers)


def test_four_devices_on_two_workers_each_in_its_order_never_two_at_once(lab, phone):
    ws, store, start = lab
    w1 = start("w1", inventory(ws, "inv1", ["d1", "d2"]))
    # w2: a local device and the emulated phone (adb, mksh + toybox)
    w2 = start("w2", inventory(ws, "inv2", ["d3"], extra=adb_device("d4", phone)))
    devices = ["d1", "d2", "d3", "d4"]
    wait_for("four consumers", lambda: registered(store, devices),
             on_fail=lambda: _logs([w1, w2]))
    m = matrix(ws, "four")
    code, out = orch("lab", "submit", str(m), *[arg for d in devices for arg in ("-d", d)])
    assert code == 0, out
    assert "submitted 16 cells (4 per device)" in out
    code, out = orch("lab", "wait")
    assert code == 0, out + _logs([w1, w2])

    runs = _runs(store)
    assert len(runs) == 16 and all(r.status == "ok" and r.tokens == 10 for r in runs)
    cells = store.fetch(text("SELECT device, position, cell_key, worker, state, session_id "
                             "FROM lab_cell ORDER BY device, position"))
    for device in devices:
        mine = [r for r in runs if r.device == device]
        planned = [c.cell_key for c in cells if c.device == device]
        # its order: the runs started in the planned (interleaved) order ...
        assert [r.cell_key for r in mine] == planned
        assert [r.order_index for r in mine] == sorted(r.order_index for r in mine)
        # ... and never two at once
        for before, after in itertools.pairwise(mine):
            assert before.ended_at <= after.started_at, (device, before.id, after.id)
        assert len({r.session_id for r in mine}) == 1
        # the session keeps the device's facts as they were when it ran (provenance)
        facts = Sessions(store).get(mine[0].session_id).device_facts
        assert (facts or {}).get("kernel"), (device, facts)
    # each device was served by the worker whose inventory has it
    served = {c.device: c.worker for c in cells}
    assert served == {"d1": "w1", "d2": "w1", "d3": "w2", "d4": "w2"}
    assert all(c.state == "ok" for c in cells)

    code, out = orch("lab", "status", "--format", "json")
    assert code == 0
    status = {row["device"]: row for row in json.loads(out)}
    assert {d: status[d]["worker"] for d in devices} == served
    assert status["d4"]["kind"] == "adb"
    assert all(status[d]["waiting"] == 0 and status[d]["state"] == "active" for d in devices)
    # the report works from the shared store as for `orch run`
    code, out = orch("table", str(cells[0].session_id))
    assert code == 0 and "first" in out, out
    code, out = orch("report", "--matrix", "four", "--no-plots")
    assert code == 0 and all(d in out for d in devices), out


def test_a_worker_killed_mid_cell_is_reattached_and_nothing_is_stored_twice(lab):
    ws, store, start = lab
    inv = inventory(ws, "inv", ["k1"])
    worker = start("wk", inv)
    wait_for("the consumer", lambda: registered(store, ["k1"]), on_fail=worker.log)
    m = matrix(ws, "kill", tokens=40, delay=0.1, repeat=1, order="as-written")
    code, out = orch("lab", "submit", str(m), "-d", "k1")
    assert code == 0, out

    def streaming():
        rows = _runs(store)
        return rows and rows[0].status == "running" and rows[0].tokens >= 5
    wait_for("the first cell to stream", streaming, on_fail=worker.log)
    consumers = consumer_pids("wk")
    assert consumers
    worker.kill9()
    # its consumer dies with it (PR_SET_PDEATHSIG); the engine's job goes on under the agent
    wait_for("the consumer to die", lambda: not consumer_pids("wk"))
    taken = store.fetch(text("SELECT state FROM lab_cell ORDER BY position"))
    assert taken[0].state == "delivered"

    worker2 = start("wk", inv)
    code, out = orch("lab", "wait")
    assert code == 0, out + worker2.log()
    runs = _runs(store)
    assert len(runs) == 2, runs                      # no duplicate run
    assert all(r.status == "ok" and not r.superseded for r in runs)
    assert all(r.tokens == 40 and r.steps == 40 for r in runs)   # every engine row once
    assert "finishing it" in worker2.log()           # re-attached by the new consumer
    attempts = store.fetch(text("SELECT attempts FROM lab_cell ORDER BY position"))
    assert [a.attempts for a in attempts] == [1, 1]


def test_an_unreachable_device_is_quarantined_and_runs_once_released(lab, sshd_factory):
    ws, store, start = lab
    server = sshd_factory()
    inv = inventory(ws, "inv", [], extra=ssh_device("box", server, "/tmp/orch-lab-box-"
                                                    + str(os.getpid())))
    server.stop()                                    # the box is unplugged
    worker = start("wq", inv, "--quarantine-after", "2", "--check-retry", "0.2",
                   "--link-grace", "2")
    wait_for("the consumer", lambda: registered(store, ["box"]), on_fail=worker.log)
    m = matrix(ws, "quarantine", repeat=1)
    code, out = orch("lab", "submit", str(m), "-d", "box")
    assert code == 0, out

    def quarantined():
        return store.fetch(text("SELECT state, reason FROM lab_device WHERE name = 'box' "
                                "AND state = 'quarantined'"))
    row = wait_for("quarantine", quarantined, on_fail=worker.log)[0]
    assert row.reason.startswith("unreachable")
    code, out = orch("lab", "status")
    assert "quarantined: unreachable" in out, out
    # its cells wait, none failed, no run was made
    states = [r.state for r in store.fetch(text("SELECT state FROM lab_cell"))]
    assert sorted(states) == ["delivered", "queued"]
    assert _runs(store) == []

    server.start()
    code, out = orch("lab", "release", "box")
    assert code == 0 and "released" in out
    code, out = orch("lab", "wait")
    assert code == 0, out + worker.log()
    assert [r.status for r in _runs(store)] == ["ok", "ok"]


def test_a_removed_device_keeps_its_cells_waiting_until_added_again(lab):
    ws, store, start = lab
    worker = start("wr", inventory(ws, "inv", ["r1"]))
    wait_for("the consumer", lambda: registered(store, ["r1"]), on_fail=worker.log)
    code, out = orch("lab", "devices", "remove", "r1")
    assert code == 0, out
    wait_for("the consumer to stop", lambda: not consumer_pids("wr"), on_fail=worker.log)
    code, out = orch("lab", "submit", str(matrix(ws, "removed", repeat=1)), "-d", "r1")
    assert code == 2 and "removed" in out   # a removed device takes no new work
    code, out = orch("lab", "devices", "add", "r1")
    assert code == 0, out
    wait_for("the consumer again", lambda: consumer_pids("wr"), on_fail=worker.log)
    code, out = orch("lab", "submit", str(matrix(ws, "added", repeat=1)), "-d", "r1")
    assert code == 0, out
    code, out = orch("lab", "wait")
    assert code == 0, out + worker.log()


def test_a_redelivered_task_does_nothing_and_a_second_consumer_is_refused(lab):
    """Idempotency by the cell key: the task of a cell that ended runs nothing again (a
    broker may deliver a task twice); two consumers of one device are never both live."""
    from orchestrator.config.inventory import load_inventory
    from orchestrator.lab.cell_task import DeviceConsumer
    from orchestrator.lab.health import HealthLimits

    ws, store, start = lab
    inv = inventory(ws, "inv", ["i1"])
    worker = start("wi", inv)
    wait_for("the consumer", lambda: registered(store, ["i1"]), on_fail=worker.log)
    code, out = orch("lab", "submit", str(matrix(ws, "idem", repeat=1)), "-d", "i1")
    assert code == 0, out
    assert orch("lab", "wait")[0] == 0
    before = _runs(store)
    cell_id = store.fetch(text("SELECT min(id) AS id FROM lab_cell"))[0].id
    consumer = DeviceConsumer(store, load_inventory(str(inv)), "i1", "test", HealthLimits())
    assert consumer.execute(cell_id) == "ok"      # ended already: nothing to do
    assert consumer.execute(10 ** 6) == "ignored"  # a task of another store
    assert _runs(store) == before

    # a second worker given the same device does not take it from the live one
    second = start("wi2", inv, "--device", "i1")
    assert second.proc.wait(timeout=120) == 2
    assert "served by worker wi right now" in second.log()
    assert consumer_pids("wi") and not consumer_pids("wi2")
    # and a second consumer of a device is refused by the device lock, whoever starts it
    row = store.fetch(text("SELECT pid FROM lab_device WHERE name = 'i1'"))[0]
    assert row.pid in consumer_pids("wi")
    taken = subprocess.run(
        [sys.executable, "-m", "orchestrator.lab.consumer", "--device", "i1", "--worker", "x",
         "--db", str(store.engine.url.render_as_string(hide_password=False)),
         "--broker", os.environ["ORCH_BROKER"], "--inventory", str(inv)],
        check=False, capture_output=True, text=True, timeout=120, cwd=ws)
    assert taken.returncode == 3 and "already served" in taken.stderr, taken.stderr


def test_lab_commands_refuse_bad_input_in_one_line(lab, monkeypatch):
    ws, store, _ = lab
    m = matrix(ws, "refused", repeat=1)
    code, out = orch("lab", "submit", str(m), "-d", "nowhere")
    assert code == 2 and "served by no lab worker" in out and "Traceback" not in out
    monkeypatch.delenv("ORCH_BROKER")
    code, out = orch("lab", "submit", str(m), "-d", "x")
    assert code == 2 and "no broker" in out
    code, out = orch("lab", "submit", str(m), "-d", "x", "--broker", "redis://127.0.0.1:1/0")
    assert code == 2 and "not reachable" in out, out
    adaptive = ws / "adaptive.yaml"
    adaptive.write_text(m.read_text().replace("repeat: 1", "repeat: {min: 2, max: 5, until: 2%}"))
    code, out = orch("lab", "submit", str(adaptive), "-d", "x", "--broker", "redis://x:1/0")
    assert code == 2 and "adaptive repeats" in out, out
    code, out = orch("lab", "release", "nowhere")
    assert code == 3 and "not in the lab" in out     # NotFound
    code, out = orch("lab", "wait")
    assert code == 2 and "nothing was submitted" in out
    assert store.fetch(text("SELECT count(*) AS n FROM session"))[0].n == 0


def test_status_shows_waiting_cells_from_the_store_and_the_broker(lab):
    """A device registered by a worker that is not running: its cells wait, and both the
    store and the broker count them."""
    from orchestrator.db import lab as lab_db

    ws, store, _ = lab
    lab_db.register_device(store, "idle", "local", "gone", "nowhere")
    code, out = orch("lab", "submit", str(matrix(ws, "waiting", repeat=2)), "-d", "idle")
    assert code == 0, out
    code, out = orch("lab", "status", "--format", "json")
    (row,) = json.loads(out)
    assert (row["waiting"], row["broker"], row["alive"], row["running"]) == (4, 4, False, None)
    code, out = orch("lab", "status")
    assert "not running" in out and "gone@nowhere" in out
    code, out = orch("lab", "wait", "--timeout", "0.5")
    assert code == 1 and "gave up after --timeout" in out, out


def test_a_cancelled_submission_runs_nothing_and_can_be_resubmitted(lab):
    """`orch lab cancel`: the waiting cells are cancelled in the store and revoked in Celery;
    a consumer that starts afterwards drains their messages and runs none of them. `orch lab
    resubmit` submits the same matrix again on the same devices."""
    import re

    from orchestrator.db import lab as lab_db

    ws, store, start = lab
    lab_db.register_device(store, "c1", "local", "gone", "nowhere")   # no consumer yet
    code, out = orch("lab", "submit", str(matrix(ws, "cancelled", repeat=2)), "-d", "c1")
    assert code == 0, out
    batch = int(re.search(r"as batch (\d+)", out).group(1))
    code, out = orch("lab", "cancel", str(batch))
    assert code == 0 and f"batch {batch}: 4 waiting cells cancelled" in out, out
    states = [r.state for r in store.fetch(text(f"SELECT state FROM lab_cell "
                                                 f"WHERE batch_id = {batch}"))]
    assert states == ["cancelled"] * 4
    assert orch("lab", "cancel", str(batch))[1].startswith(f"batch {batch}: 0 waiting cells")
    code, out = orch("lab", "cancel", "999")
    assert code == 3 and "no lab submission 999" in out

    code, out = orch("lab", "wait")
    assert code == 1, out                             # cancelled cells did not end ok

    worker = start("wc", inventory(ws, "inv", ["c1"]))
    wait_for("the consumer", lambda: registered(store, ["c1"]), on_fail=worker.log)
    code, out = orch("lab", "resubmit", str(batch))
    assert code == 0 and f"resubmitted batch {batch} as batch {batch + 1}: 4 cells" in out, out
    code, out = orch("lab", "wait")                   # the queue is FIFO: the cancelled
    assert code == 0, out + worker.log()              # tasks came first, and ran nothing
    runs = _runs(store)
    assert [r.status for r in runs] == ["ok"] * 4
    old = {r.session_id for r in store.fetch(text(f"SELECT session_id FROM lab_cell "
                                                   f"WHERE batch_id = {batch}"))}
    assert not old & {r.session_id for r in runs}
    assert worker.log().count("ended before it was taken") + \
        worker.log().count("already ended (cancelled)") == 4
