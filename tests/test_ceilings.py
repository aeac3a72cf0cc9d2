"""`orch ceilings` end to end on local, over SSH (the test sshd) and on the emulated phone
(real adb server): probes built, pushed once, run, stored; `orch devices --probe`; the compute
ceiling through llama-bench; the report's shares and verdicts."""
from __future__ import annotations

import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
from ci import unavailable
from cli_helpers import SMALL_PROBE_MATRIX, adb_device, orch, ssh_device
from sqlalchemy import select

from orchestrator.db import schema
from orchestrator.db.store import Store
from orchestrator.report.document.ceilings import verdict_words
from orchestrator.results.ceilings import Bound, judge
from orchestrator.tools import probe_build

SMALL = ["--size", "8", "--samples", "2", "--seconds", "0.05", "--lanes", "1,2",
         "--sizes", "64", "--mem-mib", "8", "--mem-passes", "2"]


@pytest.fixture(scope="module")
def probe_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("probes")


@pytest.fixture(autouse=True)
def cache(probe_cache, monkeypatch):
    monkeypatch.setenv("ORCH_PROBE_CACHE", str(probe_cache))
    try:
        probe_build.compiler("x86_64")
    except probe_build.ProbeBuildError as exc:
        unavailable(f"{exc} (scripts/install --test installs it)")


def _rows(db: str = "orch.db") -> list:
    store = Store.open(db)
    return store.fetch(select(schema.ceiling, schema.device.c.name)
                       .join(schema.device, schema.ceiling.c.device_id == schema.device.c.id))


def _measure_twice(device: str) -> tuple[str, str]:
    code, first = orch("ceilings", "-d", device, *SMALL)
    assert code == 0, first
    code, second = orch("ceilings", "-d", device, *SMALL)
    assert code == 0, second
    return first, second


def _check_stored(device: str, first: str, second: str) -> None:
    assert "probe iobench: pushed to" in first and "probe membench: pushed to" in first
    # the second measurement reuses the probes on the device: no second push
    assert "pushed to" not in second
    assert "probe iobench: cached on the device at" in second
    (row,) = [r for r in _rows() if r.name == device]          # one row per device and day
    assert row.seq_mibps > 0 and len(row.seq_samples) == 2
    assert {(c["lanes"], c["read_kib"]) for c in row.lanes} == {(1, 64), (2, 64)}
    assert row.knee_lanes in (1, 2) and row.knee_read_kib == 64 and row.best_mibps > 0
    assert row.dram_gibps > 0 and len(row.dram["passes"]) == 2
    assert row.compute_tps is None and "no dense model" in row.compute_note
    assert row.abi == "x86_64" and row.fstype
    assert "storage, sequential" in second and "MiB/s" in second


def test_local_measures_stores_and_reuses_the_probes(workspace):
    first, second = _measure_twice("local")
    _check_stored("local", first, second)
    code, out = orch("devices", "--probe", "-d", "local")
    assert code == 0 and "local ceilings" in out and "knee" in out, out
    code, out = orch("devices", "--probe", "-d", "other")
    assert code == 0 and "no ceilings stored (orch ceilings --device other)" in out


@pytest.mark.slow
def test_over_ssh(tmp_path, monkeypatch, sshd):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ORCH_DB", raising=False)
    (tmp_path / "devices.yaml").write_text(
        "devices:\n" + ssh_device("ssh-test", sshd, f"{tmp_path}/remote"))
    first, second = _measure_twice("ssh-test")
    _check_stored("ssh-test", first, second)
    assert f"{tmp_path}/remote/probes/x86_64/iobench-" in first


def test_on_the_emulated_phone(phone, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ORCH_DB", raising=False)
    (tmp_path / "devices.yaml").write_text("devices:\n" + adb_device("emu", phone))
    first, second = _measure_twice("emu")
    _check_stored("emu", first, second)
    leftovers = [p for p in Path(phone.data_dir, "orch").iterdir() if "iobench" in p.name]
    assert leftovers == []                                   # the test file was deleted


def test_compute_ceiling_with_a_dense_model(workspace):
    from orchestrator.tools import llamacpp_build as lb

    model = Path("~/.cache/orch/models/qwen3moe-tiny.gguf").expanduser()
    if lb.find_build() is None or not model.is_file():
        unavailable("llama.cpp build or the tiny model missing (scripts/test makes them)")
    code, out = orch("ceilings", *SMALL, "--dense-model", str(model), "--engine",
                     "llama-bench", "--tokens", "4", "--engine-flags", "-r 1 -t 1")
    assert code == 0, out
    (row,) = _rows()
    assert row.compute_tps > 0 and "llama-bench -n 4 -r 1 -t 1 on" in row.compute_note


def test_bad_options_and_unreachable_device(workspace):
    code, out = orch("ceilings", "--dense-model", "/m.gguf", *SMALL)
    assert code == 2 and "--dense-model and --engine go together" in out
    (workspace / "devices.yaml").write_text(textwrap.dedent("""\
        devices:
          gone:
            kind: ssh
            host: 127.0.0.1
            port: 1
            user: nobody
        """))
    code, out = orch("ceilings", "-d", "gone", *SMALL)
    assert code == 1 and "device error" in out
    assert _rows() == []


def _row(**values):
    base = {"best_mibps": None, "seq_mibps": None, "compute_tps": None}
    return SimpleNamespace(**{**base, **values})


def test_verdicts_and_shares():
    # the Celeron study: Q2_K at 0.175 tok/s against a ~2.0 tok/s compute ceiling, reading
    # ~800 MiB per token at ~140 of 150 MiB/s: I/O-bound
    j = judge({"mean": 0.175, "read_mib_per_token": 800.0, "compute_s_per_token": 0.4},
              _row(seq_mibps=150.0, compute_tps=2.0))
    assert j.io_share == pytest.approx(0.9333, abs=1e-3) and j.bounds == (Bound.IO,)
    assert j.compute_share == pytest.approx(0.0875) and j.ideal_tps == pytest.approx(2.5)
    j = judge({"mean": 1.9, "read_mib_per_token": 1.0}, _row(best_mibps=2460.0, compute_tps=2.0))
    assert j.bounds == (Bound.COMPUTE,) and j.ideal_tps is None
    j = judge({"mean": 1.0, "read_mib_per_token": 100.0},
              _row(best_mibps=2460.0, seq_mibps=1500.0, compute_tps=2.0))
    assert j.io_mibps == 2460.0 and j.bounds == ()
    assert judge({"mean": 1.0}, _row()).bounds is None
    # the words are the view's
    assert [verdict_words(b) for b in ((Bound.IO,), (Bound.IO, Bound.COMPUTE), (), None)] == \
        ["I/O-bound", "I/O-bound and compute-bound", "neither", "—"]


MATRIX = SMALL_PROBE_MATRIX.replace("probe-small", "probe-ceil")


def test_report_sets_configs_against_the_ceilings(workspace):
    (workspace / "m.yaml").write_text(textwrap.dedent(MATRIX))
    code, out = orch("run", "m.yaml")
    assert code == 0, out
    code, plain = orch("report", "--no-plots")
    assert code == 0 and "Against the device's ceilings" not in plain   # none stored yet
    code, out = orch("ceilings", *SMALL)
    assert code == 0, out
    code, text = orch("report", "--no-plots")
    assert code == 0, text
    assert "**Against the device's ceilings** (orch ceilings on local" in text
    lines = text.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("| Config | tok/s | of compute"))
    assert lines[head] == ("| Config | tok/s | of compute ceiling | read MiB/s | of I/O ceiling "
                           "| ideal tok/s (I/O free) | verdict | runs |")
    rows = [line.split(" | ") for line in lines[head + 2:head + 4]]
    assert [r[0] for r in rows] == ["| c0", "| c1"]
    for r in rows:
        assert r[2] == "—"                                   # no compute ceiling measured
        assert float(r[3]) > 0 and r[4].endswith("%")        # read rate and its I/O share
        assert r[6] in ("I/O-bound", "neither")
    assert "compute not measured (no dense model named" in text




def test_no_compiler_is_a_clear_error(workspace, tmp_path, monkeypatch):
    import os
    import shutil

    # the machine's own tools, but none of the compilers probe_build looks for
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    compilers = {"cc", "gcc", "x86_64-linux-gnu-gcc"}
    for folder in ("/usr/local/bin", "/usr/bin", "/bin", "/usr/sbin", "/sbin"):
        for entry in os.scandir(folder) if os.path.isdir(folder) else ():
            if entry.name not in compilers and not (bin_dir / entry.name).exists():
                os.symlink(entry.path, bin_dir / entry.name)
    assert shutil.which("gcc", path=str(bin_dir)) is None
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setenv("ORCH_PROBE_CACHE", str(tmp_path / "empty-cache"))
    code, out = orch("ceilings", *SMALL)
    assert code == 1 and "no C compiler for x86_64" in out and "apt-get install gcc" in out
    code, out = orch("ceilings", "--list")
    assert code == 0 and "no ceilings stored (orch ceilings --device local)" in out
    assert "no ceilings stored (orch ceilings --device other)" in out
