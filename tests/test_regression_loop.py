"""The regression loop (docs/regressions.md): a step built into a store is in the Atom feed
with its id; the lab's webhook posts its JSON once to a real HTTP server on 127.0.0.1; a dead
endpoint costs a bounded time and one log line; a note shows on its history point and in the
report; `orch ack` marks the regression, which the feed then lists as acknowledged, not new,
and the webhook does not post."""
from __future__ import annotations

import datetime as dt
import json
import socket
import threading
import xml.etree.ElementTree as ET
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from cli_helpers import orch_ok
from test_history import T0, add_session

from orchestrator.config.inventory import LabAlerts, load_inventory
from orchestrator.db import annotations as db
from orchestrator.db import lab as lab_db
from orchestrator.db.runs import Runs
from orchestrator.db.store import Store
from orchestrator.errors import ConfigError
from orchestrator.lab.supervisor import Supervisor, WorkerOptions
from orchestrator.lab.watch import check
from orchestrator.results.annotations import changepoint_id
from orchestrator.results.history import history
from orchestrator.results.regression_feed import regression_entries

ATOM = "{http://www.w3.org/2005/Atom}"
STEP_AT = 4            # the first slower session (of 8)
LONG_AGO = T0 - dt.timedelta(days=1)


def stepped_store(db_path: str) -> tuple[Store, list[int]]:
    """Eight ended sessions of config t1 on device d: 20 tok/s, then 17 from the fifth on
    (three runs each, a fraction of a percent apart)."""
    store = Store.open(db_path)
    sids = []
    for k in range(8):
        level = 20.0 if k < STEP_AT else 17.0
        sid = add_session(store, k, {"t1": [level * f for f in (1.0, 1.004, 0.997)]},
                          build="0.3.30" if k < STEP_AT else "0.3.36")
        store.update_session(sid, ended_at=T0 + dt.timedelta(hours=k, minutes=30))
        sids.append(sid)
    return store, sids


class Receiver:
    """A real HTTP server on 127.0.0.1 (a free port) keeping every JSON body posted to it."""

    def __init__(self) -> None:
        bodies = self.bodies = []

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Receiver:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)
        assert not self.thread.is_alive()


def test_the_feed_lists_the_step_with_its_id(tmp_path):
    path = str(tmp_path / "orch.db")
    store, sids = stepped_store(path)
    [entry] = regression_entries(store)
    assert (entry.session, entry.session_before) == (sids[STEP_AT], sids[STEP_AT - 1])
    assert entry.delta_pct == pytest.approx(-15.0, abs=1.0)
    assert entry.id == changepoint_id("d", "hist", "m", "t1", sids[STEP_AT])
    assert entry.compare_command == f"orch compare -s {sids[STEP_AT - 1]} -s {sids[STEP_AT]}"
    out = tmp_path / "feed.xml"
    orch_ok("feed", "--db", path, "-o", str(out), "--base-url", "https://lab.example/bench/")
    root = ET.parse(out).getroot()
    assert root.tag == f"{ATOM}feed"
    [item] = root.findall(f"{ATOM}entry")
    assert item.find(f"{ATOM}id").text.endswith(entry.id)
    assert "-15." in item.find(f"{ATOM}title").text
    assert {c.get("term") for c in item.findall(f"{ATOM}category")} >= {"regression", "new"}
    assert item.find(f"{ATOM}link").get("href") == "https://lab.example/bench/index.html"
    text = item.find(f"{ATOM}summary").text
    assert entry.compare_command in text and f"orch ack {entry.id}" in text
    # the id is printed where the step is shown: orch history
    assert f"id {entry.id}" in orch_ok("history", "--db", path, "-m", "hist")


@pytest.mark.slow
def test_the_webhook_posts_the_json_once(tmp_path):
    store, sids = stepped_store(str(tmp_path / "orch.db"))
    with Receiver() as hook:
        settings = LabAlerts(webhook=hook.url, site_url="https://lab.example/bench/")
        done = check(store, settings, since=LONG_AGO)
        assert [outcome for _, outcome in done] == ["posted 204"]
        assert check(store, settings, since=LONG_AGO) == []      # evaluated, posted: no more
        [body] = hook.bodies
    assert body["event"] in ("step", "change_point")
    assert (body["device"], body["matrix"], body["model"], body["config"]) == \
        ("d", "hist", "m", "t1")
    assert body["delta_pct"] == pytest.approx(-15.0, abs=1.0) and body["p_value"] < 0.05
    assert body["compare"] == f"orch compare -s {sids[STEP_AT - 1]} -s {sids[STEP_AT]}"
    assert body["site"] == "https://lab.example/bench/"
    assert body["id"] == regression_entries(store)[0].id
    [row] = [a for a in db.alerts(store) if a.key.startswith("regression:")]
    assert row.outcome == "posted 204"


def test_a_dead_endpoint_costs_a_bounded_time_and_one_line(tmp_path, caplog):
    store, _ = stepped_store(str(tmp_path / "orch.db"))
    silent = socket.socket()            # accepts connections (its backlog), never answers
    silent.bind(("127.0.0.1", 0))
    silent.listen(4)
    try:
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/hook"
        # the bound is the call returning at all (the test's timeout catches a hang)
        with caplog.at_level("WARNING", logger="orch.lab"):
            [(_, outcome)] = check(store, LabAlerts(webhook=url, webhook_timeout=0.5),
                                   since=LONG_AGO)
    finally:
        silent.close()
    assert outcome.startswith("failed")
    [line] = [r.getMessage() for r in caplog.records]
    assert "not delivered" in line and "\n" not in line


def test_a_device_that_stops_producing_data_is_posted_once(tmp_path):
    store = Store.open(str(tmp_path / "orch.db"))
    lab_db.register_device(store, "pixel", "local", "w1", "host")
    sid = store.create_session(kind="run", name="lab", matrix_name="phone")
    batch = lab_db.create_batch(store, matrix_name="phone")
    old = dt.datetime.now(dt.UTC) - dt.timedelta(hours=3)
    lab_db.insert_cells(store, [
        {"batch_id": batch, "session_id": sid, "device": "pixel", "cell_key": f"c{i}",
         "position": i, "state": "ok" if i == 0 else "queued", "attempts": 0,
         "enqueued_at": old, "ended_at": old if i == 0 else None} for i in range(3)])
    with Receiver() as hook:
        settings = LabAlerts(webhook=hook.url, silent_after="2h")
        check(store, settings)
        check(store, settings)
        [body] = hook.bodies
    assert (body["event"], body["device"], body["pending"]) == ("silent", "pixel", 2)
    assert body["silent_for_s"] >= 3 * 3600 - 60


@pytest.mark.slow
def test_a_note_shows_on_its_point_and_in_the_report(tmp_path):
    path = str(tmp_path / "orch.db")
    store, sids = stepped_store(path)
    orch_ok("note", "--db", path, "session", str(sids[STEP_AT]), "firmware 16.0.2")
    run = Runs(store).current(sids[1])[0].id
    orch_ok("note", "--db", path, "run", str(run), "charger <b>unplugged</b>")
    [series] = history(store, "hist")
    notes = {p.session: [n.text for n in p.notes] for p in series.points}
    assert notes[sids[STEP_AT]] == ["firmware 16.0.2"]
    assert notes[sids[1]] == ["charger <b>unplugged</b>"]
    points = json.loads(orch_ok("history", "--db", path, "-m", "hist", "--format", "json"))
    [noted] = [p for p in points["points"] if p["session"] == sids[STEP_AT]]
    assert noted["notes"][0]["text"] == "firmware 16.0.2"
    assert "firmware 16.0.2" in orch_ok("history", "--db", path, "-m", "hist")
    report = tmp_path / "report.md"
    orch_ok("report", str(sids[STEP_AT]), "--db", path, "-o", str(report))
    text = report.read_text()
    assert "**Notes** on these sessions and runs" in text
    assert f"| session {sids[STEP_AT]} | firmware 16.0.2 |" in text
    cid = changepoint_id("d", "hist", "m", "t1", sids[STEP_AT])
    assert f"id {cid}" in text                       # the regressions section names the step
    assert "session" in orch_ok("notes", "--db", path)


def test_ack_marks_the_regression_everywhere_and_the_webhook_skips_it(tmp_path):
    path = str(tmp_path / "orch.db")
    store, sids = stepped_store(path)
    [entry] = regression_entries(store)
    out = orch_ok("ack", "--db", path, entry.id[:6], "known: new scheduler in 0.3.36")
    assert f"acknowledged {entry.id}" in out
    [entry] = regression_entries(store)
    assert entry.ack is not None and entry.ack.text == "known: new scheduler in 0.3.36"
    root = ET.fromstring(orch_ok("feed", "--db", path))
    [item] = root.findall(f"{ATOM}entry")
    terms = {c.get("term") for c in item.findall(f"{ATOM}category")}
    assert "acknowledged" in terms and "new" not in terms
    assert "[acknowledged]" in item.find(f"{ATOM}title").text
    assert "acknowledged: known: new scheduler" in orch_ok("history", "--db", path, "-m", "hist")
    report = tmp_path / "report.md"
    orch_ok("report", str(sids[STEP_AT]), "--db", path, "-o", str(report))
    assert f"id {entry.id}, acknowledged: known: new scheduler in 0.3.36" in report.read_text()
    with Receiver() as hook:
        assert check(store, LabAlerts(webhook=hook.url), since=LONG_AGO) == []
        assert hook.bodies == []


def test_the_inventory_lab_key_reaches_the_workers_watcher(tmp_path):
    inventory = tmp_path / "devices.yaml"
    inventory.write_text("lab:\n  webhook: http://127.0.0.1:9/hook\n  silent_after: 90m\n"
                         "devices:\n  box: {kind: local}\n")
    worker = Supervisor(Store.open(str(tmp_path / "orch.db")),
                        WorkerOptions("w1", "unused", "redis://127.0.0.1:1/0", str(inventory)))
    assert worker.watcher.settings.webhook == "http://127.0.0.1:9/hook"
    assert worker.watcher.settings.silent_after == 5400.0
    inventory.write_text("lab:\n  webhook: chat.example/hook\ndevices: {}\n")
    with pytest.raises(ConfigError, match="lab.webhook"):
        load_inventory(str(inventory))
