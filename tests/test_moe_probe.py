"""moe-probe (agent/moe_probe.py): output formats of docs/formats.md sections 1-3, cache and
read accounting, expert file reuse, determinism, O_DIRECT handling, SIGTERM.

Every run uses a tmp cache dir and a small geometry (4 layers x 16 experts x 64 KiB = 4 MiB).
"""
import errno
import importlib.util
import os
import re
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from ci import unavailable
from waiting import wait_until

PROBE = Path(__file__).resolve().parents[1] / "agent" / "moe_probe.py"
L, E, K, S = 4, 16, 4, 64 * 1024
SMALL = ["--layers", str(L), "--experts", str(E), "--top-k", str(K), "--expert-mb", "0.0625",
         "--compute-kb", "4", "-p", "one two three"]
HEADER = ("step,steps,wall_ms,io_ms,compute_ms,read_bytes,cache_hit_pct,stall_ms,mgmt_ms,"
          "majflt,cpu_ms")
TRAILER_KEYS = ("tokens s/tok tok/s read_MiB io_s compute_s/tok io_s/tok cache_hit_pct n_prompt "
                "load_s prefill_s prefill_tps stall_s/tok mgmt_s/tok majflt/tok cpu_s/tok").split()
NUM = r"(\d+(?:\.\d+)?)"
LINE_RES = {
    "generation": rf"^generation: (\d+) tokens, {NUM} s/token \({NUM} tok/s\)$",
    "prefill": rf"^prefill: (\d+) tokens, {NUM} s \({NUM} tok/s\) \| model load {NUM} s "
               rf"\| TTFT {NUM} s$",
    "moe-stream": rf"^moe-stream: read {NUM} MiB \({NUM} MiB/token\), decode {NUM} s/token "
                  rf"\(compute {NUM} (?:\+ cache mgmt {NUM} )?\+ flash I/O {NUM} s/token, "
                  rf"{NUM} MiB/s\)$",
    "moe-cache": rf"^moe-cache: {NUM}% hit, resident {NUM} MiB",
    "compute": rf"^compute: {NUM}% CPU occupancy \({NUM} cpu-s/token over (\d+) threads\), "
               rf"{NUM} major faults/token$",
}
# Real bmoe-cli lines (docs/formats.md section 3): the regexes must accept the engine itself.
REAL_LINES = [
    "generation: 256 tokens, 0.288 s/token (3.469 tok/s)",
    "prefill: 34 tokens, 10.845 s (3.1 tok/s) | model load 18.009 s | TTFT 28.853 s",
    "moe-stream: read 57509.4 MiB (224.65 MiB/token), decode 0.288 s/token (compute 0.161 + "
    "flash I/O 0.127 s/token, 1763 MiB/s)",
    "moe-stream: read 25127.0 MiB (98.15 MiB/token), decode 0.264 s/token (compute 0.200 + "
    "cache mgmt 0.014 + flash I/O 0.133 s/token, 739 MiB/s)",
    "moe-cache: 76.5% hit, resident 3997.9 MiB",
    "compute: 80.4% CPU occupancy (0.8478 cpu-s/token over 4 threads), 1003.71 major faults/token",
]


def run_probe(cache_dir, *args, csv=None, check=True):
    argv = [sys.executable, str(PROBE), "--cache-dir", str(cache_dir), *SMALL, *args]
    if csv:
        argv += ["--csv", str(csv)]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    if check:
        assert r.returncode == 0, r.stderr
    return r


def read_csv(path):
    lines = Path(path).read_text().splitlines()
    pre = [x for x in lines if x.startswith("#") and not x.startswith("# summary")]
    hi = lines.index(HEADER)
    rows = [dict(zip(HEADER.split(","), x.split(","))) for x in lines[hi + 1:]
            if not x.startswith("#")]
    trailers = [x for x in lines if x.startswith("# summary ")]
    trailer = dict(kv.split("=", 1) for kv in trailers[0].split()[2:]) if trailers else None
    return pre, rows, trailer, len(trailers)


def summary_lines(stdout):
    found = {}
    for line in stdout.splitlines():
        for name, rx in LINE_RES.items():
            m = re.match(rx, line)
            if m:
                found[name] = [float(g) if g is not None else None for g in m.groups()]
    return found


def text_of(stdout):
    return stdout.split("\ngeneration:")[0].strip()


def probe_odirect(directory):
    """None if O_DIRECT works in directory, else the errno it fails with."""
    import mmap
    fd0, p = tempfile.mkstemp(dir=directory)
    try:
        os.write(fd0, b"x" * 8192)
        os.close(fd0)
        fd = os.open(p, os.O_RDONLY | os.O_DIRECT)
        try:
            os.preadv(fd, [mmap.mmap(-1, 4096)], 0)
        finally:
            os.close(fd)
        return None
    except OSError as e:
        return e.errno
    finally:
        os.unlink(p)


def test_regexes_accept_real_engine_lines():
    for line in REAL_LINES:
        assert summary_lines(line), line


def test_csv_trailer_and_summary_lines(tmp_path):
    csv = tmp_path / "run.csv"
    r = run_probe(tmp_path / "cache", "-n", "12", "--cache-mb", "0.5", "--threads", "2", csv=csv)
    pre, rows, tr, ntrailers = read_csv(csv)
    assert pre[0] == "# bmoe_metrics v1"
    assert pre[1] == (f"# model=experts-L{L}-E{E}-64k.bin arch=moe-probe n_layer={L} "
                      f"n_expert={E} n_expert_used={K} threads=2 n_ctx=0")
    assert pre[2] == ("# moe_stream=1 cache_mb=0.5 cache_auto=0 cache_ceil_mb=0 force_cache=0 "
                      "io_threads=1 o_direct=0 overlap=0 prefetch=0 dense_weights=none io=pread "
                      "keep_frac=0.36")
    assert len(rows) == 12 and ntrailers == 1
    assert [int(x["step"]) for x in rows] == list(range(1, 13))
    assert all(x["steps"] == "12" for x in rows)
    for x in rows:  # 3 decimals for times, 2 for the hit rate, stall = io without overlap
        for c in ("wall_ms", "io_ms", "compute_ms", "stall_ms", "mgmt_ms", "cpu_ms"):
            assert re.fullmatch(r"\d+\.\d{3}", x[c]), (c, x[c])
        assert re.fullmatch(r"\d+\.\d{2}", x["cache_hit_pct"])
        assert x["stall_ms"] == x["io_ms"]
    keys = list(tr)
    assert [k for k in keys if k in TRAILER_KEYS] == TRAILER_KEYS  # all present, in engine order
    n = 12
    wall = sum(float(x["wall_ms"]) for x in rows) / 1e3
    io = sum(float(x["io_ms"]) for x in rows) / 1e3
    mgmt = sum(float(x["mgmt_ms"]) for x in rows) / 1e3
    assert int(tr["tokens"]) == n and int(tr["n_prompt"]) == 3
    assert abs(float(tr["tok/s"]) - n / wall) <= 0.0005 + 1e-9
    assert abs(float(tr["s/tok"]) - wall / n) <= 0.0005 + 1e-9
    assert abs(float(tr["io_s"]) - io) <= 0.005 + 1e-9
    assert abs(float(tr["io_s/tok"]) - io / n) <= 0.0005 + 1e-9
    assert tr["stall_s/tok"] == tr["io_s/tok"]
    assert abs(float(tr["mgmt_s/tok"]) - mgmt / n) <= 0.0005 + 1e-9
    comp = max(0.0, wall / n - io / n - mgmt / n)
    assert abs(float(tr["compute_s/tok"]) - comp) <= 0.0005 + 1e-9
    read_mib = sum(int(x["read_bytes"]) for x in rows) / 2**20
    assert abs(float(tr["read_MiB"]) - read_mib) <= 0.05 + 1e-9
    assert abs(float(tr["cache_hit_pct"]) - float(rows[-1]["cache_hit_pct"])) <= 0.05 + 1e-9
    assert abs(float(tr["majflt/tok"]) - sum(int(x["majflt"]) for x in rows) / n) <= 0.005
    # stdout: text, then the summary lines of section 3 agreeing with the trailer
    s = summary_lines(r.stdout)
    assert set(s) == {"generation", "prefill", "moe-stream", "moe-cache", "compute"}
    assert s["generation"][0] == n and s["generation"][2] == float(tr["tok/s"])
    assert s["prefill"][0] == 3
    load, prefill = float(tr["load_s"]), float(tr["prefill_s"])
    assert abs(s["prefill"][4] - (load + prefill)) <= 0.0015
    assert s["moe-stream"][0] == float(tr["read_MiB"])
    assert s["moe-stream"][4] == float(tr["mgmt_s/tok"])
    assert s["moe-cache"][0] == float(tr["cache_hit_pct"])
    assert s["moe-cache"][1] == 0.5  # 8 slots of 64 KiB, all filled
    assert len(text_of(r.stdout).split()) == n


def test_cache_off_reads_everything(tmp_path):
    csv = tmp_path / "run.csv"
    r = run_probe(tmp_path / "cache", "-n", "8", csv=csv)
    _, rows, tr, _ = read_csv(csv)
    assert all(x["cache_hit_pct"] == "-1.00" and x["mgmt_ms"] == "0.000" for x in rows)
    assert all(int(x["read_bytes"]) == L * K * S for x in rows)
    assert tr["cache_hit_pct"] == "-1.0"
    assert "moe-cache" not in summary_lines(r.stdout)


def test_hit_rate_rises_with_cache_and_matches_reads(tmp_path):
    hits = []
    for mb in ("0.25", "0.5", "1", "2", "4"):  # 4 .. 64 slots; 64 = the whole file
        csv = tmp_path / f"c{mb}.csv"
        run_probe(tmp_path / "cache", "-n", "16", "--cache-mb", mb, csv=csv)
        _, rows, tr, _ = read_csv(csv)
        missed = 0
        for i, x in enumerate(rows, 1):
            rb = int(x["read_bytes"])
            assert rb % S == 0 and 0 <= rb <= L * K * S  # read = experts missed x expert size
            missed += rb // S
            used = L * K * i  # cumulative over decode: hits / lookups
            assert x["cache_hit_pct"] == "%.2f" % (100.0 * (used - missed) / used)
        hits.append(float(tr["cache_hit_pct"]))
    assert hits == sorted(hits) and hits[-1] > hits[0]  # LRU: a bigger cache never hits less
    assert missed <= L * E  # the whole file fits: no expert is read twice


def test_expert_file_reused_and_replaced_when_wrong_size(tmp_path):
    cache = tmp_path / "cache"
    r1 = run_probe(cache, "-n", "2")
    f = cache / f"experts-L{L}-E{E}-64k.bin"
    assert f.stat().st_size == L * E * S and "created" in r1.stderr
    os.utime(f, ns=(10**18, 10**18))   # a stamp no write can leave: a rewrite would change it
    r2 = run_probe(cache, "-n", "2")
    assert f.stat().st_mtime_ns == 10**18 and "reused" in r2.stderr
    assert sorted(p.name for p in cache.iterdir()) == [f.name]  # no temp files left
    f.write_bytes(b"short")
    run_probe(cache, "-n", "2")
    assert f.stat().st_size == L * E * S


def test_killed_creation_leaves_no_expert_file(tmp_path):
    cache = tmp_path / "cache"
    big = ["--layers", "4", "--experts", "64", "--expert-mb", "1"]  # 256 MiB takes a while
    p = subprocess.Popen([sys.executable, str(PROBE), "--cache-dir", str(cache), *big, "-n", "1"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_until(lambda: cache.exists() and any(cache.iterdir()), 10, step=0.002)
    p.kill()
    p.wait()
    names = [x.name for x in cache.iterdir()]
    assert "experts-L4-E64-1024k.bin" not in names, "creation finished before the kill"
    assert names and all(".tmp." in x for x in names)
    # The next creation in that directory removes the dead creator's leftovers.
    run_probe(cache, "-n", "1")
    assert not any(".tmp." in x.name for x in cache.iterdir())


def test_text_deterministic_per_seed_and_routing(tmp_path):
    c = tmp_path / "cache"
    a = text_of(run_probe(c, "-n", "10", "--seed", "7").stdout)
    assert a == text_of(run_probe(c, "-n", "10", "--seed", "7").stdout)
    assert a == text_of(run_probe(c, "-n", "10", "--seed", "7", "--io", "mmap",
                                  "--cache-mb", "1").stdout)  # I/O settings do not route
    assert a != text_of(run_probe(c, "-n", "10", "--seed", "7", "--top-k", "2").stdout)
    assert a != text_of(run_probe(c, "-n", "10", "--seed", "8").stdout)


@pytest.mark.parametrize("mode", ["mmap", "pread"])
def test_modes_and_io_threads(tmp_path, mode):
    csv = tmp_path / "run.csv"
    run_probe(tmp_path / "cache", "-n", "4", "--io", mode, "--io-threads", "3", csv=csv)
    pre, rows, tr, _ = read_csv(csv)
    assert "io_threads=3 o_direct=0" in pre[2] and f"io={mode}" in pre[2]
    assert len(rows) == 4 and tr is not None


def odirect_dirs(want_refused):
    cands = ["/dev/shm", "/run/shm", "/run/user/%d" % os.getuid()] if want_refused else \
        [tempfile.gettempdir(), "/var/tmp", os.path.expanduser("~/.cache")]
    for d in cands:
        if os.path.isdir(d) and os.access(d, os.W_OK):
            err = probe_odirect(d)
            if (err == errno.EINVAL) == want_refused:
                return d
    return None


@pytest.fixture
def refusing_dir(tmp_path):
    """A directory on a file system that refuses O_DIRECT: tmpfs did before Linux 6.6; after
    it, a ramfs mount (root only) still does, like Android's FUSE /sdcard refuses in effect."""
    d = odirect_dirs(want_refused=True)
    if d is not None:
        yield d
        return
    mnt = tmp_path / "ramfs"
    mnt.mkdir()
    mounted = os.geteuid() == 0 and subprocess.run(
        ["mount", "-t", "ramfs", "orch-test-ramfs", str(mnt)], capture_output=True).returncode == 0
    if not mounted:
        message = "no file system here refuses O_DIRECT and ramfs cannot be mounted (not root)"
        unavailable(message)
    try:
        yield str(mnt)
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)


def test_odirect_refused_gives_warning_and_exit_3(refusing_dir):
    with tempfile.TemporaryDirectory(dir=refusing_dir) as cache:
        r = run_probe(cache, "-n", "2", "--io", "odirect", check=False)
        assert r.returncode == 3
        assert any(x.startswith(f"warning: O_DIRECT unsupported on {cache} (")
                   for x in r.stderr.splitlines()), r.stderr
        r = run_probe(cache, "-n", "2", "--io", "odirect", "--odirect-fallback")
        assert "falling back to pread" in r.stderr


def load_module():
    spec = importlib.util.spec_from_file_location("moe_probe_under_test", PROBE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("where", ["open", "read"])
def test_odirect_refusal_path_simulated(tmp_path, monkeypatch, capsys, where):
    """The same path on any machine: the file system's EINVAL is simulated at open or read."""
    mod = load_module()
    run_probe(tmp_path, "-n", "1")  # create the expert file outside the patch
    real_open = os.open

    def fake_open(path, flags, *a, **kw):
        if where == "open" and flags & getattr(os, "O_DIRECT", 0):
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_open(path, flags, *a, **kw)

    def fake_preadv(*a, **kw):
        raise OSError(errno.EINVAL, "Invalid argument")

    monkeypatch.setattr(os, "open", fake_open)
    if where == "read":
        monkeypatch.setattr(os, "preadv", fake_preadv)
    argv = ["--cache-dir", str(tmp_path), *SMALL, "-n", "2", "--io", "odirect"]
    assert mod.main(argv) == 3
    err = capsys.readouterr().err
    assert any(x.startswith(f"warning: O_DIRECT unsupported on {tmp_path} (")
               for x in err.splitlines()), err
    csv = tmp_path / "fb.csv"
    assert mod.main(argv + ["--odirect-fallback", "--csv", str(csv)]) == 0
    assert "falling back to pread" in capsys.readouterr().err
    pre, rows, tr, _ = read_csv(csv)
    assert "o_direct=0" in pre[2] and "io=pread" in pre[2] and len(rows) == 2


def test_odirect_where_supported(tmp_path):
    d = odirect_dirs(want_refused=False)
    if d is None:
        unavailable("no writable directory here supports O_DIRECT")
    with tempfile.TemporaryDirectory(dir=d) as cache:
        csv = Path(cache) / "run.csv"
        r = run_probe(cache, "-n", "4", "--io", "odirect", "--io-threads", "2", csv=csv)
        assert "warning" not in r.stderr
        pre, rows, tr, _ = read_csv(csv)
        assert "o_direct=1" in pre[2] and "io=odirect" in pre[2]
        assert all(int(x["read_bytes"]) == L * K * S for x in rows)


def test_sigterm_leaves_rows_without_trailer(tmp_path):
    csv = tmp_path / "run.csv"
    argv = [sys.executable, str(PROBE), "--cache-dir", str(tmp_path / "cache"), *SMALL,
            "--compute-kb", "64", "-n", "100000", "--csv", str(csv)]
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    first_seen = None

    def rows_seen() -> bool:
        nonlocal first_seen
        rows = read_csv(csv)[1] if csv.exists() and HEADER in csv.read_text() else []
        if rows and first_seen is None:
            first_seen = len(rows)
        return len(rows) > 8
    wait_until(rows_seen, 10, step=0.005)
    # Rows are flushed one by one: a block-buffered file would show ~100 rows at once.
    assert first_seen is not None and first_seen < 20
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=10)
    assert p.returncode == 143, err
    _, rows, tr, _ = read_csv(csv)
    assert rows and tr is None
