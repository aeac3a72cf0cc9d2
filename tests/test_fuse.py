"""The model path check on a REAL FUSE mount (bindfs over /dev/fuse), what O_DIRECT does there,
and the emulated phone's FUSE /sdcard, end to end with `orch run`. docs/path-check.md has the
measured answers these tests hold. Under CI a machine where FUSE cannot be mounted fails."""
from __future__ import annotations

import ctypes
import mmap
import os
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
from ci import unavailable
from cli_helpers import adb_device as adb_entry
from cli_helpers import orch
from fuse_mount import FuseMount, fuse_unavailable, mount_type
from sqlalchemy import select

from orchestrator.db import schema
from orchestrator.db.runs import Runs
from orchestrator.db.store import Store
from orchestrator.run.pathcheck import probe_paths
from orchestrator.transports.local import LocalTransport

TESTS = Path(__file__).resolve().parent
SIZE = 16 << 20
NOT_HONOURED = "O_DIRECT is accepted there but not honoured"


def require_fuse() -> None:
    why = fuse_unavailable()
    if why is not None:
        unavailable(why)


def disk_dir(tmp_path: Path) -> Path:
    """A directory on a disk file system (page cache can be dropped there), for the backing."""
    for cand in (tmp_path, Path("/var/tmp"), TESTS.parent):
        fs = subprocess.run(["stat", "-f", "-c", "%T", str(cand)], check=False,
                            capture_output=True, text=True).stdout.strip()
        if fs not in ("tmpfs", "ramfs", "") and os.access(cand, os.W_OK):
            d = cand / f"orch-fuse-backing-{os.getpid()}-{tmp_path.name}"
            d.mkdir(exist_ok=True)
            return d
    unavailable("no disk-backed writable directory for the FUSE backing file")


@pytest.fixture
def fuse(tmp_path):
    """A bindfs mount: .backing (on disk) seen through .mnt (FUSE). Unmounted afterwards, and
    checked to be gone with its daemon."""
    require_fuse()
    backing, mnt = disk_dir(tmp_path), tmp_path / "fuse"
    mnt.mkdir()
    fm = FuseMount(str(backing), str(mnt)).mount()
    daemon = fm.proc
    try:
        assert mount_type(str(mnt)) == "fuse"
        yield SimpleNamespace(backing=backing, mnt=mnt)
    finally:
        fm.unmount()
        subprocess.run(["rm", "-rf", str(backing)], check=False, timeout=60)
    assert mount_type(str(mnt)) is None
    assert daemon.poll() is not None  # the daemon ended with its mount


# ----- what O_DIRECT does on FUSE ----------------------------------------------------------

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                       ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]


def resident(fd: int, size: int = SIZE) -> int:
    """Bytes of the open file `fd` in the page cache (mincore over a fresh mapping). On the
    FUSE file it must be the fd that read: a new open of it may drop FUSE's cache."""
    addr = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
    assert addr not in (None, ctypes.c_void_p(-1).value), os.strerror(ctypes.get_errno())
    try:
        vec = ctypes.create_string_buffer(size // mmap.PAGESIZE)
        assert _libc.mincore(addr, size, vec) == 0, os.strerror(ctypes.get_errno())
        return sum(b & 1 for b in vec.raw) * mmap.PAGESIZE
    finally:
        _libc.munmap(addr, size)


def drop_cache(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def read_through(path: Path, flags: int) -> tuple[bytes, int]:
    """Read the whole file with 1 MiB aligned buffers: (its bytes, FUSE-side resident bytes
    measured on the same fd before it is closed)."""
    fd = os.open(path, os.O_RDONLY | flags)
    try:
        buf, data = mmap.mmap(-1, 1 << 20), bytearray()
        while n := os.readv(fd, [buf]):
            data += buf[:n]
        return bytes(data), resident(fd)
    finally:
        os.close(fd)


def test_odirect_on_fuse_is_accepted_and_silently_buffered(fuse):
    content = os.urandom(SIZE)
    backing = fuse.backing / "model.gguf"
    with open(backing, "wb") as f:
        f.write(content)
    through = fuse.mnt / "model.gguf"

    drop_cache(backing)
    with open(backing, "rb") as f:
        assert resident(f.fileno()) < SIZE // 4  # the cache could be dropped: a fair start
    data, fuse_cached = read_through(through, os.O_DIRECT)  # no EINVAL at open or read
    assert data == content
    assert fuse_cached == 0  # the FUSE layer's own cache is bypassed ...
    with open(backing, "rb") as f:
        assert resident(f.fileno()) >= SIZE * 3 // 4  # ... the daemon's read is buffered

    # an unaligned O_DIRECT read, which a block file system refuses, is served
    fd = os.open(through, os.O_RDONLY | os.O_DIRECT)
    try:
        os.lseek(fd, 1, os.SEEK_SET)
        assert os.read(fd, 1000) == content[1:1001]
    finally:
        os.close(fd)
    fd = os.open(backing, os.O_RDONLY | os.O_DIRECT)
    try:
        os.lseek(fd, 1, os.SEEK_SET)
        with pytest.raises(OSError):  # the disk file system below does real direct I/O
            os.read(fd, 1000)
    finally:
        os.close(fd)

    drop_cache(backing)
    data, fuse_cached = read_through(through, 0)  # buffered: cached twice
    assert data == content and fuse_cached >= SIZE * 3 // 4
    with open(backing, "rb") as f:
        assert resident(f.fileno()) >= SIZE * 3 // 4


def test_probe_sees_fuse_and_flags_it(fuse):
    (fuse.backing / "m.gguf").write_bytes(b"GGUF" + bytes(8188))
    t = LocalTransport("local", str(fuse.backing / "wd"))
    on_fuse, on_disk = str(fuse.mnt / "m.gguf"), str(fuse.backing / "m.gguf")
    infos = probe_paths(t, [on_fuse, on_disk])
    info = infos[on_fuse]
    assert (info.exists, info.kind, info.size) == (True, "f", 8192)
    assert (info.mount, info.fstype) == (str(fuse.mnt), "fuse")
    assert info.odirect == "ok"  # dd iflag=direct succeeds: the probe alone cannot tell
    assert NOT_HONOURED in info.problem() and f"mounted at {fuse.mnt}" in info.problem()
    assert infos[on_disk].fstype != "fuse" and infos[on_disk].problem() is None


# ----- orch run, local device, model on FUSE ----------------------------------------------

def write_matrix(ws: Path, name: str, model: str, extra: str = "",
                 configs: str = "mmap: --chatml\n  stream: --moe-stream --delay 0") -> str:
    (ws / f"{name}.yaml").write_text(
        f"name: {name}\nengine: bmoe\nbinary: {{local: fake_bmoe.sh}}\n"
        f"models: {{qwen: '{model}'}}\nprompt: hi\ntokens: 4\ncooldown: 0\n"
        f"configs:\n  {configs}\n{extra}")
    return str(ws / f"{name}.yaml")


def path_warnings(run) -> list[str]:
    return [w for w in run.warnings or [] if w.startswith("model ")]


def session_names(db: str) -> list[str]:
    return [s.name for s in Store.open(db).fetch(select(schema.session.c.name))]


def run(*args: str) -> tuple[int, str]:
    """`orch run ARGS`: exit code and output with whitespace runs made one space (the
    terminal output wraps long lines at spaces)."""
    code, out = orch("run", *args)
    return code, " ".join(out.split())


def check_warn_refuse_off(ws: Path, model: str, device: tuple[str, ...], mount: str) -> None:
    """`orch run` of a streaming config on a FUSE path: warn (runs, the warning on the
    streaming run only), refuse (exit 2, nothing of it written), off (no warning)."""
    code, out = run(write_matrix(ws, "fuse-warn", model), *device)
    assert code == 0, out
    assert "qwen.gguf is on a fuse file system" in out and NOT_HONOURED in out
    runs = {r.config: r for r in Runs(Store.open("orch.db")).current()}
    assert runs["mmap"].status == runs["stream"].status == "ok"
    assert not path_warnings(runs["mmap"])
    (warning,) = path_warnings(runs["stream"])
    assert f"fuse file system (mounted at {mount})" in warning and NOT_HONOURED in warning
    assert "streaming configs (stream)" in warning

    code, out = run(write_matrix(ws, "fuse-refuse", model, "path_check: refuse\n"), *device)
    assert code == 2, out
    assert "path_check is `refuse`" in out and NOT_HONOURED in out
    assert "Traceback" not in out
    assert session_names("orch.db") == ["fuse-warn"]

    code, out = run(write_matrix(ws, "fuse-off", model, "path_check: off\n",
                                 "stream: --moe-stream --delay 0"), *device)
    assert code == 0 and "is on a fuse" not in out, out


@pytest.mark.slow
def test_orch_run_local_model_on_fuse(workspace, fuse):
    (fuse.backing / "qwen.gguf").write_bytes(b"GGUF" + bytes(4092))
    check_warn_refuse_off(workspace, str(fuse.mnt / "qwen.gguf"), (), str(fuse.mnt))
    # the same file on the disk below: no warning
    code, out = orch("run", write_matrix(workspace, "disk", str(fuse.backing / "qwen.gguf"),
                                         "path_check: refuse\n"))
    assert code == 0 and "is on a" not in out, out


# ----- the emulated phone's /sdcard --------------------------------------------------------

def require_fuse_sdcard(phone) -> None:
    if phone.sdcard_fs != "fuse":
        unavailable(f"the emulated phone's /sdcard is {phone.sdcard_fs}, not FUSE: "
                    f"{phone.sdcard_fuse_error}")


def test_phone_sdcard_is_a_fuse_mount(phone, adb_device):
    require_fuse_sdcard(phone)
    assert os.path.realpath(os.path.join(phone.root, "sdcard")) == phone.sdcard_dir
    assert mount_type(phone.sdcard_dir) == "fuse"
    adb_device.sync.push(b"x" * 10, phone.root + "/sdcard/f.bin")
    assert Path(phone.sdcard_backing, "f.bin").read_bytes() == b"x" * 10  # data/media/0
    assert adb_device.shell(f"cat {phone.root}/sdcard/f.bin") == "x" * 10
    assert not phone.sdcard_refuses_odirect
    os.close(os.open(os.path.join(phone.sdcard_dir, "f.bin"), os.O_RDONLY | os.O_DIRECT))


def test_phone_close_unmounts_the_sdcard(tmp_path):
    require_fuse()
    from adb_emulator import EmulatedPhone

    ph = EmulatedPhone(root=str(tmp_path / "phone"))
    try:
        assert ph.sdcard_fs == "fuse", ph.sdcard_fuse_error
        daemon, sdcard = ph._sdcard_fuse.proc, ph.sdcard_dir
        assert mount_type(sdcard) == "fuse"
    finally:
        ph.close()
    assert mount_type(sdcard) is None and not os.path.exists(sdcard)
    assert daemon.poll() is not None


def test_phone_sdcard_without_fuse_falls_back_and_says_why(tmp_path, monkeypatch):
    from adb_emulator import EmulatedPhone

    def refuse(self):
        raise OSError("fuse: device not found, try 'modprobe fuse' first")

    monkeypatch.setattr(FuseMount, "mount", refuse)
    ph = EmulatedPhone(root=str(tmp_path / "phone"))
    try:
        assert ph.sdcard_fuse_error == "fuse: device not found, try 'modprobe fuse' first"
        assert ph.sdcard_fs == ("ramfs" if os.geteuid() == 0 else "tmpfs")
        assert mount_type(ph.sdcard_dir) == (ph.sdcard_fs if os.geteuid() == 0 else None)
    finally:
        ph.close()
    assert mount_type(ph.sdcard_dir) is None


@pytest.mark.slow
def test_orch_run_on_phone_sdcard_fuse(phone, tmp_path, monkeypatch):
    require_fuse_sdcard(phone)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ORCH_DB", raising=False)
    (tmp_path / "devices.yaml").write_text("devices:\n" + adb_entry("oneplus", phone))
    body = (TESTS / "engines" / "fake_bmoe.sh").read_text().split("\n", 1)[1]
    (tmp_path / "fake_bmoe.sh").write_text(f"#!{phone.sh}\n{body}")
    Path(phone.root, "sdcard", "Download").mkdir()
    Path(phone.root, "sdcard", "Download", "qwen.gguf").write_bytes(b"GGUF" + bytes(4092))
    model = f"{phone.root}/sdcard/Download/qwen.gguf"  # through the /sdcard symlink
    check_warn_refuse_off(tmp_path, model, ("--device", "oneplus"), phone.sdcard_dir)


def test_fuse_check_reports_a_missing_dev_fuse(monkeypatch):
    """The reason a machine cannot mount FUSE is precise (what CI prints as its failure)."""
    real_exists = os.path.exists
    monkeypatch.setattr(os.path, "exists", lambda p: p != "/dev/fuse" and real_exists(p))
    assert "/dev/fuse does not exist" in fuse_unavailable()
