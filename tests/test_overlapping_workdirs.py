"""Overlapping device workdirs (docs/reliability.md, "Overlapping workdirs").

Two devices on one machine, one's workdir inside the other's runs folder: the outer one's
`reap` used to stop every process whose job tag *started with* its runs folder, the inner
device's live engine among them, and that run was stored `killed (signal 15)`. Now the agent
takes as its own only a tag that is exactly one of its runs folder's job paths (a regular
expression with the path escaped: a path with `.`, `[`, `*` in it matches only itself), and
the inventory refuses such a pair at load, as it refuses a workdir that is a system folder.
The agent tests run under mksh with a toybox-only PATH, dash and bash."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from agent_helpers import alive, cleanup_job, start_job, tagged_pids, write_job
from cli_helpers import orch
from sqlalchemy import select
from waiting import wait_for, wait_until

from orchestrator.config.inventory import load_inventory
from orchestrator.config.workdirs import system_folder, workdir_problems
from orchestrator.db import schema
from orchestrator.db.store import Store
from orchestrator.errors import ConfigError
from orchestrator.plugins import device_kind

pytestmark = pytest.mark.timeout(180)


def _job(runs: Path, name: str, script: str) -> Path:
    job = runs / name
    job.mkdir(parents=True)
    write_job(job, ["sh", "-c", script], {"interval_ms": 100, "run": name})
    return job


@pytest.fixture
def area(tmp_path):
    """A folder for the devices' workdirs; every job under it is stopped at teardown, and
    the test fails if anything tagged with one of them outlived its checks."""
    yield tmp_path
    jobs = [p.parent for p in tmp_path.rglob("spool")]
    for job in jobs:
        cleanup_job(job)
    # what cleanup_job killed may take a moment to go: only what stays is a survivor
    wait_until(lambda: not tagged_pids(f"{tmp_path}/", prefix=True), 10)
    left = tagged_pids(f"{tmp_path}/", prefix=True)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, f"processes of the test's jobs survived: {left}"


def test_reap_leaves_the_jobs_of_a_workdir_inside_its_runs_folder(shell, area):
    """The inner device's live job under OUTER/runs/inner/runs/: the outer's `jobs` does
    not list it, its `reap` does not stop it."""
    outer = area / "outer" / "runs"
    inner = _job(outer / "inner" / "runs", "j", "sleep 300")
    spid = start_job(shell, inner)
    wait_for(lambda: tagged_pids(f"{inner}/"), timeout=30, what="the inner engine")
    assert shell.run("jobs", outer).stdout.decode().splitlines() == ["end"]
    assert shell.run("reap", outer, timeout=30).stdout.decode().splitlines() == ["end"]
    assert alive(spid) and tagged_pids(f"{inner}/")
    assert shell.run("kill", inner, timeout=30).returncode == 0


def test_a_runs_path_with_pattern_characters_matches_only_itself(shell, area):
    """The outer runs folder `a.b[1]*/runs`: as a pattern it would match `aXb1/runs` too.
    A lost job of that other folder (supervisor killed: its engine a stray there) is not
    this folder's; a lost job of this folder is, and `reap` stops it."""
    other = _job(area / "aXb1" / "runs", "j", "sleep 301")
    mine = _job(area / "a.b[1]*" / "runs", "k", "sleep 302")
    pids = {}
    for job in (other, mine):
        spid = start_job(shell, job)
        pids[job] = int(wait_for(lambda j=job: (j / "engine.pid").exists()
                                 and (j / "engine.pid").read_text().strip(), timeout=30))
        os.kill(spid, signal.SIGKILL)
        wait_until(lambda s=spid: not alive(s), 10)
    lost = mine.rename(mine.parent / "gone")      # only the tag is left of it
    try:
        res = shell.run("reap", mine.parent, timeout=30)
        out = res.stdout.decode().splitlines()
        assert out[0].startswith("killed\t") and f"{pids[mine]}(" in out[0], out
        assert f"{pids[other]}(" not in out[0] and alive(pids[other])
    finally:
        cleanup_job(lost)


# -- the inventory's rule -------------------------------------------------------------------

def _entry(kind: str, **fields):
    return device_kind(kind).entry_model(kind=kind, **fields)


@pytest.mark.parametrize("path,refused", [
    ("/", True), ("//", True), ("/usr/", True), ("/lib64", True), ("/etc", True),
    ("/data", True), ("/proc", True), ("/data/local/tmp/orch", False), ("/usr/local/orch", False),
    ("/data/local/tmp", False), ("/tmp/orch", False), ("/library", True), ("/var/tmp/o", False),
])
def test_system_folders_are_the_folders_themselves(path, refused):
    assert system_folder(path) is refused


@pytest.mark.parametrize("a,b,message", [
    (("local", "/w/o", {}), ("local", "/w/o/runs/i", {}), "o: /w/o contains /w/o/runs/i, "
                                                          "the workdir of device i"),
    (("local", "/w/o/", {}), ("local", "/w//o", {}), "is also the workdir of device o"),
    (("ssh", "/w/o", {"host": "H"}), ("ssh", "/w/o/x", {"host": "h"}), "contains /w/o/x"),
    (("ssh", "~/o", {"host": "h", "user": "u"}), ("ssh", "~/o/x", {"host": "h", "user": "u"}),
     "contains ~/o/x"),
    (("adb", "/data/local/tmp/orch", {"serial": "S"}),
     ("adb", "/data/local/tmp/orch", {"serial": "S", "adb_port": 5038}), "is also the workdir"),
    (("local", "/w/o", {}), ("local", "/w/o2", {}), None),          # a shared start: fine
    (("ssh", "/w/o", {"host": "h"}), ("ssh", "/w/o/x", {"host": "h", "port": 2222}), None),
    (("ssh", "/w/o", {"host": "h"}), ("ssh", "/w/o/x", {"host": "h", "jump": "j"}), None),
    (("ssh", "~/o", {"host": "h", "user": "u"}), ("ssh", "~/o/x", {"host": "h", "user": "v"}),
     None),                                                         # two users' homes
    (("adb", "/data/local/tmp/orch", {"serial": "S"}),
     ("adb", "/data/local/tmp/orch", {"serial": "T"}), None),       # two phones
    (("local", "/w/o", {}), ("ssh", "/w/o/x", {"host": "h"}), None),
])
def test_overlapping_workdirs_on_one_machine_are_refused(a, b, message):
    devices = [(name, _entry(kind, workdir=path, **fields), path)
               for name, (kind, path, fields) in zip(("o", "i"), (a, b))]
    problems = workdir_problems(devices)
    if message is None:
        assert problems == []
    else:
        assert len(problems) == 1 and message in f"{problems[0][0]}: {problems[0][1]}", problems


def test_an_inventory_is_refused_in_one_line_per_pair(tmp_path, monkeypatch):
    """A file with a nested pair, a workdir of `/`, and one holding the implicit `local`
    device's default workdir: one line each, at the line of the device it names."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    path = tmp_path / "devices.yaml"
    path.write_text(textwrap.dedent(f"""\
        devices:
          outer: {{kind: local, workdir: {tmp_path}/o}}
          inner: {{kind: local, workdir: {tmp_path}/o/runs/inner}}
          top: {{kind: ssh, host: h, workdir: /}}
          cache: {{kind: local, workdir: {tmp_path}/cache/orch}}
        """))
    with pytest.raises(ConfigError) as refused:
        load_inventory(str(path))
    lines = str(refused.value).splitlines()
    assert sorted(lines) == sorted([
        f"{path}:2: devices.outer.workdir: {tmp_path}/o contains {tmp_path}/o/runs/inner, the "
        f"workdir of device inner on the same machine (its jobs would be taken for this "
        f"device's strays): give each device a folder of its own, side by side",
        f"{path}:4: devices.top.workdir: / is a system folder (orch writes agent/ and runs/ "
        f"into its workdir): use a folder of orch's own under it",
        f"{path}:5: devices.cache.workdir: {tmp_path}/cache/orch contains "
        f"{tmp_path}/cache/orch/devices/local, the workdir of device local on the same machine "
        f"(its jobs would be taken for this device's strays): give each device a folder of its "
        f"own, side by side"]), lines


# -- orch itself ---------------------------------------------------------------------------

MATRIX = """\
name: overlap
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


@pytest.mark.slow
def test_two_devices_measuring_at_once_one_inside_the_other(area, monkeypatch):
    """The pair in one inventory is refused at load. Each in an inventory of its own (two
    files cannot see each other): the inner device measures (its engine waits for a file),
    `orch run -d outer` starts meanwhile and reaps its strays, and the inner run still ends
    `ok`, its engine never signalled."""
    monkeypatch.chdir(area)
    monkeypatch.delenv("ORCH_DB", raising=False)
    outer_wd, inner_wd = area / "wd", area / "wd" / "runs" / "inner"
    (area / "both.yaml").write_text(f"devices:\n  outer: {{kind: local, workdir: {outer_wd}}}\n"
                                    f"  inner: {{kind: local, workdir: {inner_wd}}}\n")
    (area / "outer.yaml").write_text(f"devices:\n  outer: {{kind: local, workdir: {outer_wd}}}\n")
    (area / "inner.yaml").write_text(f"devices:\n  inner: {{kind: local, workdir: {inner_wd}}}\n")
    go = area / "go"
    (area / "wait.yaml").write_text(MATRIX.format(
        script=f"echo waiting; while [ ! -e {go} ]; do sleep 0.05; done; echo done"))
    (area / "quick.yaml").write_text(MATRIX.format(script="echo done"))
    code, output = orch("run", "quick.yaml", "-i", "both.yaml", "-d", "outer")
    assert code == 2 and f"contains {inner_wd}, the workdir of device inner" in output, output

    proc = subprocess.Popen([sys.executable, "-m", "orchestrator.entry", "run", "wait.yaml", "-i",
                             "inner.yaml", "-d", "inner", "--db", "inner.db"],
                            cwd=area, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        def engine_pid() -> int | None:
            for pid_file in (inner_wd / "runs").glob("*/engine.pid"):
                text = pid_file.read_text().strip()
                return int(text) if text.isdigit() else None
            return None
        engine = wait_for(engine_pid, timeout=60, what="the inner device's engine")
        code, output = orch("run", "quick.yaml", "-i", "outer.yaml", "-d", "outer",
                            "--db", "outer.db")
        assert code == 0, output
        assert "stray" not in output, output
        assert alive(engine), "the outer device's reap stopped the engine"
        go.touch()
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0, out
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
    (run,) = Store.open(str(area / "inner.db")).fetch(select(schema.run))
    assert run.status == "ok", run.status
    assert wait_until(lambda: not tagged_pids(f"{area}/", prefix=True), 10)
