"""The ceiling probes (probes/*.c): built static for x86_64 and arm64, run natively and under
qemu-user, their output parsed; the knee; clear errors for a missing compiler or ABI."""
from __future__ import annotations

import shutil
import subprocess

import pytest
from ci import unavailable

from orchestrator.run.probe_output import (
    ProbeOutputError,
    knee,
    parse_iobench,
    parse_membench,
)
from orchestrator.tools import probe_build

SMALL_IO = ["--size", "8", "--samples", "2", "--seconds", "0.1", "--lanes", "1,2",
            "--sizes", "64,256"]


@pytest.fixture(scope="module")
def probe_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("probes")


@pytest.fixture
def cache(probe_cache, monkeypatch):
    monkeypatch.setenv("ORCH_PROBE_CACHE", str(probe_cache))
    return probe_cache


def _build(abi: str) -> probe_build.ProbeBuild:
    try:
        probe_build.compiler(abi)
    except probe_build.ProbeBuildError as exc:
        unavailable(f"{exc} (scripts/install --test installs it)")
    return probe_build.build(abi, log=lambda line: None)


def test_x86_64_build_runs_and_parses(cache, tmp_path):
    build = _build("x86_64")
    io = parse_iobench(subprocess.run([str(build.binary("iobench")), "--path", str(tmp_path),
                                       *SMALL_IO], capture_output=True, text=True,
                                      timeout=120, check=True).stdout)
    assert len(io.seq) == 2 and io.seq_median > 0
    assert {(c["lanes"], c["read_kib"]) for c in io.lanes} == {(1, 64), (2, 64), (1, 256),
                                                              (2, 256)}
    assert all(c["mibps"] > 0 for c in io.lanes)
    assert not list(tmp_path.iterdir())            # the test file is gone
    mem = parse_membench(subprocess.run([str(build.binary("membench")), "--mib", "8",
                                         "--passes", "2"], capture_output=True, text=True,
                                        timeout=120, check=True).stdout)
    assert len(mem.passes) == 2 and mem.median > 0 and mem.threads >= 1


def test_buffered_fallback_says_so(cache, tmp_path):
    build = _build("x86_64")
    out = subprocess.run([str(build.binary("iobench")), "--path", str(tmp_path), *SMALL_IO,
                          "--buffered", "--no-sweep"], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    io = parse_iobench(out)
    assert not io.direct and "buffered" in out and io.lanes == []


def test_second_build_comes_from_the_cache(cache):
    _build("x86_64")
    lines: list[str] = []
    again = probe_build.build("x86_64", log=lines.append)
    assert any("cached" in line for line in lines) and again.binary("iobench").is_file()
    assert again.root.parent.parent == cache and again.root.name == "x86_64"


def test_arm64_build_runs_under_qemu_user(cache, tmp_path):
    build = _build("arm64")
    qemu = shutil.which("qemu-aarch64-static")
    if qemu is None:
        unavailable("qemu-aarch64-static is not installed (Debian: qemu-user-static)")
    elf = build.binary("iobench").read_bytes()[:20]
    assert elf[:4] == b"\x7fELF" and int.from_bytes(elf[18:20], "little") == 183  # EM_AARCH64
    io = parse_iobench(subprocess.run([qemu, str(build.binary("iobench")), "--path",
                                       str(tmp_path), *SMALL_IO], capture_output=True,
                                      text=True, timeout=300, check=True).stdout)
    assert io.seq_median > 0 and io.best > 0
    mem = parse_membench(subprocess.run([qemu, str(build.binary("membench")), "--mib", "8",
                                         "--passes", "2"], capture_output=True, text=True,
                                        timeout=300, check=True).stdout)
    assert mem.best > 0


def test_missing_compiler_and_unknown_abi_are_clear(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))           # no compiler anywhere
    with pytest.raises(probe_build.ProbeBuildError, match="gcc-aarch64-linux-gnu"):
        probe_build.compiler("arm64")
    with pytest.raises(probe_build.ProbeBuildError, match="unknown ABI 'mips'"):
        probe_build.abi_of_machine("mips\n")
    assert probe_build.abi_of_machine("aarch64\n") == "arm64"
    assert probe_build.abi_of_machine("x86_64") == "x86_64"


def test_knee_is_the_fewest_lanes_within_95_percent_of_the_best():
    cells = [{"lanes": n, "read_kib": 1024, "mibps": v}
             for n, v in ((1, 1200.0), (2, 2400.0), (4, 2460.0), (8, 2455.0))]
    cells += [{"lanes": n, "read_kib": 64, "mibps": 900.0 * n} for n in (1, 2)]
    assert knee(cells) == (2, 1024)          # 2400 >= 0.95 * 2460, 1 lane is not
    assert knee([]) == (None, None)


def test_output_without_a_result_is_an_error():
    with pytest.raises(ProbeOutputError, match="without a result"):
        parse_iobench("iobench version=1\nmode direct=1\nseq offset_mib=0 mib=1 seconds=1 "
                      "mibps=1\n")
    with pytest.raises(ProbeOutputError, match="create test file: Permission denied"):
        parse_iobench("iobench version=1\nerror msg=create test file: Permission denied\n")
    io = parse_iobench("mode direct=0 reason=O_DIRECT open refused (Invalid argument); "
                       "buffered\nseq offset_mib=0 mib=4 seconds=0.5 mibps=8\ndone\n")
    assert io.reason.startswith("O_DIRECT open refused (Invalid argument)")
