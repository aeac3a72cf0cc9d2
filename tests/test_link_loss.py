"""Link loss outside the run phase: facts, agent install, pushes, path check,
cooldown, status and collection ride out a dropped link through run/link_retry.py, end to end
with the real sshd and the emulated phone. Cuts are placed by events (a command started, a
push passed half its bytes, a reading arrived), never by the clock; pushes are slowed by
throttling in the test (a sleep per progress step, scp's -l), not by size.

Over 400 lines on purpose: one test per phase that can lose its link, sharing the cut-placing
fixtures.
"""
from __future__ import annotations

import hashlib
import itertools
import logging
import os
import signal
import textwrap
import threading
import time
from pathlib import Path

import pytest
from cli_helpers import fake_thermal_zone, orch, ssh_device
from conftest_adb import wait_until
from sqlalchemy import text

from orchestrator.db.runs import Runs
from orchestrator.db.store import Store
from orchestrator.run.agent_client import AgentClient, Job
from orchestrator.run.link_retry import retry_link
from orchestrator.transports import ssh_files
from orchestrator.transports.adb import AdbTransport
from orchestrator.transports.base import LinkLost, LinkPolicy
from orchestrator.transports.fetch import ROUTE_TRACE, fetch_file
from orchestrator.transports.ssh import SshTransport

ENGINES = Path(__file__).resolve().parent / "engines"
MODEL_BYTES = 12 << 20   # tens of MiB at most: the push is made slow by throttling


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def no_duplicate_tokens(store: Store) -> bool:
    return store.fetch(text("SELECT step FROM token GROUP BY run_id, step HAVING count(*) > 1")) == []


def engine_rows(workdir: Path) -> list[int]:
    rows = []
    for csv in sorted(workdir.glob("runs/*/tokens.csv")):
        rows += [len([line for line in csv.read_text().splitlines() if line[:1].isdigit()])]
    return rows


class SshCuts:
    """Kills the test sshd's connection processes at chosen events of the SshTransport.

    `on_command(label, pred)`: when a command whose argv satisfies pred starts (after the
    exec, before any output is read), the connection dies. `on_stream_data(label, pred, n)`:
    after the n-th chunk of such a stream. The connection pids are read before the exec, so
    the kill follows the command's start by microseconds. `events` records the cuts in order."""

    def __init__(self, sshd, monkeypatch) -> None:
        self.sshd, self.events = sshd, []
        self.commands: list[tuple[str, object, int]] = []
        real_open, real_pump = SshTransport._open, SshTransport._pump
        cuts = self

        def _open(self, argv, conn):
            self._cut_plan = None
            for index, (label, pred, after) in enumerate(cuts.commands):
                if conn is None and pred(argv):
                    del cuts.commands[index]
                    self._cut_plan = (label, after, cuts.sshd.connection_pids())
                    break
            return real_open(self, argv, conn)

        def _pump(self, chan, marker, deadline, what, on_stderr):
            plan, self._cut_plan = getattr(self, "_cut_plan", None), None
            if plan is not None and plan[1] == 0:
                cuts._kill(plan[0], plan[2])
            seen = 0
            gen = real_pump(self, chan, marker, deadline, what, on_stderr)
            try:
                while True:
                    data = next(gen)
                    seen += 1
                    if plan is not None and seen == plan[1]:
                        cuts._kill(plan[0], plan[2])
                    yield data
            except StopIteration as stop:
                return stop.value

        monkeypatch.setattr(SshTransport, "_open", _open)
        monkeypatch.setattr(SshTransport, "_pump", _pump)

    def _kill(self, label: str, pids: list[int]) -> None:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.events.append(label)

    def on_command(self, label: str, pred, after_chunks: int = 0) -> None:
        self.commands.append((label, pred, after_chunks))

    def cut_now(self, label: str) -> None:
        self._kill(label, self.sshd.connection_pids())


@pytest.fixture
def ssh_ws(tmp_path, monkeypatch, sshd):
    """devices.yaml with the test sshd as `dev` (a fake thermal zone at 38 °C), the fake
    engine counting its runs, a random local model of MODEL_BYTES."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ORCH_DB", raising=False)
    zone = fake_thermal_zone(tmp_path)
    (tmp_path / "devices.yaml").write_text(
        "devices:\n" + ssh_device("dev", sshd, f"{tmp_path}/remote")
        + f"    env: {{ORCH_THERMAL_DIR: {zone.parent}}}\n")
    counter = tmp_path / "engine-runs"
    body = (ENGINES / "fake_bmoe.sh").read_text().split("\n", 1)[1]
    (tmp_path / "fake_bmoe.sh").write_text(f"#!/bin/sh\necho run >> {counter}\n{body}")
    (tmp_path / "model.gguf").write_bytes(os.urandom(MODEL_BYTES))
    return tmp_path


def ssh_matrix(ws: Path, tokens: int = 30, cooldown: str = "0", model: str = "{local: model.gguf}",
               configs: str = "c: --delay 0.05") -> str:
    (ws / "m.yaml").write_text(
        f"name: cuts\nengine: bmoe\nbinary: {{local: fake_bmoe.sh}}\nmodels: {{m: {model}}}\n"
        f"prompt: p\ntokens: {tokens}\nsample_interval: 0.2s\ncooldown: {cooldown}\n"
        f"configs:\n  {configs}\n")
    return "m.yaml"


def throttle_ssh_push(monkeypatch, on_half) -> list[tuple[int, int]]:
    """Slow every SSH file push (a sleep per 256 KiB) and call on_half() once a push of the
    model passes half its bytes; returns the model push's progress calls."""
    seen: list[tuple[int, int]] = []
    real = SshTransport._put_file
    fired = []

    def slow(self, local, remote, mode, progress):
        def step(done, total):
            if Path(local).name == "model.gguf":
                seen.append((done, total))
                time.sleep(0.01)   # a slow link on purpose (the throttle), not a wait for an event
                if not fired and done >= total // 2:
                    fired.append(done)
                    on_half()
            if progress is not None:
                progress(done, total)
        return real(self, local, remote, mode, step)
    monkeypatch.setattr(SshTransport, "_put_file", slow)
    return seen


def resumed_after_cut(seen: list[tuple[int, int]]) -> bool:
    """Progress went back after the cut, but not to 0: the push went on from the part."""
    drops = [b for a, b in itertools.pairwise(seen) if b[0] < a[0]]
    return not drops or all(d[0] > 0 for d in drops)


# ----- SSH: four cuts from the model push through the run ------------------------------------
@pytest.mark.slow
def test_ssh_cut_four_times_from_push_through_run(ssh_ws, sshd, monkeypatch, caplog):
    caplog.set_level(logging.INFO, logger="orchestrator.run.link_retry")
    cuts = SshCuts(sshd, monkeypatch)
    cuts.on_command("facts", lambda argv: argv[-1] == "facts")
    seen = throttle_ssh_push(monkeypatch, lambda: cuts.cut_now("push"))
    cuts.on_command("cooldown", lambda argv: "cooldown" in argv, after_chunks=1)
    cuts.on_command("run", lambda argv: "attach" in argv, after_chunks=5)
    code, out = orch("run", ssh_matrix(ssh_ws, cooldown="{until: 40C, min: 1s, max: 20s, "
                                                        "interval: 0.1s}"),
                     "--device", "dev", "--link-grace", "60")
    assert code == 0, out
    assert cuts.events == ["facts", "push", "cooldown", "run"]
    logged = caplog.text
    assert "lost during the device facts" in logged and "lost during the cooldown" in logged
    assert "lost during the push of model.gguf" in logged
    assert "Socket exception" not in out
    store = Store.open("orch.db")
    (run,) = Runs(store).current()
    assert run.status == "ok" and run.cooldown_met is True
    assert len(store.frame("token", [run.id])) == 30 and engine_rows(ssh_ws / "remote") == [30]
    assert no_duplicate_tokens(store)
    assert (ssh_ws / "engine-runs").read_text() == "run\n"
    remote = ssh_ws / "remote" / "models" / "model.gguf"
    assert sha(remote) == sha(ssh_ws / "model.gguf") == run.model_sha256
    assert resumed_after_cut(seen) and seen[-1] == (MODEL_BYTES, MODEL_BYTES)
    assert not list(remote.parent.glob("*.orch-part*"))


# ----- each way a lost link outside the run phase used to be fatal ---------------------------
@pytest.mark.slow
def test_ssh_cut_during_the_model_stat(ssh_ws, sshd, monkeypatch):
    """Was: `connection ... lost during stat -c %s .../model.gguf`, exit 1."""
    real = ssh_files.SshFiles.remote_size
    cut = []

    def remote_size(self, remote):
        if remote.endswith("model.gguf") and not cut:
            cut.append(remote)
            sshd.kill_connections()
        return real(self, remote)
    monkeypatch.setattr(ssh_files.SshFiles, "remote_size", remote_size)
    code, out = orch("run", ssh_matrix(ssh_ws, tokens=3), "--device", "dev", "--link-grace", "60")
    assert code == 0, out
    assert cut and Runs(Store.open("orch.db")).current()[0].status == "ok"
    assert sha(ssh_ws / "remote" / "models" / "model.gguf") == sha(ssh_ws / "model.gguf")


@pytest.mark.slow
def test_ssh_cut_during_the_device_side_sha256_and_the_path_check(ssh_ws, sshd, monkeypatch):
    """A model given by its device path: the device-side sha256 and the path check are
    commands; a cut in each is ridden out."""
    device_model = ssh_ws / "on-device.gguf"
    device_model.write_bytes(b"GGUF" + os.urandom(1 << 20))
    cuts = SshCuts(sshd, monkeypatch)
    cuts.on_command("sha256", lambda argv: any("sha256sum" in a for a in argv))
    cuts.on_command("pathcheck", lambda argv: any("/proc/mounts" in a for a in argv))
    code, out = orch("run", ssh_matrix(ssh_ws, tokens=3, model=str(device_model)),
                     "--device", "dev", "--link-grace", "60")
    assert code == 0, out
    assert cuts.events == ["sha256", "pathcheck"]
    (run,) = Runs(Store.open("orch.db")).current()
    assert run.status == "ok" and run.model_sha256 == sha(device_model)


@pytest.mark.slow
def test_ssh_cut_during_the_device_binary_sha256(ssh_ws, sshd, monkeypatch):
    """An engine given by its device path is hashed on the device for provenance: a cut
    there is ridden out like every other device-side step."""
    binary = ssh_ws / "device-bmoe.sh"
    binary.write_bytes((ssh_ws / "fake_bmoe.sh").read_bytes())
    binary.chmod(0o755)
    (ssh_ws / "m.yaml").write_text(
        (ssh_ws / ssh_matrix(ssh_ws, tokens=3)).read_text()
        .replace("binary: {local: fake_bmoe.sh}", f"binary: {binary}"))
    cuts = SshCuts(sshd, monkeypatch)
    cuts.on_command("sha256", lambda argv: any("sha256sum" in a for a in argv)
                    and any(str(binary) in a for a in argv))
    code, out = orch("run", "m.yaml", "--device", "dev", "--link-grace", "60")
    assert code == 0, out
    assert cuts.events == ["sha256"]
    (run,) = Runs(Store.open("orch.db")).current()
    assert run.status == "ok" and run.binary_sha256 == sha(binary)


@pytest.mark.slow
def test_ssh_cut_during_a_large_scp_push_resumes_from_what_arrived(sshd, tmp_path, monkeypatch):
    """Was: `lost during writing .../model.gguf`. A push through scp (throttled with -l) cut
    when 40% has arrived goes on over SFTP from there; the file's sha256 is the local one."""
    monkeypatch.setattr(ssh_files, "SCP_MIN_BYTES", 1 << 20)
    real_argv = ssh_files.SshFiles._scp_argv
    monkeypatch.setattr(ssh_files.SshFiles, "_scp_argv",
                        lambda self: [*real_argv(self), "-l", "24000"])  # ~3 MB/s
    local = tmp_path / "model.gguf"
    local.write_bytes(os.urandom(MODEL_BYTES))
    t = SshTransport("t", workdir=str(tmp_path / "wd"), **sshd.transport_kwargs())
    t.link = LinkPolicy(grace_s=60)
    t.connect()
    part_dir = tmp_path / "wd" / "models"

    def watch() -> None:
        def arrived() -> int:
            return sum(p.stat().st_size for p in part_dir.glob("model.gguf.orch-part-*"))
        wait_until(lambda: arrived() >= MODEL_BYTES * 2 // 5, timeout=120, step=0.02)
        watch.at = arrived()
        sshd.kill_connections()
    watch.at = 0
    watcher = threading.Thread(target=watch)
    seen: list[tuple[int, int]] = []
    try:
        watcher.start()
        assert retry_link(t, "the push", lambda: t.push_if_changed(
            local, "models/model.gguf", 0o644, lambda d, n: seen.append((d, n))))
        watcher.join()
        assert 0 < watch.at < MODEL_BYTES
        assert t.last_put_method == "sftp-resumed"
        landed = part_dir / "model.gguf"
        assert sha(landed) == sha(local) and not list(part_dir.glob("*.orch-part*"))
        assert t.remote_sha256("models/model.gguf") == sha(local)
    finally:
        watcher.join()
        t.close()


def test_ssh_resumed_part_of_other_bytes_is_pushed_again(sshd, tmp_path):
    """A part file whose prefix is not the local file's (same size and mtime key, other
    bytes) fails the final sha256 check and is pushed again from the start."""
    local = tmp_path / "m.bin"
    local.write_bytes(os.urandom(2 << 20))
    t = SshTransport("t", workdir=str(tmp_path / "wd"), **sshd.transport_kwargs())
    t.connect()
    try:
        remote = t._path("m.bin")
        part = Path(f"{remote}.orch-part-{ssh_files._version_key(local)}")
        part.write_bytes(os.urandom(1 << 20))
        assert t.push_if_changed(local, "m.bin")
        assert sha(Path(remote)) == sha(local) and not part.exists()
    finally:
        t.close()


def test_start_repeated_after_a_cut_starts_the_engine_once(ssh_ws, sshd, monkeypatch):
    """Starting a job is not safe to repeat as such: a cut right after the start command began
    is retried, and the agent's "already started" answer counts as started."""
    t = SshTransport("t", workdir=str(ssh_ws / "remote"), **sshd.transport_kwargs())
    t.link = LinkPolicy(grace_s=60)
    t.connect()
    try:
        client = AgentClient(t)
        engine = client.install_file(ssh_ws / "fake_bmoe.sh")
        job = Job(run_uid="once", argv=[engine, "-n", "3", "--delay", "0"], env={})
        jobdir = client.push_job(job)
        cuts = SshCuts(sshd, monkeypatch)
        cuts.on_command("start", lambda argv: "start" in argv)
        client.start(jobdir)
        assert cuts.events == ["start"]
        assert wait_until(lambda: client.status(jobdir).startswith("done"), timeout=30)
        assert (ssh_ws / "engine-runs").read_text() == "run\n"
    finally:
        t.close()


@pytest.mark.slow
def test_status_and_collection_ride_out_a_cut(ssh_ws, sshd, monkeypatch):
    t = SshTransport("t", workdir=str(ssh_ws / "remote"), **sshd.transport_kwargs())
    t.link = LinkPolicy(grace_s=60)
    t.connect()
    try:
        client = AgentClient(t)
        cuts = SshCuts(sshd, monkeypatch)
        cuts.on_command("status", lambda argv: "status" in argv)
        assert client.status(f"{t.workdir}/runs/none") == "absent"
        assert cuts.events == ["status"]
        (ssh_ws / "remote" / "trace.csv").write_bytes(b"x" * 1000)

        def fetch() -> bytes:
            if "get" not in cuts.events:
                cuts.cut_now("get")
            return fetch_file(t, "trace.csv", ROUTE_TRACE)   # the collection's one fetch path
        got = retry_link(t, "fetch", fetch)
        assert got == b"x" * 1000 and cuts.events == ["status", "get"]
    finally:
        t.close()


def test_paramiko_socket_errors_never_reach_the_terminal(sshd, tmp_path, capfd):
    """Was: `Socket exception: Connection reset by peer (104)` printed on the terminal."""
    logging.getLogger("paramiko.transport").error("Socket exception: Connection reset by peer (104)")
    t = SshTransport("t", workdir=str(tmp_path / "wd"), **sshd.transport_kwargs())
    t.connect()
    try:
        gen = t.stream(["sh", "-c", "while :; do echo tick; sleep 0.05; done"])
        assert next(gen).startswith(b"tick")
        sshd.kill_connections()
        with pytest.raises(LinkLost):
            for _ in gen:
                pass
    finally:
        t.close()
    err = capfd.readouterr().err
    assert "Socket exception" not in err and "paramiko" not in err


@pytest.mark.slow
def test_unreachable_beyond_the_grace_still_fails_the_step(ssh_ws, sshd):
    """The bound holds: a device away for longer than --link-grace ends the device (exit 1)
    with the reason, and no run is left `running`."""
    t = SshTransport("t", workdir=str(ssh_ws / "remote"), **sshd.transport_kwargs())
    t.link = LinkPolicy(grace_s=1, first_backoff_s=0.1)
    t.connect()
    sshd.stop()
    try:
        with pytest.raises(Exception, match="no connection within|cannot connect|lost"):
            AgentClient(t).facts()
    finally:
        sshd.start()
        t.close()


# ----- adb: the phone unplugged during setup ------------------------------------------------
@pytest.fixture
def phone_ws(phone, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ORCH_DB", raising=False)
    (tmp_path / "devices.yaml").write_text(textwrap.dedent(f"""\
        devices:
          phone:
            kind: adb
            serial: "{phone.serial}"
            adb_port: {phone.adb_port}
            workdir: {phone.data_dir}/orch
        """))
    counter = Path(phone.data_dir) / "engine-runs"
    body = (ENGINES / "fake_bmoe.sh").read_text().split("\n", 1)[1]
    (tmp_path / "fake_bmoe.sh").write_text(f"#!{phone.sh}\necho run >> {counter}\n{body}")
    (tmp_path / "model.gguf").write_bytes(os.urandom(MODEL_BYTES))
    return tmp_path


def unplug_for(phone, seconds: float, events: list[str], label: str) -> None:
    """Pull the cable now; plug it back `seconds` later (orch itself reconnects)."""
    phone.kill()
    events.append(label)
    threading.Timer(seconds, phone.start).start()


def phone_run(ws: Path, phone) -> tuple[int, str]:
    (ws / "m.yaml").write_text(
        "name: unplugged\nengine: bmoe\nbinary: {local: fake_bmoe.sh}\n"
        "models: {m: {local: model.gguf}}\nprompt: p\ntokens: 20\nsample_interval: 0.2s\n"
        "cooldown: 0\nconfigs:\n  c: --delay 0.05\n")
    return orch("run", "m.yaml", "--device", "phone", "--link-grace", "60")


def check_phone_run(ws: Path, phone, code: int, out: str) -> None:
    assert code == 0, out
    store = Store.open("orch.db")
    (run,) = Runs(store).current()
    assert run.status == "ok"
    workdir = Path(phone.data_dir) / "orch"
    assert len(store.frame("token", [run.id])) == 20 and engine_rows(workdir) == [20]
    assert no_duplicate_tokens(store)
    assert Path(phone.data_dir, "engine-runs").read_text() == "run\n"
    assert sha(workdir / "models" / "model.gguf") == sha(ws / "model.gguf") == run.model_sha256


@pytest.mark.slow
def test_phone_unplugged_during_the_agent_push(phone_ws, phone, monkeypatch):
    """Was: `device ... is offline (push to .../orch-agent-....sh.orch-tmp)`, exit 1: the
    phone is pulled as the agent's push begins (the first step of setup), for 3 s."""
    events: list[str] = []
    real = AdbTransport._send

    def send(self, handle, length, remote, *args, **kwargs):
        if "orch-agent-" in remote and not events:
            unplug_for(phone, 3, events, "agent")
        return real(self, handle, length, remote, *args, **kwargs)
    monkeypatch.setattr(AdbTransport, "_send", send)
    code, out = phone_run(phone_ws, phone)
    assert events == ["agent"]
    check_phone_run(phone_ws, phone, code, out)


@pytest.mark.slow
def test_phone_unplugged_during_the_model_push(phone_ws, phone, monkeypatch):
    """Pulled when the (throttled) model push is half done, for 3 s; the push resumes from
    its finished pieces."""
    from orchestrator.transports import adb as adbmod

    monkeypatch.setattr(adbmod, "PIECE", 2 << 20)
    events: list[str] = []
    seen: list[tuple[int, int]] = []
    real = AdbTransport._put_file

    def put_file(self, local, remote, mode, progress):
        def step(done, total):
            if Path(local).name == "model.gguf":
                seen.append((done, total))
                time.sleep(0.005)   # a slow link on purpose (the throttle), not a wait for an event
                if not events and done >= total // 2:
                    unplug_for(phone, 3, events, "push")
            if progress is not None:
                progress(done, total)
        return real(self, local, remote, mode, step)
    monkeypatch.setattr(AdbTransport, "_put_file", put_file)
    code, out = phone_run(phone_ws, phone)
    assert events == ["push"]
    assert resumed_after_cut(seen)
    check_phone_run(phone_ws, phone, code, out)
