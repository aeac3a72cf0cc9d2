"""`orch ceilings`: measure a device's hardware ceilings and store them.

Storage and memory are measured by the C probes (probes/*.c, built static per ABI by
tools/probe_build.py), pushed like the agent: content-addressed names, pushed only when the
device lacks that sha256. Compute is a dense model's decode rate through llama-bench when one
is named (the Celeron study's ceiling), else NULL with the reason. One row per device and UTC
day (a second measurement that day replaces the first)."""
from __future__ import annotations

import datetime as dt
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from orchestrator.db.ceilings import replace_day
from orchestrator.db.store import Store
from orchestrator.engines.base import CellSpec
from orchestrator.engines.llama_bench import LlamaBenchAdapter, LlamaBenchRunParser
from orchestrator.errors import ConfigError
from orchestrator.run.pathcheck import probe_paths
from orchestrator.run.probe_output import (
    IoResult,
    MemResult,
    knee,
    parse_iobench,
    parse_membench,
)
from orchestrator.tools import probe_build
from orchestrator.transports.base import Transport, TransportError

Event = Callable[[str], None]
COMPUTE_ENGINES = ("llama-bench",)
# the probe's stderr joins its stdout, so a usage error reaches the error message
_MERGED = '"$0" "$@" 2>&1'


@dataclass
class CeilingOptions:
    path: str | None = None               # directory read (default: the device's workdir)
    size_mib: int = 256
    samples: int = 3
    seconds: float = 2.0                  # per lanes x size cell
    lanes: tuple[int, ...] = (1, 2, 4, 8)
    sizes_kib: tuple[int, ...] = (64, 256, 1024, 4096)
    mem_mib: int = 256
    mem_passes: int = 5
    dense_model: str | None = None        # path on the device
    engine: str | None = None             # llama-bench
    binary: str | None = None             # the engine on the device (local: orch's build)
    engine_flags: str = ""
    tokens: int = 32


@dataclass
class Measurement:
    abi: str
    probe_sha: str
    path: str
    fstype: str
    io: IoResult
    mem: MemResult
    compute_tps: float | None
    compute_note: str
    notes: list[str] = field(default_factory=list)
    measured_at: dt.datetime = field(default_factory=lambda: dt.datetime.now(dt.UTC))

    @property
    def knee(self) -> tuple[int | None, int | None]:
        return knee(self.io.lanes)


def device_abi(transport: Transport) -> str:
    """The device's ABI from `uname -m` over the transport."""
    result = transport.run(["uname", "-m"], timeout=30)
    if result.rc != 0:
        raise TransportError(f"{transport.name}: uname -m failed (rc {result.rc}): "
                             f"{result.stderr.decode(errors='replace')[:200]}")
    return probe_build.abi_of_machine(result.stdout.decode(errors="replace"))


def install_probes(transport: Transport, build: probe_build.ProbeBuild,
                   event: Event) -> dict[str, str]:
    """Push each probe under `<workdir>/probes/<abi>/<name>-<sha>` unless the device has it;
    says which (the event line `probe NAME: pushed` or `probe NAME: cached on the device`)."""
    paths = {}
    for name in probe_build.PROBES:
        remote = f"{transport.workdir}/probes/{build.abi}/{name}-{build.sha}"
        pushed = transport.push_if_changed(build.binary(name), remote, mode=0o755)
        event(f"probe {name}: {'pushed to' if pushed else 'cached on the device at'} {remote}")
        paths[name] = remote
    return paths


def _run_probe(transport: Transport, argv: list[str], timeout: float) -> str:
    result = transport.run([transport.shell, "-c", _MERGED, *argv], timeout=timeout)
    text = result.stdout.decode("utf-8", errors="replace")
    if result.rc not in (0, 1):   # 1: the probe's own `error` record says why
        raise TransportError(f"{transport.name}: {argv[0]} failed (rc {result.rc}): "
                             f"{(text + result.stderr.decode(errors='replace'))[-400:]}")
    return text


def _io_argv(binary: str, path: str, o: CeilingOptions) -> list[str]:
    return [binary, "--path", path, "--size", str(o.size_mib), "--samples", str(o.samples),
            "--seconds", f"{o.seconds:g}", "--lanes", ",".join(map(str, o.lanes)),
            "--sizes", ",".join(map(str, o.sizes_kib))]


def _io_timeout(o: CeilingOptions) -> float:
    # writing and reading the file at a slow 10 MiB/s, plus every sweep cell's bound
    return 120 + 3 * o.size_mib / 10 + o.seconds * len(o.lanes) * len(o.sizes_kib) * 2


def compute_ceiling(transport: Transport, o: CeilingOptions,
                    event: Event) -> tuple[float | None, str]:
    """(tok/s, note): the dense model's llama-bench decode rate, or None and the reason."""
    if o.dense_model is None:
        return None, "no dense model named (orch ceilings --dense-model PATH --engine llama-bench)"
    if o.engine not in COMPUTE_ENGINES:
        raise ConfigError(f"--engine: the compute ceiling is measured with "
                          f"{', '.join(COMPUTE_ENGINES)}, not {o.engine!r}")
    binary = o.binary
    if binary is None and transport.kind == "local":
        from orchestrator.tools.llamacpp_build import find_build

        found = find_build()
        binary = str(found.binary("llama-bench")) if found else None
    if binary is None:
        raise ConfigError("--binary: the path of llama-bench on the device (orch's own build "
                          "is used only on `local`, after `orch engines build llama.cpp`)")
    flags = shlex.split(o.engine_flags) or ["-r", "2"]
    argv = LlamaBenchAdapter().build_argv(CellSpec(binary, o.dense_model, "", o.tokens, flags, ""))
    event(f"compute: {' '.join(shlex.quote(a) for a in argv)}")
    result = transport.run(argv, timeout=1800)
    parser = LlamaBenchRunParser()
    for line in result.stdout.decode("utf-8", errors="replace").splitlines():
        parser.feed("O", line)
    for line in result.stderr.decode("utf-8", errors="replace").splitlines():
        parser.feed("E", line)
    record = parser.record()
    what = f"llama-bench -n {o.tokens} {' '.join(flags)} on {o.dense_model}"
    if result.rc != 0 or record.decode_tps is None:
        why = "; ".join(record.errors) or f"rc {result.rc}"
        tail = " | ".join(record.stderr_tail[-3:])
        return None, f"{what} gave no decode rate: {why}" + (f" ({tail[:300]})" if tail else "")
    build = f" (build {record.engine_build})" if record.engine_build else ""
    return record.decode_tps, what + build


def measure(transport: Transport, o: CeilingOptions, event: Event) -> Measurement:
    """Build (if needed) and push the probes for the device's ABI, run them, and the compute
    ceiling; `event` gets one line per step (progress, push or cache)."""
    abi = device_abi(transport)
    event(f"{transport.name}: ABI {abi}")
    build = probe_build.build(abi, log=event)
    probes = install_probes(transport, build, event)
    path = transport.expand_home(o.path or transport.workdir)
    info = probe_paths(transport, [path]).get(path)
    if info is None or not info.exists:
        raise ConfigError(f"--path: {path} does not exist on {transport.name}")
    notes = []
    if (problem := info.problem()) is not None:
        notes.append(f"{path} is {problem}")
    event(f"storage: {o.size_mib} MiB test file in {path} ({info.fstype or '?'}); "
          f"{len(o.lanes) * len(o.sizes_kib)} lanes x size cells of <= {o.seconds:g} s")
    io = parse_iobench(_run_probe(transport, _io_argv(probes["iobench"], path, o),
                                  _io_timeout(o)))
    if not io.direct:
        notes.append(f"O_DIRECT not used ({io.reason}): buffered reads after "
                     f"posix_fadvise(DONTNEED); the figure may include the page cache")
    event(f"memory: {o.mem_mib} MiB x {o.mem_passes} passes")
    mem = parse_membench(_run_probe(transport, [probes["membench"], "--mib", str(o.mem_mib),
                                                "--passes", str(o.mem_passes)], 600))
    compute, note = compute_ceiling(transport, o, event)
    return Measurement(abi, build.sha, path, info.fstype, io, mem, compute, note, notes)


def save(store: Store, device_id: int, m: Measurement) -> int:
    """Store the measurement as the device's row of its UTC day (replacing an earlier one)."""
    day = m.measured_at.astimezone(dt.UTC).strftime("%Y-%m-%d")
    knee_lanes, knee_kib = m.knee
    row: dict[str, Any] = {
        "device_id": device_id, "day": day, "measured_at": m.measured_at, "abi": m.abi,
        "probe_sha": m.probe_sha, "path": m.path, "fstype": m.fstype or None,
        "direct": m.io.direct, "seq_mibps": m.io.seq_median, "seq_samples": m.io.seq,
        "lanes": m.io.lanes, "best_mibps": m.io.best, "knee_lanes": knee_lanes,
        "knee_read_kib": knee_kib, "dram_gibps": m.mem.median,
        "dram": {"best_gibps": m.mem.best, "passes": m.mem.passes, "threads": m.mem.threads,
                 "mib": m.mem.mib},
        "compute_tps": m.compute_tps, "compute_note": m.compute_note, "notes": m.notes,
    }
    return replace_day(store, row)

