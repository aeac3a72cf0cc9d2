"""A device absent at the very start (docs/reliability.md, "A device absent at the start"): a
phone orch has seen before (the store holds its facts) that is being replugged while orch
starts is waited for within --link-grace, with one "waiting for" line, and the run completes
once it is back; a device never seen (a typo'd serial) still fails at once, in one line.
The real adb server with the emulated phone (tests/adb_emulator.py); `orch run` as a process.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from agent_helpers import tagged_pids
from cli_helpers import orch
from conftest_adb import adb, wait_for_state
from waiting import wait_for

from orchestrator.db.runs import Runs
from orchestrator.db.store import Store

pytestmark = pytest.mark.timeout(240)

ENGINES = Path(__file__).resolve().parent / "engines"
ORCH = str(Path(sys.executable).parent / "orch")


@pytest.fixture
def ws(phone, tmp_path, monkeypatch):
    """devices.yaml with the phone as `oneplus` (and `typo`, a serial nobody has), a model on
    the phone, the fake engine as a phone program, and a one-cell matrix."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ORCH_DB", raising=False)
    (tmp_path / "devices.yaml").write_text(textwrap.dedent(f"""\
        devices:
          oneplus:
            kind: adb
            serial: "{phone.serial}"
            adb_port: {phone.adb_port}
            workdir: {phone.data_dir}/orch
          typo:
            kind: adb
            serial: "0123456789typo"
            adb_port: {phone.adb_port}
            workdir: {phone.data_dir}/orch
        """))
    body = (ENGINES / "fake_bmoe.sh").read_text().split("\n", 1)[1]
    (tmp_path / "fake_bmoe.sh").write_text(f"#!{phone.sh}\n{body}")
    model = Path(phone.data_dir, "qwen.gguf")
    model.write_bytes(b"GGUF" + bytes(4092))
    (tmp_path / "m.yaml").write_text(
        f"name: replug\nengine: bmoe\nbinary: {{local: fake_bmoe.sh}}\n"
        f"models: {{qwen: '{model}'}}\nprompt: hi\ntokens: 6\ncooldown: 0\n"
        f"sample_interval: 0.2s\nconfigs:\n  mmap: --chatml\n")
    yield tmp_path
    left = tagged_pids(f"{phone.data_dir}/orch/runs/", prefix=True)
    assert not left, f"processes of the test's runs survived: {left}"


def _unplug(phone) -> None:
    """The phone gone from the adb server (a cable pulled: the server forgets it)."""
    phone.stop()
    adb(phone.adb_port, "disconnect", phone.serial, timeout=10)
    assert wait_for_state(phone.adb_port, phone.serial, (None,), timeout=15) is None


def test_a_known_phone_replugged_while_orch_starts_is_waited_for(ws, phone):
    Store.open(str(ws / "orch.db")).upsert_device("oneplus", "adb", {"arch": "aarch64"})
    _unplug(phone)
    env = {k: v for k, v in os.environ.items() if k != "ORCH_DB"}
    proc = subprocess.Popen([ORCH, "run", "m.yaml", "--device", "oneplus", "--link-grace", "90"],
                            cwd=ws, env=env, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    try:
        wait_for(lambda: any("waiting for oneplus" in line for line in lines), timeout=60,
                 what="orch's `waiting for` line", on_fail=lambda: "".join(lines))
        phone.start()   # plugged in again
        proc.wait(timeout=120)
        reader.join(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    output = "".join(lines)
    assert proc.returncode == 0, output
    waiting = [line for line in lines if "waiting for" in line]
    assert len(waiting) == 1, output
    assert "waiting for oneplus (not connected; up to 90 s, --link-grace)" in waiting[0]
    store = Store.open(str(ws / "orch.db"))
    assert [r.status for r in Runs(store).current()] == ["ok"]


def test_a_serial_never_seen_fails_at_once_in_one_line(ws, phone):
    code, output = orch("run", "m.yaml", "--device", "typo", "--link-grace", "90")
    assert code == 1, output
    lines = output.strip().splitlines()
    assert len(lines) == 1 and "0123456789typo is not found" in lines[0], output
    assert "waiting for" not in output


def test_a_known_phone_that_stays_away_fails_after_the_grace(ws, phone):
    Store.open(str(ws / "orch.db")).upsert_device("oneplus", "adb", {"arch": "aarch64"})
    _unplug(phone)
    code, output = orch("run", "m.yaml", "--device", "oneplus", "--link-grace", "1")
    assert code == 1, output
    assert "waiting for oneplus (not connected; up to 1 s, --link-grace)" in output
    assert "no connection within 1 s" in output, output
    phone.start()   # the fixture disconnects and closes it
