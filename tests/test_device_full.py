"""A device whose storage fills during a run (docs/agent-protocol.md, "A full device").

The engine's own output fills a 256 KiB tmpfs that holds the device's workdir: the agent can no
longer write the spool's X line, leaves the empty file `spool-full`, and `status` says `full`.
orch marks the run `failed` with the storage as its cause (before: `interrupted`, "the stream
ended without the agent's X line", and `--resume` collected the endless spool instead of running
the cell again). Mounting a tmpfs needs root, which CI has.
"""
from __future__ import annotations

import os
import subprocess
import textwrap
from pathlib import Path

import pytest
from agent_helpers import cleanup_job
from ci import unavailable
from cli_helpers import orch
from sqlalchemy import select

from orchestrator.db import schema
from orchestrator.db.store import Store

pytestmark = pytest.mark.timeout(180)

MATRIX = """\
name: full
engine: generic
binary: /bin/sh
engine_options:
  argv: ["{{binary}}", "-c", "{script}", "sh"]
prompt: p
cooldown: 0
sample_interval: 0.1s
configs:
  a: ""
"""
FILL = "i=0; while [ $i -lt 20000 ]; do echo line $i $i $i $i $i $i $i $i; i=$((i+1)); done"


@pytest.fixture
def small_device(tmp_path: Path, monkeypatch):
    """An inventory whose device `small` has its workdir on a 256 KiB tmpfs."""
    if os.geteuid() != 0:
        unavailable("mounting a small tmpfs needs root")
    workdir = tmp_path / "wd"
    workdir.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(workdir)],
                   check=True, timeout=30)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ORCH_DB", raising=False)
    (tmp_path / "devices.yaml").write_text(
        f"devices:\n  small:\n    kind: local\n    workdir: {workdir}\n")
    try:
        yield workdir
    finally:
        for job in workdir.glob("runs/*"):
            cleanup_job(job)
        subprocess.run(["umount", "-l", str(workdir)], check=True, timeout=30)


def test_a_full_device_fails_the_run_with_its_cause(small_device: Path, tmp_path: Path) -> None:
    (tmp_path / "m.yaml").write_text(textwrap.dedent(MATRIX.format(script=FILL)))
    code, output = orch("run", "m.yaml", "--device", "small")
    assert code == 1, output
    store = Store.open(str(tmp_path / "orch.db"))
    (run,) = store.fetch(select(schema.run))
    assert run.status == "failed", (run.status, run.cause)
    assert "storage was full" in run.cause and "--resume" in run.cause, run.cause
    # with room again, --resume runs the cell again (not a collect of the endless spool)
    for job in small_device.glob("runs/*"):
        (job / "stdout").unlink()
    (tmp_path / "m.yaml").write_text(textwrap.dedent(MATRIX.format(script="echo done")))
    code, output = orch("run", "m.yaml", "--device", "small", "--resume")
    runs = store.fetch(select(schema.run).order_by(schema.run.c.id))
    assert code == 0, output
    assert [r.status for r in runs] == ["failed", "ok"], [(r.status, r.cause) for r in runs]
