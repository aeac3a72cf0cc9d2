"""One imported run into the store: its files' lines through the adapter's own parser, so an
imported run and a measured one agree; then the facts only files give (ingest/importer.py
decides which files belong together).

A run's times are its files' times: it ended when its per-token CSV was last written (the
trailer), and started that long before as its load, prefill and decode took; never the import
time. A summary-only run (a matrix stdout section) has no file of its own: no times.
"""
from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.config.plan import Cell
from orchestrator.db.store import Store
from orchestrator.engines.bmoe import summary_record
from orchestrator.engines.bmoe_format import (
    SIDECAR_KEY,
    parse_metrics_sidecar,
    split_log,
)
from orchestrator.engines.route_trace import RouteTrace
from orchestrator.record import KIB_PER_GIB, EntryState, Pressure, RunRecord
from orchestrator.run.recorder import RunRecorder

_MIB_PER_GIB = KIB_PER_GIB / 1024


@dataclass
class Planned:
    """A run about to be imported: what was read for it."""

    config: str                          # the run's name in the session
    source: Path                         # its per-token CSV, or the stdout holding its section
    model_prefix: str | None             # the file-name part a --model PREFIX=NAME rule matches
    csv_text: str | None = None          # None: a summary-only run
    sidecars: list[tuple[Path, str]] = field(default_factory=list)
    stdout: list[str] = field(default_factory=list)   # a matrix stdout section's lines
    trace: RouteTrace | None = None
    trace_digest: str | None = None      # sha256 of the trace file's bytes
    entry: dict[str, Any] | None = None  # driver log ENTRY STATE
    state: dict[str, Any] | None = None  # .state BEFORE/AFTER blocks (+ "file")
    shown: str = ""                      # how messages name it: file [section]


class _TokenMemory:
    """Peak rss_mib and lowest mem_available_mib over the token rows (22-column CSVs): the
    pressure table's values for a run with neither agent samples nor a sidecar that has them."""

    def __init__(self) -> None:
        self.rss: float | None = None
        self.avail: float | None = None

    def __call__(self, row: Any, _seq: int) -> None:
        extra = row.extra
        if not extra:
            return
        rss, avail = extra.get("rss_mib"), extra.get("mem_available_mib")
        if rss is not None and (self.rss is None or rss > self.rss):
            self.rss = rss
        if avail is not None and (self.avail is None or avail < self.avail):
            self.avail = avail

    def fill(self, pressure: Pressure | None) -> Pressure | None:
        if self.rss is None and self.avail is None:
            return pressure
        out = pressure.model_copy() if pressure is not None else Pressure()
        if out.peak_rss_gib is None and self.rss is not None:
            out.peak_rss_gib = self.rss / _MIB_PER_GIB
        if out.mem_floor_gib is None and self.avail is not None:
            out.mem_floor_gib = self.avail / _MIB_PER_GIB
        return out


def _sidecar_values(sidecars: list[tuple[Path, str]]) -> tuple[dict[str, Any] | None, list[str]]:
    """(the `.metrics` values, else a `.log`'s sidecar lines; the stdout lines of .log / .out)."""
    sidecar: dict[str, Any] | None = None
    out_lines: list[str] = []
    for path, body in sidecars:
        if path.suffix == ".metrics":
            sidecar = parse_metrics_sidecar(body)
    for path, body in sidecars:
        if path.suffix == ".log":   # summary lines, then the sidecar's key=value lines
            metrics = split_log(body)["metrics"]
            if sidecar is None and any(v is not None for v in metrics.values()):
                sidecar = metrics
            out_lines.extend(l for l in body.splitlines() if not SIDECAR_KEY.match(l.strip()))
        elif path.suffix == ".out":
            out_lines.extend(body.splitlines())
    return sidecar, out_lines


def write_run(store: Store, adapter: Any, session_id: int, device_id: int, plan: Planned,
              order: int, model_of: Callable[[Any], str], start: Callable[..., Any]) -> list[str]:
    """Store the run; return its parse problems (a missing trailer is its status instead).
    `model_of`: the run's model from its preamble's `model=` (None without one); `start`:
    import_state.start_state, called with (sidecar, entry, state)."""
    sidecar, out_lines = _sidecar_values(plan.sidecars)
    out_lines += plan.stdout
    run_id = store.create_run(uid=uuid.uuid4().hex[:16], session_id=session_id,
                              device_id=device_id, cell_key=_cell(plan.config, "-").key,
                              model="-", config=plan.config, flags=None, repeat_index=0,
                              order_index=order, status="running", engine=adapter.name,
                              superseded=False, remote_dir=str(plan.source))
    memory = _TokenMemory()
    parser = adapter.new_parser()
    recorder = RunRecorder(store, run_id, parser, on_token=memory)
    for line in (plan.csv_text or "").splitlines():
        recorder.handle("C\t" + line)
    for line in out_lines:
        recorder.handle("O\t" + line)
    recorder.flush()
    record = parser.record() if plan.csv_text is not None else summary_record(plan.stdout)
    if sidecar is not None:
        # the device pressure a measured run gets from the agent's samples
        record.pressure = Pressure.from_sidecar(sidecar)
        record.extra["sidecar"] = sidecar
    record.pressure = memory.fill(record.pressure)
    if plan.entry is not None or plan.state is not None:
        record.entry_state = EntryState(driver=plan.entry, state=plan.state)
    if plan.trace is not None:
        record.route_trace = plan.trace.meta()
        store.insert_route(run_id, plan.trace.rows)
    model = model_of(record.settings.get("model"))
    status, cause = _status(plan, record)
    started, ended = _times(plan, record)
    temps, free_kb = start(sidecar, plan.entry, plan.state)
    store.update_run(run_id, status=status, cause=cause, summary=record.stored(),
                     text=record.text or None, engine_build=record.engine_build, model=model,
                     cell_key=_cell(plan.config, model).key,
                     flags=" ".join(f"{k}={v}" for k, v in record.settings.items()) or None,
                     started_at=started, ended_at=ended, temp_start=temps,
                     mem_avail_start_kb=free_kb, cooldown_s=(plan.entry or {}).get("waited_s"))
    return [e for e in record.errors if "no '# summary' trailer" not in e]


def _status(plan: Planned, record: RunRecord) -> tuple[str, str | None]:
    if record.complete:
        return "ok", None
    if plan.csv_text is None:
        return "interrupted", "no 'generation:' line in its section: the run did not finish"
    return "interrupted", "no '# summary' trailer: the run was killed or the file cut"


def _times(plan: Planned, record: RunRecord) -> tuple[dt.datetime | None, dt.datetime | None]:
    """(started, ended) from the files: the CSV was last written when the run ended (its
    trailer); the start is that minus load, prefill and decode, when the record has them."""
    if plan.csv_text is None:
        return None, None
    ended = dt.datetime.fromtimestamp(plan.source.stat().st_mtime, dt.UTC)
    ttft = record.ttft_s if record.ttft_s is not None else \
        (record.load_s or 0.0) + (record.prefill_s or 0.0)
    if not record.tokens or not record.decode_tps or not ttft:
        return None, ended
    return ended - dt.timedelta(seconds=ttft + record.tokens / record.decode_tps), ended


def _cell(config: str, model: str) -> Cell:
    """An imported run is the one repeat of the cell (its model, config = its name)."""
    return Cell(model=model, model_path=None, config=config, flags="", repeat=0)
