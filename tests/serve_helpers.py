"""A store for `orch serve`'s tests, written with the store's own API as orch writes it: a
plain `orch run` session with a run recording (tokens added by the test as they would
stream), a failed run whose cause and config are markup, and lab devices in each state."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from agent_helpers import alive
from waiting import wait_for

from orchestrator.db import lab as lab_db
from orchestrator.db.store import Store, now
from orchestrator.db.writes import write_batch

HOSTILE = "<script>alert(1)</script>"
ORCH = Path(sys.executable).with_name("orch")


def token_rows(run_id: int, start: int, count: int, wall_ms: float = 50.0) -> list[tuple[Any, ...]]:
    # TOKEN_KEYS: run_id, seq, step, wall_ms, io_ms, compute_ms, stall_ms, mgmt_ms,
    # read_bytes, cache_hit_pct, majflt, cpu_ms, turn, extra
    return [(run_id, seq, seq + 1, wall_ms, 1.0, 2.0, 0.5, 0.1, 4096, 50.0, 0.0, 3.0, None, None)
            for seq in range(start, start + count)]


def sample_row(run_id: int, seq: int, temp_mc: int, avail_kb: int) -> dict[str, Any]:
    return {"run_id": run_id, "seq": seq, "t_ms": 250 * seq, "rss_kb": 1000, "hwm_kb": 1000,
            "mem_avail_kb": avail_kb, "majflt": 0, "cpu_ticks": 1, "cpu_temp_mC": temp_mc,
            "batt_temp_dC": None, "turn": None, "extra": None}


class LiveStore:
    """The store and its running run; `stream(n)` stores n more tokens of it."""

    def __init__(self, path: str) -> None:
        self.store = Store.open(path)
        store = self.store
        local = store.upsert_device("local", "local")
        session = store.create_session(kind="run", name="live", matrix_name="local-matrix",
                                       started_at=now())
        self.session = session
        self.run_id = store.create_run(
            uid="u-running", session_id=session, device_id=local, cell_key="m|probe|r0",
            model="m", config="probe", flags="--x", repeat_index=0, order_index=0,
            status="running", engine="moe-probe", superseded=False, started_at=now())
        self.tokens = 0
        write_batch(store, self.run_id, [], [sample_row(self.run_id, 0, 48500, 2_048_000)], [], 1)
        failed = store.create_run(
            uid="u-failed", session_id=session, device_id=local, cell_key=f"m|{HOSTILE}|r0",
            model="m", config=HOSTILE, flags=None, repeat_index=0, order_index=1,
            status="failed", cause=f"engine said {HOSTILE}", rc=1, engine="moe-probe",
            superseded=False, started_at=now(), ended_at=now())
        self.failed_id = failed
        lab_db.register_device(store, "phone-q", "adb", "w1", "host1")
        lab_db.update_device(store, "phone-q", state=lab_db.QUARANTINED,
                             reason=f"unreachable {HOSTILE}", failures=3)
        lab_db.register_device(store, "phone-lost", "adb", "w1", "host1")   # no heartbeat
        # a consumer that lives (this process's pid, a fresh heartbeat): idle, and cooling
        # with a cell taken whose run has not begun
        for name in ("phone-idle", "phone-cool"):
            lab_db.register_device(store, name, "adb", "w2", "host2")
            lab_db.update_device(store, name, pid=os.getpid(), seen_at=now())
        batch = lab_db.create_batch(store, matrix_name="phones")
        cool = store.create_session(kind="run", name="phones-cool", matrix_name="phones")
        cells = lab_db.insert_cells(store, [
            {"batch_id": batch, "session_id": cool, "device": "phone-cool", "cell_key": key,
             "position": i, "state": "delivered" if i == 0 else "queued", "attempts": 0}
            for i, key in enumerate(["m|a|r0", f"m|{HOSTILE}|r0", "m|c|r0"])])
        lab_db.update_device(store, "phone-cool", current_cell_id=cells[0])

    def stream(self, count: int) -> None:
        rows = token_rows(self.run_id, self.tokens, count)
        self.tokens += count
        write_batch(self.store, self.run_id, rows, [], [], self.tokens + 1)


class Server:
    """`orch serve --port 0` in its own process group; `url` once it listens (its first
    stderr line names the port). stop(): SIGTERM, bounded wait, then SIGKILL of the group."""

    def __init__(self, workspace: Path, db: str, *options: str,
                 env: dict[str, str] | None = None) -> None:
        self.err = workspace / "serve.err"
        self.env = None if env is None else {**os.environ, **env}
        self.argv = [str(ORCH), "serve", "--db", db, "--port", "0", *options]
        self.proc: subprocess.Popen | None = None
        self.url = ""

    def start(self, timeout: float = 60) -> Server:
        with open(self.err, "wb") as err:
            self.proc = subprocess.Popen(self.argv, stdout=subprocess.DEVNULL, stderr=err,
                                         stdin=subprocess.DEVNULL, start_new_session=True,
                                         env=self.env)
        found = wait_for(lambda: self.proc.poll() is not None
                         or re.search(r"http://(127\.0\.0\.1:\d+)/lab", self.err.read_text()),
                         timeout, what="orch serve to listen",
                         on_fail=lambda: self.err.read_text())
        assert self.proc.poll() is None, self.err.read_text()
        self.url = "http://" + found.group(1)
        return self

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=30)
        return self.proc.returncode

    def survivors(self) -> list[int]:
        """Processes of the server's group still alive (none once it stopped)."""
        assert self.proc is not None
        out = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    if os.getpgid(int(entry.name)) == self.proc.pid and alive(int(entry.name)):
                        out.append(int(entry.name))
                except OSError:
                    continue
        return out
