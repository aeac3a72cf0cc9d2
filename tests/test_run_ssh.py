"""`orch run` on an SSH device (a real sshd on 127.0.0.1): results, link loss, resume, host keys."""
from __future__ import annotations

import sqlite3
import textwrap
import threading
from contextlib import closing
from pathlib import Path

import pytest
from cli_helpers import orch, ssh_device
from sqlalchemy import select, text
from waiting import wait_for, wait_until

from orchestrator.db import schema
from orchestrator.db.runs import Runs
from orchestrator.db.store import Store

REPO = Path(__file__).resolve().parent.parent
ENGINES = Path(__file__).resolve().parent / "engines"



@pytest.fixture
def ssh_workspace(tmp_path, monkeypatch, sshd):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ORCH_DB", raising=False)
    (tmp_path / "devices.yaml").write_text(
        "devices:\n" + ssh_device("ssh-test", sshd, f"{tmp_path}/remote")
        + ssh_device("stranger", sshd, f"{tmp_path}/remote2",
                     known_hosts=f"{tmp_path}/empty_known_hosts"))
    (tmp_path / "fake_bmoe.sh").write_bytes((ENGINES / "fake_bmoe.sh").read_bytes())
    return tmp_path


SLOW = """\
    name: slow-ssh
    engine: bmoe
    binary: {local: fake_bmoe.sh}
    models: {m: /m.gguf}
    prompt: p
    tokens: 60
    sample_interval: 0.2s
    configs:
      slow: --delay 0.1
    """


def _wait_tokens(db: Path, at_least: int, timeout: float = 60) -> None:
    def stored() -> bool:
        try:  # read-only and without Store.open: never races orch's own schema migration
            with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)) as conn:
                return conn.execute("SELECT count(*) FROM token").fetchone()[0] >= at_least
        except sqlite3.Error:  # no file or no schema yet
            return False
    assert wait_until(stored, timeout, 0.1), "tokens never arrived"


def _engine_csv_rows(workspace: Path, remote: str = "remote") -> int:
    (csv,) = list((workspace / remote).glob("runs/*/tokens.csv"))
    return sum(1 for line in csv.read_text().splitlines() if line[:1].isdigit())


@pytest.mark.slow
def test_local_matrix_on_ssh_device(ssh_workspace):
    code, out = orch("run", str(REPO / "matrices" / "local.yaml"), "--device", "ssh-test")
    assert code == 0, out
    store = Store.open("orch.db")
    runs = Runs(store).current()
    assert len(runs) == 7 and all(r.status == "ok" for r in runs)
    assert all(len(store.frame("token", [r.id])) == 64 for r in runs)
    device = store.device_by_name("ssh-test")
    assert device.kind == "ssh" and int(device.facts["cores"]) >= 1 and device.facts["kernel"]


@pytest.mark.slow
def test_link_loss_mid_run_reconnects_without_loss(ssh_workspace, sshd):
    (ssh_workspace / "m.yaml").write_text(textwrap.dedent(SLOW))
    killer = threading.Thread(target=lambda: (
        _wait_tokens(ssh_workspace / "orch.db", 10),
        sshd.kill_connections()))
    killer.start()
    code, out = orch("run", "m.yaml", "--device", "ssh-test", "--link-grace", "60")
    killer.join()
    assert code == 0, out
    assert "link to ssh-test lost" in out
    store = Store.open("orch.db")
    (run,) = Runs(store).current()
    assert run.status == "ok"
    assert len(store.frame("token", [run.id])) == _engine_csv_rows(ssh_workspace) == 60
    dupes = store.fetch(text("SELECT step FROM token GROUP BY run_id, step HAVING count(*) > 1"))
    assert dupes == []


@pytest.mark.slow
def test_unreachable_beyond_bound_then_resume_collects_spool(ssh_workspace, sshd):
    (ssh_workspace / "m.yaml").write_text(textwrap.dedent(SLOW))
    stopper = threading.Thread(target=lambda: (
        _wait_tokens(ssh_workspace / "orch.db", 5), sshd.stop()))
    stopper.start()
    try:
        code, out = orch("run", "m.yaml", "--device", "ssh-test", "--link-grace", "2")
        stopper.join()
        assert code == 1, out
        store = Store.open("orch.db")
        (run,) = Runs(store).current()
        assert run.status == "interrupted"
        partial = len(store.frame("token", [run.id]))
        assert 5 <= partial < 60
    finally:
        sshd.start()
    # the engine keeps going on the device while orch is away: let it finish (the job's `done`)
    wait_for(lambda: list((ssh_workspace / "remote").glob("runs/*/done")), 60,
             what="the engine's end on the device")
    code, out = orch("run", "m.yaml", "--device", "ssh-test", "--resume")
    assert code == 0, out
    store = Store.open("orch.db")
    runs = Runs(store).current(include_superseded=True)
    assert len(runs) == 1 and runs[0].id == run.id and runs[0].status == "ok"
    assert len(store.frame("token", [run.id])) == 60 == _engine_csv_rows(ssh_workspace)
    assert len(list((ssh_workspace / "remote").glob("runs/*"))) == 1   # not re-run


@pytest.mark.slow
def test_hostile_prompt_and_flags_arrive_byte_exact_over_ssh(ssh_workspace):
    record = ssh_workspace / "prompt.out"
    hostile = "a 'b' \"c\" $HOME `id` $(id) ; | & \n\ttab € 日本\n"
    (ssh_workspace / "p.txt").write_text(hostile, encoding="utf-8")
    (ssh_workspace / "h.yaml").write_text(textwrap.dedent(f"""\
        name: hostile-ssh
        engine: bmoe
        binary: {{local: fake_bmoe.sh}}
        models: {{m: "/odd path/$x/'m'.gguf"}}
        prompt_file: p.txt
        tokens: 2
        configs:
          c: --record {record} --delay 0
        """))
    code, out = orch("run", "h.yaml", "--device", "ssh-test")
    assert code == 0, out
    assert record.read_bytes() == hostile.encode("utf-8")


@pytest.mark.slow
def test_unknown_host_key_refused_until_trusted(ssh_workspace):
    (ssh_workspace / "m.yaml").write_text(textwrap.dedent(SLOW).replace("tokens: 60", "tokens: 2"))
    code, out = orch("run", "m.yaml", "--device", "stranger")
    assert code == 1
    assert "orch devices trust stranger" in out
    assert Store.open("orch.db").fetch(select(schema.run)) == []
    code, out = orch("devices", "trust", "stranger", input="n\n")
    assert code == 1 and "SHA256:" in out and "nothing written" in out
    code, out = orch("devices", "trust", "stranger", "--yes")
    assert code == 0 and "added to" in out
    code, out = orch("run", "m.yaml", "--device", "stranger")
    assert code == 0, out


def test_changed_host_key_refused(ssh_workspace, sshd):
    other = ssh_workspace / "other_known_hosts"
    line = Path(sshd.known_hosts).read_text().split()[0]
    other.write_text(f"{line} ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOZ8b+Q8ys4bIVUjwIL1p2o2ivZDgS8VVmd+m7nSgEuQ\n")
    inv = (ssh_workspace / "devices.yaml").read_text().replace(
        f"{ssh_workspace}/empty_known_hosts", str(other))
    (ssh_workspace / "devices.yaml").write_text(inv)
    (ssh_workspace / "m.yaml").write_text(textwrap.dedent(SLOW).replace("tokens: 60", "tokens: 2"))
    code, out = orch("run", "m.yaml", "--device", "stranger")
    assert code == 1 and "CHANGED" in out


@pytest.mark.slow
def test_local_model_is_pushed_once_with_provenance(ssh_workspace):
    import hashlib
    import os

    model = ssh_workspace / "tiny.gguf"
    model.write_bytes(os.urandom(3 << 20))
    (ssh_workspace / "p.yaml").write_text(textwrap.dedent("""\
        name: pushed-model
        engine: bmoe
        binary: {local: fake_bmoe.sh}
        models: {tiny: {local: tiny.gguf}}
        prompt: p
        tokens: 2
        configs: {c: --delay 0}
        """))
    code, out = orch("run", "p.yaml", "--device", "ssh-test")
    assert code == 0, out
    assert "pushing tiny.gguf" in out
    remote = ssh_workspace / "remote" / "models" / "tiny.gguf"
    assert remote.read_bytes() == model.read_bytes()
    code, out = orch("run", "p.yaml", "--device", "ssh-test")
    assert code == 0 and "unchanged on the device, not pushed" in out
    run = Runs(Store.open("orch.db")).current()[0]
    assert run.model_sha256 == hashlib.sha256(model.read_bytes()).hexdigest()
    assert run.model_size == 3 << 20
    assert run.argv[run.argv.index("-m") + 1] == str(remote)
