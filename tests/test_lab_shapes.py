"""Every matrix shape `orch run` accepts runs in the lab (docs/lab.md, "What the lab runs"):
models and binaries `{local: FILE}` (as matrices/phone.yaml suggests for a phone), device
paths, several models, grids, pairs, builds-free llama-style flags; and a lab cell that fails
keeps its cause: stored on the cell (`lab_cell.error`) and on its run where one was started,
shown by `orch lab status`, `orch lab wait` and the report, grouped when many cells fail
alike. Real Redis and PostgreSQL, `orch lab worker` processes, local devices."""
from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path

import pytest
from cli_helpers import orch
from lab_helpers import TESTS, inventory, processes_mentioning, registered, wait_for
from sqlalchemy import text
from test_lab import _runs, lab  # noqa: F401 - the lab fixture: workers, store, broker

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("lab")]

SHAPES = {
    # phone.yaml's shape with the files pushed by orch: `{local: FILE}` binary and models
    "local-files": """\
        name: local-files
        engine: bmoe
        binary: {local: fake_bmoe.sh}
        models:
          qwen: {local: qwen.gguf}
          gemma: {local: gemma.gguf}
        prompt: p
        tokens: 6
        order: as-written
        sample_interval: 0.2s
        configs:
          mmap: --delay 0
          stream: --delay 0.01
        """,
    # matrices/local.yaml: orch's built-in moe-probe engine, no binary, no model
    "moe-probe": """\
        name: probe
        engine: moe-probe
        prompt: hello experts
        tokens: 6
        cooldown: 0
        sample_interval: 0.2s
        baseline: c0
        configs:
          c0: --io pread --cache-mb 0 --layers 4 --experts 8 --expert-mb 0.0625 --top-k 2
          c1: --io mmap --cache-mb 1 --layers 4 --experts 8 --expert-mb 0.0625 --top-k 2
        """,
    # matrices/routes.yaml: route traces fetched from the device
    "routes": """\
        name: routes
        engine: moe-probe
        prompt: hello experts
        tokens: 6
        cooldown: 0
        sample_interval: 0.2s
        route_trace: true
        configs:
          skewed: --skew 1.2 --keep-frac 0.36 --cache-mb 1 --layers 4 --experts 16 --expert-mb 0.0625 --top-k 2 --compute-kb 1
        """,
    # matrices/session.yaml: a multi-turn session
    "session": """\
        name: session
        engine: moe-probe
        tokens: 6
        cooldown: 0s
        sample_interval: 0.2s
        session:
          - prompt: "first turn"
          - prompt: "second turn"
        configs:
          pread: --io pread --cache-mb 1 --io-threads 1 --layers 4 --experts 8 --expert-mb 0.0625 --top-k 2 --compute-kb 1
        """,
    # device paths for models, a grid and an A/B pair, interleaved repeats
    "grid-pairs": """\
        name: grid-pairs
        engine: bmoe
        binary: {local: fake_bmoe.sh}
        models: {m: /m.gguf}
        prompt: p
        tokens: 6
        repeat: 2
        order: interleaved
        sample_interval: 0.2s
        grid:
          --delay: ["0", "0.01"]
        """,
}


def _workspace_files(ws: Path) -> None:
    shutil.copy(TESTS / "engines" / "fake_bmoe.sh", ws / "fake_bmoe.sh")
    (ws / "fake_bmoe.sh").chmod(0o755)
    for name in ("qwen.gguf", "gemma.gguf"):
        (ws / name).write_bytes(b"GGUF" + name.encode() * 64)


def _nothing_left(ws: Path, *workers) -> None:
    for worker in workers:
        worker.stop()
    wait_for("no engine, agent or consumer left", lambda: not processes_mentioning(str(ws)),
             timeout=30, on_fail=lambda: f"left: {processes_mentioning(str(ws))}")


def _run_ok_in_lab(lab, m: Path, worker_name: str, device: str):
    """`m` submitted to a worker of its own for `device`, waited for, all ok: (worker, the
    output of `lab wait`)."""
    ws, store, start = lab
    worker = start(worker_name, inventory(ws, "inv", [device]))
    wait_for("the consumer", lambda: registered(store, [device]), on_fail=worker.log)
    code, out = orch("lab", "submit", str(m), "-d", device)
    assert code == 0, out
    code, out = orch("lab", "wait")
    assert code == 0, out + worker.log()
    return worker, out


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_a_shape_orch_run_accepts_runs_in_the_lab(lab, shape):
    ws, store, _ = lab
    _workspace_files(ws)
    m = ws / f"{shape}.yaml"
    m.write_text(textwrap.dedent(SHAPES[shape]))
    worker, _ = _run_ok_in_lab(lab, m, "ws", "s1")
    runs = _runs(store)
    tokens = 12 if shape == "session" else 6     # a session: 6 tokens per turn
    assert runs and all(r.status == "ok" and r.tokens == tokens for r in runs), runs
    cells = store.fetch(text("SELECT state, error FROM lab_cell"))
    assert len(cells) == len(runs) and all(c.state == "ok" and c.error is None for c in cells)
    _nothing_left(ws, worker)


FAILING = """\
    name: failing
    engine: bmoe
    binary: {{local: fake_bmoe.sh}}
    models: {{m: {{local: model.gguf}}}}
    prompt: p
    tokens: 6
    repeat: 2
    sample_interval: 0.2s
    configs:
      first: --delay 0
      second: --delay 0 --fail-if {always}
    """


def _submit_and_wait(ws: Path, m: Path, device: str) -> str:
    code, out = orch("lab", "submit", str(m), "-d", device)
    assert code == 0, out
    code, out = orch("lab", "wait")
    assert code == 1, out
    return out


def test_a_failed_cell_shows_its_cause_in_status_wait_and_report(lab):
    """Cells that fail keep their cause, said once per cause by `lab wait`, `lab status` and
    the report: (1) a config whose engine fails: two runs, their cause; (2) a matrix the
    device cannot run (a cooldown relative to an idle baseline it has not measured): every
    cell fails before a run starts, the cause only on the cells (it used to be in the
    worker's log alone)."""
    ws, store, start = lab
    _workspace_files(ws)
    (ws / "model.gguf").write_bytes(b"GGUF" + b"m" * 64)
    (ws / "always").write_text("")
    m = ws / "failing.yaml"
    m.write_text(textwrap.dedent(FAILING.format(always=ws / "always")))
    worker = start("wf", inventory(ws, "inv", ["f1"]))
    wait_for("the consumer", lambda: registered(store, ["f1"]), on_fail=worker.log)

    out = _submit_and_wait(ws, m, "f1")
    failed = store.fetch(text("SELECT c.error, r.cause, r.status FROM lab_cell c "
                              "JOIN run r ON r.id = c.run_id WHERE c.state = 'failed'"))
    assert len(failed) == 2 and all(f.error == f.cause and f.cause for f in failed), failed
    line = f"2 cells failed: {failed[0].cause}"
    assert out.count(line) == 1, out + worker.log()
    code, out = orch("lab", "status")
    assert code == 0 and out.count(line) == 1, out

    # not calibrated: a cooldown relative to the idle baseline cannot run on this device
    uncalibrated = ws / "uncalibrated.yaml"
    uncalibrated.write_text(m.read_text().replace(
        "sample_interval: 0.2s", "sample_interval: 0.2s\ncooldown: {until: baseline+2C, "
        "sensor: cpu, min: 0s, max: 30s, interval: 0.1s}"))
    out = _submit_and_wait(ws, uncalibrated, "f1")
    batch = store.fetch(text("SELECT max(batch_id) FROM lab_cell"))[0][0]
    cells = store.fetch(text(f"SELECT state, error, run_id, session_id FROM lab_cell "
                             f"WHERE batch_id = {batch}"))
    assert len(cells) == 4 and all(c.state == "failed" and c.error and c.run_id is None
                                   for c in cells), cells
    cause = cells[0].error
    assert "orch calibrate --device f1" in cause, cause
    assert len({c.error for c in cells}) == 1
    line = f"4 cells failed: {cause} (on f1)"
    assert out.count(line) == 1, out
    assert f"session {cells[0].session_id}:" not in out, out   # no empty table before it
    code, out = orch("lab", "status")
    assert code == 0 and out.count(line) == 1, out
    rows = json.loads(orch("lab", "status", "--format", "json")[1])
    assert rows[0]["failed"] == 4 and rows[0]["failures"] == [{"cause": cause, "cells": 4}]
    code, out = orch("report", str(cells[0].session_id), "--no-plots")
    assert code == 2 and out.count(f"4 cells failed: {cause}") == 1, out
    _nothing_left(ws, worker)


def test_a_forged_end_is_no_end_in_the_lab(lab):
    """An engine that appends an X line (and a `done`) to its own spool mid-cell, in the lab
    (docs/reliability.md, "A run's end is the supervisor's"): the consumer waits for the real
    end, so each run holds all 6 tokens and the forged line as a warning, the next cell runs
    (no "another orch job runs"), every cell is ok, and nothing is left running."""
    from test_forged_end import FORGING_MATRIX, FORGING_SCRIPT

    ws, store, _ = lab
    m = ws / "forged.yaml"
    m.write_text(FORGING_MATRIX.replace("$SCRIPT", FORGING_SCRIPT).replace("$SH", "/bin/sh"))
    worker, out = _run_ok_in_lab(lab, m, "wx", "x1")
    runs = _runs(store)
    assert len(runs) == 2 and all(r.status == "ok" and r.tokens == 6 for r in runs), runs
    warnings = store.fetch(text("SELECT warnings FROM run"))
    assert all(any("a line claiming the end was not the supervisor's" in w
                   for w in (json.loads(r.warnings) if isinstance(r.warnings, str)
                             else r.warnings or [])) for r in warnings), warnings
    assert "another orch job runs" not in out + worker.log()
    cells = store.fetch(text("SELECT state FROM lab_cell"))
    assert [c.state for c in cells] == ["ok", "ok"], cells
    _nothing_left(ws, worker)
