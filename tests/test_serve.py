"""`orch serve` (docs/serve.md): the real server (uvicorn, in its own process on 127.0.0.1
with a free port) over a store written with the store's API: the JSON endpoints, every device
state, paths outside its pages refused, a store it cannot open (one line, exit 2), the warning
for a non-loopback --host, and in the system Chromium (Playwright) the lab page showing a
running cell's token count rise as tokens are stored, names shown as text, no console error
and no request leaving 127.0.0.1. Every server is stopped and checked gone."""
from __future__ import annotations

import http.client
import json
import subprocess
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest
from serve_helpers import HOSTILE, ORCH, LiveStore, Server
from waiting import wait_for

from orchestrator.cli.serve import is_loopback
from orchestrator.db.store import Store
from orchestrator.lab.live import device_state

pytestmark = [pytest.mark.extra("serve"), pytest.mark.timeout(180)]
CHROMIUM = "/usr/bin/chromium"


@pytest.fixture
def live(tmp_path: Path) -> LiveStore:
    return LiveStore(str(tmp_path / "orch.db"))


@pytest.fixture
def server(tmp_path: Path, live: LiveStore) -> Iterator[Server]:
    srv = Server(tmp_path, str(tmp_path / "orch.db")).start()
    try:
        yield srv
    finally:
        srv.stop()
        assert srv.survivors() == []


def get(server: Server, path: str, method: str = "GET") -> tuple[int, bytes, str]:
    """One request of `path` sent as it is (no client-side normalising of `..`)."""
    parts = urllib.parse.urlsplit(server.url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    try:
        conn.request(method, path)
        response = conn.getresponse()
        return response.status, response.read(), response.getheader("content-type") or ""
    finally:
        conn.close()


def api(server: Server, path: str) -> object:
    status, body, kind = get(server, path)
    assert status == 200 and kind.startswith("application/json"), (path, status, body[:200])
    return json.loads(body)


@pytest.mark.slow
def test_api_gives_every_device_state_runs_sessions_and_failures(server, live):
    live.stream(40)
    lab = api(server, "/api/lab")
    states = {d["device"]: d["state"] for d in lab["devices"]}
    assert states == {"local": "running", "phone-lost": "lost", "phone-q": "quarantined",
                      "phone-idle": "idle", "phone-cool": "cooling"}
    local = next(d for d in lab["devices"] if d["device"] == "local")
    (running,) = local["running"]
    assert running["run_id"] == live.run_id and running["tokens"] == 40
    assert running["tok_s"] == pytest.approx(20.0)         # 50 ms a token
    assert local["sample"]["temp_c"] == 48.5 and local["sample"]["mem_avail_mib"] == 2000.0
    cool = next(d for d in lab["devices"] if d["device"] == "phone-cool")
    assert [c["cell_key"] for c in cool["queue"]] == ["m|a|r0", f"m|{HOSTILE}|r0", "m|c|r0"]
    assert cool["lab"]["waiting"] == 3
    (failure,) = lab["failures"]
    assert failure["run_id"] == live.failed_id and failure["cause"] == f"engine said {HOSTILE}"

    devices = api(server, "/api/devices")
    assert [d["device"] for d in devices] == ["local"]
    sessions = api(server, "/api/sessions")
    assert sessions[-1]["session_id"] == live.session
    assert sessions[-1]["status_counts"] == {"running": 1, "failed": 1}
    assert get(server, "/api/sessions?limit=0")[0] == 400
    run = api(server, f"/api/runs/{live.failed_id}")
    assert run["run"]["config"] == HOSTILE and run["run"]["status"] == "failed"
    assert api(server, f"/api/runs/{live.run_id}")["tokens"] == 40
    assert get(server, "/api/runs/999")[0] == 404
    # a name that is not this machine's (DNS rebinding) is not answered
    parts = urllib.parse.urlsplit(server.url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    conn.request("GET", "/api/lab", headers={"Host": f"attacker.example:{parts.port}"})
    assert conn.getresponse().status == 400
    conn.close()
    # read-only: nothing but GET (and HEAD)
    assert {get(server, p, m)[0] for p in ("/api/lab", "/lab") for m in ("POST", "PUT", "DELETE")} \
        == {405}

    status, page, kind = get(server, "/lab")
    assert status == 200 and kind.startswith("text/html")
    assert HOSTILE.encode() not in page and b"<script>alert" not in page   # JSON-in-HTML escaped


@pytest.mark.slow
@pytest.mark.parametrize("path", [
    "/../pyproject.toml", "/_serve/../app.py", "/_serve/../../cli/serve.py",
    "/_serve/%2e%2e/app.py", "/_serve/..%2fapp.py", "/_serve/%2e%2e%2f%2e%2e%2fdb/store.py",
    "/_serve/..%5capp.py", "/_serve//etc/passwd", "/_serve/%2fetc%2fpasswd", "//etc/passwd",
    "/%2e%2e/%2e%2e/%2e%2e/etc/passwd", "/etc/passwd", "/lab/../../etc/passwd",
])
def test_paths_outside_its_pages_are_refused(server, path):
    status, body, _ = get(server, path)
    assert status == 404, (path, status)
    assert b"root:" not in body and b"import" not in body
    assert get(server, "/_serve/lab.js")[0] == 200


@pytest.mark.parametrize("content", [None, b"this is not a database\n" * 100])
def test_a_store_it_cannot_open_is_one_line_and_exit_2(tmp_path, content):
    db = tmp_path / "orch.db"
    if content is not None:
        db.write_bytes(content)
    done = subprocess.run([str(ORCH), "serve", "--db", str(db), "--port", "0"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done
    assert len(done.stderr.strip().splitlines()) == 1 and str(db) in done.stderr


def test_a_non_loopback_host_is_said_before_listening(tmp_path, live):
    # 192.0.2.1 (TEST-NET-1) is no address of this machine: the warning comes first, then
    # the bind fails (exit 2), so nothing ever listens beyond loopback in this test
    done = subprocess.run([str(ORCH), "serve", "--db", str(tmp_path / "orch.db"), "--port", "0",
                           "--host", "192.0.2.1"], capture_output=True, text=True, timeout=60)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 2, done
    assert lines[0].startswith("warning: --host 192.0.2.1 is not a loopback address")
    assert "reachable from that network" in lines[0]
    assert lines[1].startswith("error: cannot listen on 192.0.2.1:0")


def test_loopback_hosts_and_device_states():
    assert all(is_loopback(h) for h in ("127.0.0.1", "127.3.2.1", "::1", "[::1]", "localhost"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "::", "192.168.1.2", "lab.example"))
    lab = {"state": "active", "alive": True, "running": None}
    assert device_state(None, []) == "idle"
    assert device_state(None, [{"run_id": 1}]) == "running"
    assert device_state(lab, []) == "idle"
    assert device_state({**lab, "running": "c (session 1)"}, []) == "cooling"
    assert device_state({**lab, "alive": False}, [{"run_id": 1}]) == "lost"
    assert device_state({**lab, "state": "quarantined"}, [{"run_id": 1}]) == "quarantined"


@pytest.mark.slow
def test_the_lab_page_shows_tokens_rise_as_they_stream(server, live, tmp_path):
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).is_file():
        pytest.fail(f"{CHROMIUM} is missing (scripts/install --test installs chromium)")
    live.stream(10)
    problems: list[str] = []
    requests: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page()
            page.on("console", lambda m: m.type == "error" and problems.append(m.text))
            page.on("pageerror", lambda e: problems.append(str(e)))
            page.on("dialog", lambda d: problems.append(f"dialog: {d.message}"))
            page.on("request", lambda r: requests.append(r.url))
            page.goto(server.url + "/lab")
            tokens = page.locator('tr[data-device="local"] td.tokens')
            assert tokens.inner_text() == "10"
            for count in (35, 80):
                live.stream(count - live.tokens)
                page.wait_for_function(
                    "n => document.querySelector('tr[data-device=\"local\"] td.tokens')"
                    ".textContent === String(n)", arg=count, timeout=30_000)
            assert page.locator('tr[data-device="local"] td.tok-s').inner_text() == "20.00"
            # markup in a cause, a cell and a health line shows as its characters
            assert HOSTILE in page.locator("#failures").inner_text()
            assert HOSTILE in page.locator('tr[data-device="phone-q"]').inner_text()
            assert page.locator("#failures script, #devices script").count() == 0
            page.screenshot(path=str(tmp_path / "lab.png"), full_page=True)
        finally:
            browser.close()
    assert problems == []
    hosts = {urllib.parse.urlsplit(u).hostname for u in requests}
    assert hosts == {"127.0.0.1"}, requests


@pytest.mark.slow
def test_the_site_pages_are_served_and_rebuilt_when_the_store_changes(tmp_path, live):
    import importlib.util

    if importlib.util.find_spec("orchestrator.site") is None:
        pytest.skip("this orch has no orchestrator.site (`orch site`): no site pages to serve")
    temp = tmp_path / "tmp"       # where the server builds the site: removed when it stops
    temp.mkdir()
    srv = Server(tmp_path, str(tmp_path / "orch.db"), env={"TMPDIR": str(temp)}).start()
    try:
        assert [p.name[:11] for p in temp.iterdir()] == ["orch-serve-"]
        status, index, kind = get(srv, "/")
        assert status == 200 and kind.startswith("text/html")
        assert get(srv, "/index.html")[1] == index
        assert get(srv, "/../index.html")[0] == 404
        assert b"later-session" not in index
        live.store.create_session(kind="run", name="later-session", matrix_name="local-matrix")
        wait_for(lambda: b"later-session" in get(srv, "/")[1], 30, 0.2,
                 what="the index rebuilt with the new session")
    finally:
        srv.stop()
        assert srv.survivors() == []
    assert list(temp.iterdir()) == []


@pytest.mark.slow
def test_a_plain_orch_run_shows_its_running_cell_and_tokens(workspace):
    # the fake bmoe engine: 60 tokens of 0.1 s each, one cell, on the inventory's `local`
    from lab_helpers import matrix

    path = matrix(workspace, "plain", tokens=60, delay=0.1, repeat=1)
    path.write_text(path.read_text().replace("  second: --delay 0.05\n", ""))
    Store.open(str(workspace / "orch.db"))
    srv = Server(workspace, str(workspace / "orch.db")).start()
    run = subprocess.Popen([str(ORCH), "run", str(path), "--db", str(workspace / "orch.db")],
                           cwd=workspace, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        def local(lab: dict) -> dict:
            return next((d for d in lab["devices"] if d["device"] == "local"), {})

        seen = wait_for(lambda: (d := local(api(srv, "/api/lab"))).get("running")
                        and d["running"][0]["tokens"] > 0 and d, 60, 0.2,
                        what="the run's first tokens on /api/lab")
        assert seen["state"] == "running" and seen["lab"] is None
        first = seen["running"][0]
        assert first["cell_key"].startswith("m|first") and first["matrix"] == "plain"
        later = wait_for(lambda: (r := local(api(srv, "/api/lab"))["running"])
                         and r[0]["tokens"] > first["tokens"] and r[0], 60, 0.2,
                         what="more tokens of the same run")
        assert later["run_id"] == first["run_id"] and later["tok_s"] > 0
        out, _ = run.communicate(timeout=120)
        assert run.returncode == 0, out
        done = local(api(srv, "/api/lab"))
        assert done["state"] == "idle" and done["running"] == []
        assert api(srv, f"/api/runs/{first['run_id']}")["tokens"] == 60
    finally:
        if run.poll() is None:
            run.kill()
            run.wait(timeout=30)
        srv.stop()
        assert srv.survivors() == []


@pytest.mark.slow
def test_the_api_over_a_postgresql_store(pg_url, tmp_path):
    # a lab's store is PostgreSQL: the same data over the server as from SQLite
    from pg_fixture import fresh_pg_database

    url = fresh_pg_database(pg_url, "serve_api")
    live = LiveStore(url)
    live.stream(25)
    srv = Server(tmp_path, url).start()
    try:
        lab = api(srv, "/api/lab")
        states = {d["device"]: d["state"] for d in lab["devices"]}
        assert states["local"] == "running" and states["phone-cool"] == "cooling"
        assert states["phone-q"] == "quarantined" and states["phone-lost"] == "lost"
        local = next(d for d in lab["devices"] if d["device"] == "local")
        assert local["running"][0]["tokens"] == 25 and local["sample"]["temp_c"] == 48.5
        cool = next(d for d in lab["devices"] if d["device"] == "phone-cool")
        assert len(cool["queue"]) == 3
        assert api(srv, "/api/sessions")[-1]["status_counts"] == {"running": 1, "failed": 1}
        assert api(srv, f"/api/runs/{live.failed_id}")["run"]["cause"] == f"engine said {HOSTILE}"
    finally:
        srv.stop()
        assert srv.survivors() == []
