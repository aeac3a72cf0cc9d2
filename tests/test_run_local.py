"""`orch run` end to end on local devices: the CLI, the agent, the store, the adapters."""
from __future__ import annotations

import os
import signal
import textwrap
import threading
from pathlib import Path

import pytest
from cli_helpers import SMALL_PROBE_MATRIX, orch
from sqlalchemy import func, select, text
from waiting import wait_for

from orchestrator.db import schema
from orchestrator.db.figures import compute_rows
from orchestrator.db.runs import Runs
from orchestrator.db.store import Store
from orchestrator.record import load_record

HOSTILE = "it's \"quoted\" $(touch /tmp/pwned) `id` ; rm -rf / \n\tnew line € 日本\n"




def write_matrix(path: Path, body: str) -> Path:
    path.write_text(textwrap.dedent(body))
    return path


PROBE = SMALL_PROBE_MATRIX


def test_moe_probe_matrix_end_to_end(workspace):
    matrix = write_matrix(workspace / "m.yaml", PROBE)
    code, out = orch("run", str(matrix))
    assert code == 0, out
    store = Store.open("orch.db")
    sessions = store.fetch(select(schema.session))
    assert len(sessions) == 1 and sessions[0].matrix_sha256
    runs = Runs(store).current(sessions[0].id)
    assert [r.status for r in runs] == ["ok", "ok"]
    for run in runs:
        assert len(store.frame("token", [run.id])) == 12
        samples = store.fetch(select(func.count()).select_from(schema.sample)
                              .where(schema.sample.c.run_id == run.id))[0][0]
        assert samples >= 1
        assert load_record(run.summary).tokens == 12
        # the run's figures, stored by the runner's _finish: the computed ones
        assert run.stored_figures is not None and run.stored_figures.n == 12
        with store.reading() as conn:
            assert run.stored_figures == compute_rows(conn, [run])[run.id]
    device = store.device_by_name("local")
    assert int(device.facts["cores"]) >= 1
    code, out = orch("runs")
    assert code == 0 and "c0" in out and "c1" in out
    code, out = orch("show", str(runs[0].id))
    assert code == 0 and "mean tok/s" in out


def test_bad_matrix_exits_2_and_writes_nothing(workspace):
    matrix = write_matrix(workspace / "bad.yaml", PROBE.replace(
        "c1: --io mmap", "c2000: 2000\n      c1: --io mmap"))
    code, out = orch("run", str(matrix))
    assert code == 2
    assert f"{matrix}:9: configs.c2000: expected a string" in out
    assert not (workspace / "orch.db").exists()


def test_hostile_prompt_reaches_engine_byte_exact(workspace):
    record = workspace / "prompt.out"
    (workspace / "prompt.txt").write_text(HOSTILE, encoding="utf-8")
    matrix = write_matrix(workspace / "h.yaml", f"""\
        name: hostile
        engine: bmoe
        binary: {{local: fake_bmoe.sh}}
        models: {{m: /nonexistent/model.gguf}}
        prompt_file: prompt.txt
        tokens: 3
        configs:
          only: --record {record}
        """)
    code, out = orch("run", str(matrix))
    assert code == 0, out
    assert record.read_bytes() == HOSTILE.encode("utf-8")
    assert not Path("/tmp/pwned").exists()


def _engine_pid(workdir: Path, timeout: float) -> int:
    """The pid of the first engine that has written a few token rows."""
    def started() -> int | None:
        for pid_file in workdir.glob("runs/*/engine.pid"):
            text_ = pid_file.read_text().strip()
            csv = pid_file.parent / "tokens.csv"
            if text_ and csv.exists() and csv.read_text().count("\n") >= 4:
                return int(text_)
        return None
    return wait_for(started, timeout, what="the engine's first rows")


@pytest.mark.slow
def test_sigkill_gives_killed_with_rows_kept_and_timeout_goes_on(workspace):
    matrix = write_matrix(workspace / "k.yaml", """\
        name: killer
        engine: bmoe
        binary: {local: fake_bmoe.sh}
        models: {m: /m.gguf}
        prompt: p
        tokens: 400
        timeout: 6s
        sample_interval: 0.2s
        configs:
          victim: --delay 0.05
          slow: --hang --delay 0.2
          after: --delay 0
        """)
    killer = threading.Thread(target=lambda: os.kill(
        _engine_pid(workspace / "dev-local", 30), signal.SIGKILL))
    killer.start()
    code, out = orch("run", str(matrix))
    killer.join()
    assert code == 1
    store = Store.open("orch.db")
    runs = {r.config: r for r in Runs(store).current(store.fetch(select(schema.session))[0].id)}
    assert runs["victim"].status == "killed" and runs["victim"].signal == 9
    assert 2 <= len(store.frame("token", [runs["victim"].id])) < 400
    assert runs["slow"].status == "timeout"
    assert runs["after"].status == "ok" and len(store.frame("token", [runs["after"].id])) == 400
    assert "†" in out


def test_resume_reruns_only_cells_not_ok(workspace):
    flag = workspace / "fail-now"
    flag.write_text("x")
    matrix = write_matrix(workspace / "r.yaml", f"""\
        name: resumable
        engine: bmoe
        binary: {{local: fake_bmoe.sh}}
        models: {{m: /m.gguf}}
        prompt: p
        tokens: 5
        configs:
          good: --delay 0.01
          flaky: --delay 0.01 --fail-if {flag}
        """)
    code, _ = orch("run", str(matrix))
    assert code == 1
    store = Store.open("orch.db")
    first = {r.config: r for r in Runs(store).current()}
    assert first["flaky"].status == "failed" and first["flaky"].rc == 7
    flag.unlink()
    code, out = orch("run", str(matrix), "--resume")
    assert code == 0, out
    assert "1 already ok" in out
    session_ids = {s.id for s in store.fetch(select(schema.session))}
    assert len(session_ids) == 1
    current = {r.config: r for r in Runs(store).current()}
    assert current["good"].id == first["good"].id
    assert current["flaky"].status == "ok" and current["flaky"].id != first["flaky"].id
    assert len(store.frame("token", [current["flaky"].id])) == 5
    assert len(store.frame("token", [current["good"].id])) == 5
    with store.engine.connect() as conn:
        dupes = conn.execute(text("SELECT run_id, step, count(*) FROM token GROUP BY run_id, step "
                                  "HAVING count(*) > 1")).fetchall()
    assert dupes == []


def test_second_local_device_has_its_own_workdir(workspace):
    matrix = write_matrix(workspace / "m.yaml", PROBE)
    code, out = orch("run", str(matrix), "--device", "other")
    assert code == 0, out
    assert list((workspace / "dev-other").glob("runs/*/spool"))
    assert not (workspace / "dev-local").exists()


def test_devices_probe_lists_facts(workspace):
    code, out = orch("devices", "--probe")
    assert code == 0, out
    assert "local" in out and "other" in out and "mem_total_kb" in out
