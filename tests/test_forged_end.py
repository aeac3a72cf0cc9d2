"""A run's end is the supervisor's (docs/reliability.md, "A run's end is the supervisor's"):
an engine that appends an X line to its own spool (and makes a `done` file) does not end its
job. The agent's `attach`, which every reader of a job's end goes through, passes the forged
line on as a W line and follows on to the real end; `status` says running, `kill` still kills.
Under mksh + a toybox-only PATH, dash and bash (tests/agent_helpers.py)."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from device_targets import KINDS, Target, device_target
from agent_helpers import (
    alive,
    attach,
    cleanup_job,
    parse_lines,
    spool_lines,
    start_job,
    tagged_pids,
    wait_for,
    write_job,
)

pytestmark = pytest.mark.timeout(120)

FORGED = "X\t0\t0\t1"
# Appends a forged end (an X line and a `done` holding it) to its own spool, found from the
# job tag every engine is given, then waits for RELEASE ($1) and ends with rc 3 for real.
FORGER = r'''j=${ORCH_JOB%/}
echo before
printf 'X\t0\t0\t1\n' >>"$j/spool"
printf 'X\t0\t0\t1\n' >"$j/done"
while [ ! -e "$1" ]; do sleep 0.05; done
echo after
exit 3
'''


def forged_seen(job: Path) -> bool:
    return ["X", "0", "0", "1"] in spool_lines(job)


def sample_after_warning(followed: Path) -> bool:
    """The follower has passed on the forged line as a W line and an S line after it."""
    tags = [line[0] for line in parse_lines(followed.read_bytes())]
    return "W" in tags and "S" in tags[tags.index("W"):]


@pytest.fixture
def job(tmp_path):
    path = tmp_path / "job0"
    path.mkdir()
    yield path
    cleanup_job(path)


def test_forged_x_line_does_not_end_the_job(shell, job):
    release = job.parent / "release"
    write_job(job, ["sh", "-c", FORGER, "sh", str(release)], {"interval_ms": 100, "run": job.name})
    spid = start_job(shell, job)
    followed = job.parent / "followed"
    with open(followed, "wb") as sink:
        follower = subprocess.Popen(shell.argv("attach", job, "0"), env=shell.environ(),
                                    stdout=sink, stdin=subprocess.DEVNULL)
    try:
        wait_for(lambda: forged_seen(job), timeout=30)
        # the supervisor goes on writing samples after the forged line: the follower passes
        # the forged line on as a W line and does not end
        wait_for(lambda: sample_after_warning(followed), timeout=30)
        assert follower.poll() is None, followed.read_bytes()
        assert shell.run("status", job).stdout.decode().split() == ["running", str(spid)]
        release.touch()
        follower.wait(timeout=30)
    finally:
        release.touch()
        if follower.poll() is None:
            follower.kill()
            follower.wait()
    assert follower.returncode == 0
    lines = parse_lines(followed.read_bytes())
    xs = [line for line in lines if line[0] == "X"]
    assert len(xs) == 1 and xs[0][1:3] == ["3", "0"] and lines[-1] == xs[0]
    warned = ["\t".join(line[1:]) for line in lines if line[0] == "W"]
    assert "a line claiming the end was not the supervisor's: X 0 0 1" in warned
    assert ["O", "after"] in lines
    # one line out per spool line: a re-attach from any point counts the same lines
    assert len(lines) == len(spool_lines(job))
    rc, out = attach(shell, job, 0, timeout=20)
    assert rc == 0 and parse_lines(out) == lines
    assert shell.run("status", job).stdout.decode().strip() == "done"
    wait_for(lambda: not alive(spid), timeout=10)
    assert tagged_pids(f"{job}/") == []


def test_forged_done_is_no_end_for_status_or_kill(shell, job):
    release = job.parent / "release"
    write_job(job, ["sh", "-c", FORGER, "sh", str(release)], {"interval_ms": 100, "run": job.name})
    spid = start_job(shell, job)
    try:
        wait_for(lambda: forged_seen(job) and (job / "engine.pid").exists(), timeout=30)
        epid = int((job / "engine.pid").read_text())
        assert shell.run("status", job).stdout.decode().split() == ["running", str(spid)]
        killed = shell.run("kill", job, timeout=30)
        assert killed.returncode == 0 and b"killed" in killed.stdout, killed
        wait_for(lambda: not alive(epid), timeout=10)
        rc, out = attach(shell, job, 0, timeout=30)
        lines = parse_lines(out)
        assert rc == 0 and lines[-1][0] == "X" and lines[-1][1] != "0", lines
    finally:
        release.touch()


# -- orch itself -------------------------------------------------------------------------------

# A generic engine writing 6 token rows to its CSV, which forges its job's end after 3.
FORGING_MATRIX = """\
name: forged
engine: generic
binary: $SH
engine_options:
  argv: ["{binary}", "-c", "$SCRIPT", "sh", "{csv}"]
  csv_columns: {step: step, wall_ms: wall_ms}
prompt: p
cooldown: 0
sample_interval: 0.1s
configs:
  a: ""
  b: ""
"""
FORGING_SCRIPT = ("j=${ORCH_JOB%/}; echo step,wall_ms > $1; "
                  "for i in 1 2 3; do echo $i,10 >> $1; done; sleep 0.3; "
                  "printf 'X\\t0\\t0\\t1\\n' >> $j/spool; printf 'X\\t0\\t0\\t1\\n' > $j/done; "
                  "sleep 0.3; for i in 4 5 6; do echo $i,10 >> $1; done; sleep 0.3")


@pytest.fixture(params=KINDS)
def target(request, workspace) -> Target:
    return device_target(request, workspace)


def test_orch_run_waits_for_the_real_end(workspace, target):
    """`orch run` on each kind of device: the forged end is a warning, the run is stored with
    all 6 tokens, the next cell runs (no "another orch job runs"), and nothing of the job is
    left running."""
    from cli_helpers import orch
    from sqlalchemy import select

    from orchestrator.db import schema
    from orchestrator.db.store import Store

    (workspace / "m.yaml").write_text(FORGING_MATRIX.replace("$SCRIPT", FORGING_SCRIPT)
                                      .replace("$SH", target.sh))
    runs_dir = target.runs
    try:
        code, output = orch("run", "m.yaml", "--device", target.device)
        assert code == 0, output
        store = Store.open(str(workspace / "orch.db"))
        runs = store.fetch(select(schema.run).order_by(schema.run.c.id))
        assert [run.status for run in runs] == ["ok", "ok"], output
        for run in runs:
            tokens = store.fetch(select(schema.token).where(schema.token.c.run_id == run.id))
            assert len(tokens) == 6, (run.id, output)
            assert any("a line claiming the end was not the supervisor's" in w
                       for w in run.warnings or []), run.warnings
        assert "another orch job runs" not in output
    finally:
        from agent_helpers import stop_jobs_under
        left = stop_jobs_under(runs_dir) if runs_dir.exists() else []
    assert not left, f"processes of the test's runs survived: {left}"
