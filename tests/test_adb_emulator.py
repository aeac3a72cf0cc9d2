"""The emulated phone (tests/adb_emulator.py) against the REAL adb server, via the adb CLI
(-P PORT -s SERIAL) and via adbutils; plus a few raw wire-protocol checks without a server."""
from __future__ import annotations

import hashlib
import os
import socket
import stat
import struct
import threading
from pathlib import Path

import pytest
from ci import unavailable

adbutils = pytest.importorskip("adbutils")

from adb_emulator import A_CLSE, A_CNXN, A_OKAY, A_OPEN, A_WRTE, EmulatedPhone, pack  # noqa: E402
from conftest_adb import adb, require_adb_stack, wait_for_state, wait_until  # noqa: E402
from waiting import gated_lines, release_gates  # noqa: E402


def cli(ph, *args, **kw):
    return adb(ph.adb_port, "-s", ph.serial, *args, **kw)


# ----- shell ------------------------------------------------------------------------------
def test_devices_list_shows_banner(phone):
    out = adb(phone.adb_port, "devices", "-l").stdout
    line = next(l for l in out.splitlines() if l.startswith(phone.serial))
    # adb itself rewrites '-' in the model to '_' in this listing
    assert "device product:emu model:EMU_15R device:emu" in line


def test_shell_v1_output(phone, adb_device):
    r = cli(phone, "shell", "-x", "echo out; echo err >&2; exit 4")  # -x: v1, no exit code
    assert (r.returncode, r.stdout) == (0, "out\nerr\n")
    assert adb_device.shell("echo out; echo err >&2") == "out\nerr"
    assert adb_device.shell(["echo", "a b"]) == "a b"
    assert cli(phone, "exec-out", "printf raw").stdout == "raw"


def test_shell_v2_exit_codes_and_split_streams(phone, adb_device):
    assert cli(phone, "shell", "exit 3").returncode == 3
    r = cli(phone, "shell", "echo out; echo err >&2; exit 5")
    assert (r.returncode, r.stdout, r.stderr) == (5, "out\n", "err\n")
    res = adb_device.shell2("echo out; echo err >&2; exit 7", v2=True)
    assert (res.returncode, res.stdout, res.stderr) == (7, "out\n", "err\n")
    assert adb_device.shell2("kill -9 $$", v2=True).returncode == 137


def test_shell_v2_stdin(phone):
    assert cli(phone, "shell", "cat; echo done", input="hello\n").stdout == "hello\ndone\n"
    blob = "".join(f"{i:08d}\n" for i in range(40000))  # 360 kB both ways
    r = cli(phone, "shell", "sha256sum", input=blob)
    assert r.stdout.split()[0] == hashlib.sha256(blob.encode()).hexdigest()


def test_stream_arrives_incrementally(phone, adb_device):
    # line i+1 is printed only after this test has received line i (waiting.gated_lines)
    gate, data = os.path.join(phone.data_dir, "gate"), b""
    c = adb_device.shell(gated_lines(gate, 6, bound_s=8), stream=True)  # < the 10 s socket timeout
    try:
        while chunk := c.recv(4096):
            data += chunk
            release_gates(gate, data)
    finally:
        c.close()
    assert data == b"".join(b"line%d\n" % i for i in range(1, 7))


def test_concurrent_streams(phone, adb_device):
    """Eight shells at once, each waiting (bounded) until all eight have started: every one can
    end with its own exit code only if the phone runs them side by side, not one by one."""
    results = {}
    started = os.path.join(phone.data_dir, "started")
    os.mkdir(started)

    def run(i):
        results[i] = adb_device.shell2(
            f": > {started}/{i}; n=0; while set -- {started}/*; [ $# -lt 8 ]; do n=$((n+1)); "
            f"[ $n -gt 160 ] && {{ echo alone; exit 99; }}; sleep 0.05; done; echo {i}; exit {i}",
            v2=True)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(15)
    assert {i: (r.returncode, r.stdout) for i, r in results.items()} == {i: (i, f"{i}\n") for i in range(8)}


def test_path_is_toybox_only(phone, adb_device):
    for tool in ("awk", "dd", "tr", "expr", "python", "python3", "perl", "bash"):
        assert adb_device.shell2(f"command -v {tool}", v2=True).returncode != 0, tool
    res = adb_device.shell2("command -v sed; command -v sha256sum; echo $PATH; pwd", v2=True)
    assert res.stdout.splitlines() == [f"{phone.bin_dir}/sed", f"{phone.bin_dir}/sha256sum",
                                       phone.bin_dir, phone.root]


def test_getprop(phone, adb_device):
    assert cli(phone, "shell", "getprop ro.product.model").stdout == "EMU-15R\n"
    assert adb_device.prop.model == "EMU-15R"
    assert adb_device.getprop("ro.build.version.sdk") == "36"
    assert adb_device.shell("getprop no.such.prop; getprop no.such.prop dflt") == "\ndflt"
    listing = adb_device.shell("getprop")
    assert "[ro.soc.model]: [EMU8650]" in listing.splitlines()
    assert "[ro.build.fingerprint]: [orch/emu/emu:16/EMU.1/1:user/release-keys]" in listing
    phone.set_prop("ro.soc.model", "EMU9000")
    assert adb_device.shell("getprop ro.soc.model") == "EMU9000"


def test_thermal_battery_meminfo(phone, adb_device):
    phone.set_temp(0, 71.5)
    phone.set_temp("cpu-1-0", 55)
    phone.set_temp("battery", 41.2)
    phone.set_meminfo(MemAvailable=123456)
    out = adb_device.shell(
        "cd $ORCH_THERMAL_DIR; for z in thermal_zone*; do echo $(<$z/type)=$(<$z/temp); done;"
        " echo bat=$(<$ORCH_BATTERY_DIR/temp); grep MemAvailable $ORCH_MEMINFO;"
        " dumpsys battery | grep temperature")
    assert out.splitlines() == ["cpu-0-0=71500", "cpu-1-0=55000", "battery=32000", "bat=412",
                                "MemAvailable:     123456 kB", "  temperature: 412"]
    assert phone.get_temp(0) == 71.5


def test_sdcard_is_fuse_or_a_ram_dir_refusing_o_direct(phone, adb_device):
    assert os.path.realpath(os.path.join(phone.root, "sdcard")) == phone.sdcard_dir
    assert phone.sdcard_dir.startswith("/dev/shm/")
    adb_device.sync.push(b"x" * 10, phone.root + "/sdcard/f.bin")
    assert adb_device.shell(f"cat {phone.sdcard_dir}/f.bin") == "x" * 10
    if phone.sdcard_fs == "fuse":  # as on a phone (tests/test_fuse.py has the rest)
        assert not phone.sdcard_refuses_odirect
        assert Path(phone.sdcard_backing, "f.bin").read_bytes() == b"x" * 10
        return
    if os.geteuid() != 0:
        unavailable("not root: could not mount a ramfs, the sdcard dir accepts O_DIRECT")
    assert phone.sdcard_refuses_odirect
    with pytest.raises(OSError):
        os.open(os.path.join(phone.sdcard_dir, "d"), os.O_CREAT | os.O_WRONLY | os.O_DIRECT)
    plain = os.path.join(phone.data_dir, "d")  # the disk-backed workdir accepts O_DIRECT
    os.close(os.open(plain, os.O_CREAT | os.O_WRONLY | os.O_DIRECT))


def test_unicode_and_hostile_command_strings(phone, adb_device, tmp_path):
    text = "héllo wörld ✓ 日本語 🚀"
    assert adb_device.shell(f"echo '{text}'") == text
    assert cli(phone, "shell", f"printf '%s\\n' '{text}'").stdout == text + "\n"
    hostile = "a'b\"c $HOME `id` $(echo pwn) ; | & < > * ? [x] {y} ! # ~ \\ \t%s%n end"
    cmd = "printf '%s' '" + hostile.replace("'", "'\\''") + "'"
    assert adb_device.shell2(cmd, v2=True).stdout == hostile
    assert cli(phone, "shell", cmd).stdout == hostile
    name = "we ird;$x'n ✓.txt"
    adb_device.sync.push(b"payload", f"{phone.data_dir}/{name}")
    assert adb_device.shell(f"cd {phone.data_dir} && cat *ird*") == "payload"
    assert os.path.exists(os.path.join(phone.data_dir, name))
    long_arg = "x" * 20000
    assert adb_device.shell(f"echo {long_arg} | wc -c").strip() == "20001"


def test_background_job_outlives_its_shell_until_close(phone, adb_device):
    res = adb_device.shell2("nohup sleep 30 >/dev/null 2>&1 </dev/null & echo $! $$", v2=True)
    assert res.returncode == 0   # back without waiting for the job, which runs on (below)
    pid, shell_pid = map(int, res.stdout.split())
    assert wait_until(lambda: shell_pid not in phone.running_pids(), 5)  # its shell has ended,
    assert pid in phone.running_pids()                                    # the job has not
    phone.close()  # what the fixture does at the end: kills everything the phone started
    assert wait_until(lambda: not phone.running_pids(), 5)


def test_host_closing_the_stream_kills_the_command(phone, adb_device):
    c = adb_device.shell("echo started; sleep 30; echo never", stream=True)
    try:
        assert c.read(8) == b"started\n"
        assert phone.running_pids()
    finally:
        c.close()
    assert wait_until(lambda: not phone.running_pids(), 5)


# ----- sync -------------------------------------------------------------------------------
def test_push_pull_5mib_with_adb_cli(phone, tmp_path):
    data = os.urandom(5 << 20)
    src = tmp_path / "src.bin"
    src.write_bytes(data)
    os.utime(src, (1_600_000_000, 1_600_000_000))
    dev = f"{phone.data_dir}/sub/big.bin"
    r = cli(phone, "push", str(src), dev, timeout=60)
    assert r.returncode == 0, r.stderr
    with open(dev, "rb") as f:
        assert f.read() == data
    assert int(os.stat(dev).st_mtime) == 1_600_000_000
    assert cli(phone, "shell", f"sha256sum {dev}").stdout.split()[0] == hashlib.sha256(data).hexdigest()
    back = tmp_path / "back.bin"
    r = cli(phone, "pull", dev, str(back), timeout=60)
    assert r.returncode == 0, r.stderr
    assert back.read_bytes() == data


def test_push_pull_5mib_with_adbutils(phone, adb_device, tmp_path):
    data = os.urandom(5 << 20)
    dev = f"{phone.data_dir}/big2.bin"
    assert adb_device.sync.push(data, dev) == len(data)
    with open(dev, "rb") as f:
        assert f.read() == data
    back = tmp_path / "back2.bin"
    assert adb_device.sync.pull(dev, back) == len(data)
    assert back.read_bytes() == data
    assert adb_device.sync.read_bytes(dev) == data


def test_stat_and_list(phone, adb_device, tmp_path):
    d = os.path.join(phone.data_dir, "dir")
    os.makedirs(os.path.join(d, "sub"))
    with open(os.path.join(d, "a.txt"), "wb") as f:
        f.write(b"12345")
    os.utime(os.path.join(d, "a.txt"), (1_700_000_000, 1_700_000_000))
    st = adb_device.sync.stat(os.path.join(d, "a.txt"))
    assert stat.S_ISREG(st.mode) and st.size == 5 and int(st.mtime.timestamp()) == 1_700_000_000
    assert stat.S_ISDIR(adb_device.sync.stat(d).mode)
    assert not adb_device.sync.exists(os.path.join(d, "missing"))
    entries = {e.path: e for e in adb_device.sync.list(d)}
    assert set(entries) == {".", "..", "a.txt", "sub"}
    assert entries["a.txt"].size == 5 and stat.S_ISDIR(entries["sub"].mode)
    r = cli(phone, "pull", d, str(tmp_path / "pulled"))  # directory pull walks with LIST
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "pulled" / "a.txt").read_bytes() == b"12345"
    assert (tmp_path / "pulled" / "sub").is_dir()


def test_sync_failures_are_reported(phone, adb_device, tmp_path):
    blocker = os.path.join(phone.data_dir, "file")
    with open(blocker, "w") as f:
        f.write("x")
    with pytest.raises(adbutils.AdbError):
        adb_device.sync.push(b"data", blocker + "/child")  # parent is a file: FAIL
    r = cli(phone, "push", __file__, blocker + "/child")
    assert r.returncode != 0 and "couldn't create file" in r.stdout + r.stderr
    with pytest.raises(adbutils.AdbError, match="No such file"):
        adb_device.sync.read_bytes(os.path.join(phone.data_dir, "missing"))
    assert cli(phone, "pull", f"{phone.data_dir}/missing", str(tmp_path / "m")).returncode != 0
    assert adb_device.sync.push(b"still fine", blocker) == 10  # the service goes on


# ----- unplug / replug ----------------------------------------------------------------------
def test_kill_mid_stream_then_restart(phone, adb_device):
    c = adb_device.shell("while :; do echo tick; sleep 0.1; done", stream=True)
    try:
        assert c.read(5) == b"tick\n"
        phone.kill()
        # the v1 stream just ends, like a normal end: read what is left until it does
        assert wait_until(lambda: not c.recv(4096), 10, step=0)
    finally:
        c.close()
    assert wait_for_state(phone.adb_port, phone.serial, "offline", timeout=10) == "offline"
    assert wait_until(lambda: not phone.running_pids(), 5)
    with pytest.raises(adbutils.AdbError):
        adb_device.shell("echo x")
    phone.restart()
    assert wait_for_state(phone.adb_port, phone.serial, "device", timeout=20, reconnect=True) == "device"
    assert adb_device.shell("echo back") == "back"


@pytest.mark.slow
def test_restart_on_same_port_server_reconnects_by_itself(phone, adb_device):
    port = phone.port
    phone.restart()
    assert phone.port == port
    # the server's first retry comes ~0.3 s after the loss, the next ones every ~10 s
    assert wait_for_state(phone.adb_port, phone.serial, "device", timeout=25) == "device"
    assert adb_device.shell("echo again") == "again"


# ----- raw wire protocol (no adb server) -----------------------------------------------------
def _recv_exact(s, n):
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        assert chunk, "device closed the connection"
        buf += chunk
    return buf


def _read_pkt(s):
    cmd, a0, a1, n, chk, magic = struct.unpack("<6I", _recv_exact(s, 24))
    data = _recv_exact(s, n) if n else b""
    assert magic == cmd ^ 0xFFFFFFFF and chk == sum(data) & 0xFFFFFFFF
    return cmd, a0, a1, data


def test_raw_protocol_flow_control_refusal_and_close():
    require_adb_stack()
    with EmulatedPhone() as ph, socket.create_connection(("127.0.0.1", ph.port), 5) as s:
        s.sendall(pack(A_CNXN, 0x01000001, 4096, b"host::\0"))
        cmd, a0, a1, banner = _read_pkt(s)
        assert (cmd, a0, a1) == (A_CNXN, 0x01000001, 1 << 20)
        assert banner.startswith(b"device::ro.product.name=emu;ro.product.model=EMU-15R;")
        assert banner.endswith(b";features=shell_v2,cmd")
        s.sendall(pack(A_OPEN, 7, 0, b"bogus:\0"))
        assert _read_pkt(s)[:3] == (A_CLSE, 0, 7)
        s.sendall(pack(A_OPEN, 8, 0, b"shell:seq 1 200000\0"))
        cmd, lid, rid, _ = _read_pkt(s)
        assert (cmd, rid) == (A_OKAY, 8) and lid != 0
        for _ in range(3):
            cmd, a0, a1, data = _read_pkt(s)
            assert (cmd, a0, a1) == (A_WRTE, lid, 8) and 0 < len(data) <= 4096  # host's maxdata
            s.settimeout(0.3)
            with pytest.raises(socket.timeout):
                s.recv(1)  # nothing more until we OKAY
            s.settimeout(5)
            s.sendall(pack(A_OKAY, 8, lid))
        assert _read_pkt(s)[:3] == (A_WRTE, lid, 8)
        assert ph.running_pids()
        s.sendall(pack(A_CLSE, 8, lid))
        assert _read_pkt(s)[:3] == (A_CLSE, lid, 8)
        assert wait_until(lambda: not ph.running_pids(), 5)
        s.sendall(pack(A_OPEN, 9, 0, b"shell,v2,raw:echo hi; exit 9\0"))
        cmd, lid, _, _ = _read_pkt(s)
        assert cmd == A_OKAY
        got = b""
        while True:
            cmd, a0, a1, data = _read_pkt(s)
            if cmd == A_CLSE:
                break
            assert cmd == A_WRTE
            got += data
            s.sendall(pack(A_OKAY, 9, lid))
        assert got == b"\x01\x03\x00\x00\x00hi\n" + b"\x03\x01\x00\x00\x00\x09"
