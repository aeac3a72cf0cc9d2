"""A store for `orch serve`'s tests, written with the store's own API as orch writes it: a
plain `orch run` session with a run recording (tokens added by the test as they would
stream), a failed run whose cause and config are markup, and lab devices in each state."""
from __future__ import annotations

from typing import Any

from orchestrator.db import lab as lab_db
from orchestrator.db.store import Store, now
from orchestrator.db.writes import write_batch

HOSTILE = "<script>alert(1)</script>"


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

    def stream(self, count: int) -> None:
        rows = token_rows(self.run_id, self.tokens, count)
        self.tokens += count
        write_batch(self.store, self.run_id, rows, [], [], self.tokens + 1)
