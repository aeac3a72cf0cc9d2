"""AdbTransport against the REAL adb server and the emulated phone (tests/adb_emulator.py):
commands, streams, files, the sha256 cache, resumable pushes, unplugging, and `orch run` end to
end on a phone whose PATH is mksh + toybox only.

Over 400 lines on purpose: the transport's whole contract against one real adb server and
phone.
"""
from __future__ import annotations

import hashlib
import os
import sqlite3
import stat
import textwrap
import threading
import time
from contextlib import closing
from pathlib import Path
from types import SimpleNamespace

import adbutils  # noqa: E402,F401  (a dependency: missing is a failure, not a skip)
import pytest
from ci import unavailable
from cli_helpers import orch
from conftest_adb import wait_for_state, wait_until  # noqa: E402
from sqlalchemy import select, text
from waiting import gated_lines, release_gates

from orchestrator.db import schema  # noqa: E402
from orchestrator.db.runs import Runs
from orchestrator.db.store import Store  # noqa: E402
from orchestrator.transports import adb as adbmod  # noqa: E402
from orchestrator.transports.adb import AdbTransport  # noqa: E402
from orchestrator.transports.base import (  # noqa: E402  # noqa: E402
    CommandTimedOut,
    LinkLost,
    RemoteFileNotFound,
    TransportError,
)

ENGINES = Path(__file__).resolve().parent / "engines"


def transport(phone, **kw) -> AdbTransport:
    t = AdbTransport("emu", serial=phone.serial, adb_port=phone.adb_port,
                     workdir=f"{phone.data_dir}/orch", **kw)
    t.connect()
    return t


# ----- the transport ------------------------------------------------------------------------
def test_connect_resolves_workdir_and_run_quotes_every_argument(phone):
    t = transport(phone, env={"ORCH_TEST_VAR": "a b $c"})
    assert t.workdir == f"{phone.data_dir}/orch" and os.path.isdir(t.workdir)
    hostile = "a'b\"c $HOME `id` $(echo pwn) ; | & \n\ttab ✓"
    r = t.run(["printf", "%s|", hostile, "", "*"])
    assert (r.rc, r.stdout) == (0, f"{hostile}||*|".encode())
    r = t.run(["sh", "-c", 'pwd; echo "$ORCH_TEST_VAR"; echo err >&2; exit 5'])
    assert (r.rc, r.stdout, r.stderr) == (5, f"{t.workdir}\na b $c\n".encode(), b"err\n")
    assert t.run(["sh", "-c", "kill -9 $$"]).rc == 137
    assert t.run(["no-such-tool"]).rc == 127


def test_connect_errors_say_what_is_wrong(phone, adb_server):
    with pytest.raises(TransportError, match=r"device 127\.0\.0\.1:1 is not found.*USB debugging"):
        AdbTransport("x", serial="127.0.0.1:1", adb_port=adb_server).connect()
    with pytest.raises(TransportError, match=r"device nosuchserial is not found"):
        AdbTransport("x", serial="nosuchserial", adb_port=adb_server).connect()
    from conftest_adb import free_port
    with pytest.raises(TransportError, match="no adb server .*adb -P .* start-server"):
        AdbTransport("x", serial=phone.serial, adb_port=free_port()).connect()


def test_stream_arrives_incrementally_and_returns_the_exit_code(phone):
    t = transport(phone)
    # line i+1 is printed only after this test has received line i (waiting.gated_lines)
    gate = f"{phone.data_dir}/gate"
    gen = t.stream(["sh", "-c", gated_lines(gate, 4) + "; echo e >&2; exit 4"])
    data = b""
    while True:
        try:
            chunk = next(gen)
        except StopIteration as stop:
            rc = stop.value
            break
        data += chunk
        release_gates(gate, data)
    assert data == b"line1\nline2\nline3\nline4\n" and rc == 4 and t.last_stderr == b"e\n"


def test_closing_a_stream_early_stops_the_command(phone):
    t = transport(phone)
    gen = t.stream(["sh", "-c", "echo go; sleep 30"])
    assert next(gen) == b"go\n"
    gen.close()
    assert wait_until(lambda: not phone.running_pids(), 5)


def test_put_get_bytes_parents_and_modes(phone, tmp_path):
    t = transport(phone)
    t.put_bytes(b"args\n", "runs/x/args/000")  # relative: under the workdir
    assert Path(t.workdir, "runs/x/args/000").read_bytes() == b"args\n"
    assert t.get_bytes(f"{t.workdir}/runs/x/args/000") == b"args\n"
    local = tmp_path / "tool.sh"
    local.write_bytes(b"#!/bin/sh\necho hi\n")
    t.put(local, "deep/er/tool.sh", mode=0o755)
    st = os.stat(Path(t.workdir, "deep/er/tool.sh"))
    assert stat.S_IMODE(st.st_mode) == 0o755
    assert not Path(t.workdir, "deep/er/tool.sh.orch-tmp").exists()
    with pytest.raises(RemoteFileNotFound):
        t.get_bytes("missing")
    blob = os.urandom(3 << 20)
    t.put_bytes(blob, "blob.bin")
    assert t.get_bytes("blob.bin") == blob


def test_push_if_changed_uses_the_sha256_cache(phone, tmp_path):
    t = transport(phone)
    local = tmp_path / "engine.bin"
    local.write_bytes(os.urandom(200_000))
    remote = f"{t.workdir}/bin/engine.bin"
    assert t.push_if_changed(local, remote, mode=0o755) is True
    digest = hashlib.sha256(local.read_bytes()).hexdigest()
    cache = Path(remote + ".orch-sha256").read_text().split()
    assert cache[0] == "200000" and cache[2] == digest
    assert t.push_if_changed(local, remote) is False
    assert t.last_sha256_source == "cached"
    # changed on the device behind orch's back, same size: the cache is invalidated by mtime
    with open(remote, "r+b") as f:              # a first byte it did not have (random
        first = f.read(1)                         # content starts with b"X" 1 time in 256)
        f.seek(0)
        f.write(bytes([first[0] ^ 0xFF]))
    os.utime(remote, (1_600_000_000, 1_600_000_000))
    assert t.remote_sha256(remote) != digest and t.last_sha256_source == "computed"
    assert t.push_if_changed(local, remote) is True
    assert hashlib.sha256(Path(remote).read_bytes()).hexdigest() == digest
    assert t.push_if_changed(local, remote) is False
    assert t.remote_sha256(f"{t.workdir}/nope") is None


def test_interrupted_large_push_resumes_from_finished_pieces(phone, tmp_path, monkeypatch):
    monkeypatch.setattr(adbmod, "PIECE", 1 << 20)
    t = transport(phone)
    local = tmp_path / "model.gguf"
    data = os.urandom((5 << 20) + 12345)
    local.write_bytes(data)
    remote = f"{t.workdir}/models/model.gguf"

    def unplug_at_2_5_mib(done, total):
        if done >= (5 << 19):
            raise KeyboardInterrupt("cable pulled")
    with pytest.raises(KeyboardInterrupt):
        t.push_if_changed(local, remote, progress=unplug_at_2_5_mib)
    key = hashlib.sha256(data).hexdigest()[:16]
    kept = [f"model.gguf.orch-part-{key}.0", f"model.gguf.orch-part-{key}.1"]
    # adbd deletes the cut-off piece 2 once it notices the closed stream
    assert wait_until(lambda: sorted(p.name for p in Path(remote).parent.iterdir()) == kept, 5)

    sent, seen = [], []
    real_send = AdbTransport._send
    monkeypatch.setattr(AdbTransport, "_send",
                        lambda self, h, n, r, *a, **k: (sent.append(r), real_send(self, h, n, r, *a, **k)))
    assert t.push_if_changed(local, remote, progress=lambda d, n: seen.append((d, n))) is True
    assert [s.rsplit(".", 1)[1] for s in sent] == ["2", "3", "4", "5"]  # 0 and 1 were kept
    assert seen[-1] == (len(data), len(data))
    assert Path(remote).read_bytes() == data
    assert sorted(p.name for p in Path(remote).parent.iterdir()) == ["model.gguf",
                                                                      "model.gguf.orch-sha256"]


def test_assembly_cut_off_mid_append_is_repaired(phone, tmp_path, monkeypatch):
    monkeypatch.setattr(adbmod, "PIECE", 1 << 20)
    t = transport(phone)
    local = tmp_path / "m.bin"
    data = os.urandom((3 << 20) + 7)
    local.write_bytes(data)
    remote = f"{t.workdir}/m.bin"
    key = hashlib.sha256(data).hexdigest()[:16]
    prefix = Path(f"{remote}.orch-part-{key}")
    # as if the on-device append died while copying piece 1: piece 0 is in .cat and deleted,
    # half of piece 1 is appended, piece 1 itself is still there
    for i in (1, 2, 3):
        Path(f"{prefix}.{i}").write_bytes(data[i << 20:(i + 1) << 20])
        if i != 3:  # piece 3 is full-size but was never committed by a DONE: sent again
            os.utime(f"{prefix}.{i}", (adbmod.PIECE_MTIME, adbmod.PIECE_MTIME))
    Path(f"{prefix}.cat").write_bytes(data[:(1 << 20) + 5000])
    stale = Path(f"{remote}.orch-part-0123456789abcdef.0")
    stale.write_bytes(b"an earlier version")
    sent = []
    real_send = AdbTransport._send
    monkeypatch.setattr(AdbTransport, "_send",
                        lambda self, h, n, r, *a, **k: (sent.append(r), real_send(self, h, n, r, *a, **k)))
    assert t.push_if_changed(local, remote) is True
    assert [s.rsplit(".", 1)[1] for s in sent] == ["3"]  # the others were on the device
    assert Path(remote).read_bytes() == data
    assert not stale.exists() and not list(Path(remote).parent.glob("m.bin.orch-part-*"))


def test_unplug_mid_stream_is_link_lost_and_connect_comes_back(phone):
    t = transport(phone)
    # ticks for 60 s at most: a stream that missed the unplug ends normally, without LinkLost
    gen = t.stream(["sh", "-c", "i=0; while [ $i -lt 600 ]; do echo tick; sleep 0.1; i=$((i+1)); done"])
    assert next(gen).startswith(b"tick")
    phone.kill()
    with pytest.raises(LinkLost):
        for _ in gen:
            pass
    with pytest.raises(TransportError):
        t.run(["true"])
    phone.start()
    t.close()
    t.connect()  # a TCP serial: connect() runs `adb connect` itself, no 10 s server retry
    assert t.run(["echo", "back"]).stdout == b"back\n"


# ----- orch run on the emulated phone -------------------------------------------------------

@pytest.fixture
def ws(phone, tmp_path, monkeypatch):
    """Workspace: devices.yaml with the phone as `oneplus`, a model file on /data/local/tmp
    and one on the sdcard, and the fake engine as a phone program (mksh shebang, counting its
    runs)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ORCH_DB", raising=False)
    (tmp_path / "devices.yaml").write_text(textwrap.dedent(f"""\
        devices:
          oneplus:
            kind: adb
            serial: "{phone.serial}"
            adb_port: {phone.adb_port}
            workdir: {phone.data_dir}/orch
        """))
    body = (ENGINES / "fake_bmoe.sh").read_text().split("\n", 1)[1]
    counter = Path(phone.data_dir) / "engine-runs"
    (tmp_path / "fake_bmoe.sh").write_text(f"#!{phone.sh}\necho run >> {counter}\n{body}")
    Path(phone.data_dir, "qwen.gguf").write_bytes(b"GGUF" + bytes(4092))
    Path(phone.root, "sdcard", "Download").mkdir()
    Path(phone.root, "sdcard", "Download", "qwen.gguf").write_bytes(b"GGUF" + bytes(4092))
    return SimpleNamespace(path=tmp_path, counter=counter, model=f"{phone.data_dir}/qwen.gguf")


def matrix(ws: SimpleNamespace, name: str, configs: dict[str, str], tokens: int = 6,
           model: str | None = None, extra: str = "") -> str:
    lines = "".join(f"  {k}: {v}\n" for k, v in configs.items())
    model = model or ws.model
    (ws.path / f"{name}.yaml").write_text(
        f"name: {name}\nengine: bmoe\nbinary: {{local: fake_bmoe.sh}}\n"
        f"models: {{qwen: '{model}'}}\nprompt: \"it's a $test\"\ntokens: {tokens}\n"
        f"sample_interval: 0.2s\n{extra}configs:\n{lines}")
    return f"{name}.yaml"


def engine_csv_rows(phone) -> list[str]:
    (csv,) = list(Path(phone.data_dir, "orch").glob("runs/*/tokens.csv"))
    return [line for line in csv.read_text().splitlines() if line[:1].isdigit()]


def wait_tokens(db: str, at_least: int, timeout: float = 60) -> None:
    def stored() -> bool:
        try:  # read-only and without Store.open: never races orch's own schema migration
            with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)) as conn:
                return conn.execute("SELECT count(*) FROM token").fetchone()[0] >= at_least
        except sqlite3.Error:  # no file or no schema yet
            return False
    assert wait_until(stored, timeout, 0.1), "tokens never arrived"


def no_duplicate_tokens(store: Store) -> bool:
    return store.fetch(text("SELECT step FROM token GROUP BY run_id, step HAVING count(*) > 1")) == []


@pytest.mark.slow
def test_orch_run_on_the_phone_end_to_end(ws, phone):
    t = transport(phone)
    for tool in ("awk", "dd", "tr", "expr", "python", "python3", "bash"):  # toybox + mksh only
        assert t.run(["sh", "-c", f"command -v {tool}"]).rc != 0, tool
    code, out = orch("run", matrix(ws, "phone-small", {"mmap": "--chatml",
                                                        "stream": "--moe-stream --delay 0.01"}),
                     "--device", "oneplus")
    assert code == 0, out
    store = Store.open("orch.db")
    runs = Runs(store).current()
    assert [r.status for r in runs] == ["ok", "ok"]
    assert all(len(store.frame("token", [r.id])) == 6 and r.summary["complete"] for r in runs)
    assert all(not path_warnings(r) for r in runs)  # the model is on /data/local/tmp: no path warning
    facts = store.device_by_name("oneplus").facts
    assert store.device_by_name("oneplus").kind == "adb"
    assert facts["prop.ro.product.model"] == "EMU-15R"
    assert facts["prop.ro.build.fingerprint"].startswith("orch/emu/emu:16")
    assert facts["mem_total_kb"] == "11725000" and "MIRBSD KSH" in facts["shell"]
    assert ws.counter.read_text() == "run\nrun\n"


@pytest.mark.slow
def test_unplug_within_the_bound_loses_and_repeats_nothing(ws, phone):
    def unplug_and_replug():
        wait_tokens("orch.db", 10)
        phone.kill()
        time.sleep(1.5)   # the cable stays out a while: the outage itself, not a wait for an event
        phone.start()
        wait_for_state(phone.adb_port, phone.serial, "device", timeout=30, reconnect=True)
    helper = threading.Thread(target=unplug_and_replug)
    helper.start()
    code, out = orch("run", matrix(ws, "unplug", {"slow": "--delay 0.1"}, tokens=60),
                     "--device", "oneplus", "--link-grace", "60")
    helper.join()
    assert code == 0, out
    assert "link to oneplus lost" in out
    store = Store.open("orch.db")
    (run,) = Runs(store).current()
    assert run.status == "ok"
    assert len(store.frame("token", [run.id])) == len(engine_csv_rows(phone)) == 60
    assert no_duplicate_tokens(store)
    assert ws.counter.read_text() == "run\n"


@pytest.mark.slow
def test_unplug_beyond_the_bound_then_resume_collects_from_the_spool(ws, phone):
    name = matrix(ws, "gone", {"slow": "--delay 0.1"}, tokens=40)
    helper = threading.Thread(target=lambda: (wait_tokens("orch.db", 5), phone.kill()))
    helper.start()
    code, out = orch("run", name, "--device", "oneplus", "--link-grace", "2")
    helper.join()
    assert code == 1, out
    store = Store.open("orch.db")
    (run,) = Runs(store).current()
    assert run.status == "interrupted"
    assert 5 <= len(store.frame("token", [run.id])) < 40
    # the engine runs on while the phone is away; plug it back in once it has finished
    assert wait_until(lambda: len(engine_csv_rows(phone)) == 40, 30)
    phone.start()
    assert wait_for_state(phone.adb_port, phone.serial, "device", timeout=30, reconnect=True) == "device"
    code, out = orch("run", name, "--device", "oneplus", "--resume")
    assert code == 0, out
    runs = Runs(store).current(include_superseded=True)
    assert [(r.id, r.status) for r in runs] == [(run.id, "ok")]
    assert len(store.frame("token", [run.id])) == 40 == len(engine_csv_rows(phone))
    assert no_duplicate_tokens(store)
    assert ws.counter.read_text() == "run\n"  # collected, not run again


@pytest.mark.slow
def test_model_on_the_sdcard_with_a_streaming_config(ws, phone):
    sdcard_model = f"{phone.root}/sdcard/Download/qwen.gguf"  # via the /sdcard symlink
    configs = {"mmap": "--chatml", "stream": "--moe-stream --delay 0"}
    code, out = orch("run", matrix(ws, "sd-warn", configs, model=sdcard_model),
                     "--device", "oneplus")
    assert code == 0, out
    assert "qwen.gguf is on a" in out and "streaming configs (stream)" in out
    store = Store.open("orch.db")
    runs = {r.config: r for r in Runs(store).current()}
    assert runs["mmap"].status == runs["stream"].status == "ok"
    assert not path_warnings(runs["mmap"])  # buffered reads are what mmap measures anyway
    (warning,) = path_warnings(runs["stream"])
    assert f"on a {phone.sdcard_fs} file system" in warning  # fuse where FUSE can be mounted
    assert ("not honoured" if phone.sdcard_fs == "fuse" else "in RAM") in warning
    if phone.sdcard_fs == "ramfs":
        assert "O_DIRECT is refused" in warning

    code, out = orch("run", matrix(ws, "sd-refuse", configs, model=sdcard_model,
                                   extra="path_check: refuse\n"), "--device", "oneplus")
    assert code == 2, out
    assert "path_check is `refuse` on oneplus" in out and "/data/local/tmp" in out
    sessions = store.fetch(select(schema.session.c.name))
    assert [s.name for s in sessions] == ["sd-warn"]  # nothing of sd-refuse was written

    code, out = orch("run", matrix(ws, "sd-off", {"stream": "--moe-stream --delay 0"},
                                   model=sdcard_model, extra="path_check: off\n"),
                     "--device", "oneplus")
    assert code == 0 and "qwen.gguf is on a" not in out, out


def path_warnings(run) -> list[str]:
    """The model path check's warnings of a run (a loaded test machine may add a load one)."""
    return [w for w in run.warnings or [] if w.startswith("model ")]


@pytest.mark.slow
def test_missing_model_is_reported(ws, phone):
    code, out = orch("run", matrix(ws, "missing", {"mmap": "--chatml"},
                                   model=f"{phone.data_dir}/nope.gguf"), "--device", "oneplus")
    assert code == 0, out  # the fake engine does not open it; a real one would fail
    (run,) = Runs(Store.open("orch.db")).current()
    assert path_warnings(run) == [f"model qwen: {phone.data_dir}/nope.gguf does not exist on oneplus"]


@pytest.mark.slow
def test_a_silent_stream_is_probed_not_dropped(phone, monkeypatch):
    t = transport(phone, dead_after=0.5, poll=0.1)
    probes = []
    real_probe = AdbTransport._probe
    monkeypatch.setattr(AdbTransport, "_probe", lambda self, what: (probes.append(what),
                                                                    real_probe(self, what)))
    assert b"".join(t.stream(["sh", "-c", "sleep 2; echo late"])) == b"late\n"
    assert len(probes) >= 2


def test_a_hung_device_is_link_lost(phone, monkeypatch):
    t = transport(phone, dead_after=0.5, poll=0.1)
    real_run = AdbTransport.run

    def hung(self, argv, timeout, cd=True):  # the probe gets no answer, as from a frozen adbd
        if argv == ["true"]:
            raise CommandTimedOut("no answer")
        return real_run(self, argv, timeout, cd)
    monkeypatch.setattr(AdbTransport, "run", hung)
    with pytest.raises(LinkLost, match="no answer"):
        for _ in t.stream(["sh", "-c", "sleep 5"]):
            pass


def test_v1_fallback_for_phones_without_shell_v2(phone):
    t = transport(phone)
    t._v2 = False  # as on Android < 7: exit code by marker, stream end checked against the state
    r = t.run(["sh", "-c", "echo out; exit 3"])
    assert (r.rc, r.stdout) == (3, b"out\n")
    assert b"".join(t.stream(["echo", "v1"])) == b"v1\n"
    gen = t.stream(["sh", "-c", "while :; do echo tick; sleep 0.1; done"])
    assert next(gen).startswith(b"tick")
    phone.kill()
    with pytest.raises(LinkLost):
        for _ in gen:
            pass


def test_phone_matrix_is_the_study_matrix():
    from orchestrator.config.matrix import load_matrix
    from orchestrator.config.plan import plan_cells
    from orchestrator.run.pathcheck import streaming

    loaded = load_matrix(Path(__file__).resolve().parent.parent / "matrices" / "phone.yaml")
    m = loaded.matrix
    assert (m.engine, m.binary.device, m.tokens, m.cooldown.seconds) == \
        ("bmoe", "/data/local/tmp/bmoe-cli", 256, 45.0)
    assert all(p.startswith("/data/local/tmp/") for p in m.models.values()) and len(m.models) == 2
    assert all("--chatml" in f.split() for f in m.configs.values())
    assert [n for n, f in m.configs.items() if not streaming(f)] == ["mmap"] == [m.baseline]
    assert len(plan_cells(m)) == 16


def test_path_check_works_on_a_local_device_too(tmp_path):
    from orchestrator.config.matrix import load_matrix
    from orchestrator.errors import ConfigError
    from orchestrator.run.pathcheck import check_model_paths, probe_paths
    from orchestrator.transports.local import LocalTransport

    disk = tmp_path / "m.gguf"
    disk.write_bytes(b"GGUF" + bytes(8188))
    t = LocalTransport("here", str(tmp_path / "dev"))
    t.connect()
    info = probe_paths(t, [str(disk), "/nonexistent/x"])
    assert info[str(disk)].exists and info[str(disk)].size == 8192 and info[str(disk)].fstype
    assert not info["/nonexistent/x"].exists
    if not os.path.isdir("/dev/shm"):
        unavailable("no /dev/shm here")
    shm = Path("/dev/shm") / f"orch-pathcheck-{os.getpid()}.gguf"
    shm.write_bytes(b"GGUF")
    try:
        (tmp_path / "m.yaml").write_text(textwrap.dedent(f"""\
            name: local-paths
            engine: bmoe
            binary: /bin/true
            models: {{disk: {disk}, ram: {shm}}}
            path_check: refuse
            configs: {{mmap: "", odirect: --io odirect}}
            """))
        with pytest.raises(ConfigError, match=r"model ram: .* tmpfs file system .*\(odirect\)"):
            check_model_paths(t, load_matrix(tmp_path / "m.yaml"))
    finally:
        shm.unlink()
