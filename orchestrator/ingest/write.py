"""One imported run into the store: its files' lines through the adapter's own parser, so an
imported run and a measured one agree; then the facts only files give (ingest/importer.py
decides which files belong together).

A run's start is what the study recorded (ingest/when.py) or was told (a design file,
`--measured`); only when nothing says it, its file time: it ended when its per-token CSV was
last written (the trailer), and started that long before as its load, prefill and decode took,
with time_source `mtime`. Never the import time. A per-token column of a quantity that cannot
be 0 (RSS, free RAM) that is 0 on every row is not stored: it was not measured.
"""
from __future__ import annotations

import datetime as dt
import re
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.config.plan import Cell
from orchestrator.db.runs import Runs
from orchestrator.db.writes import SAMPLE_FIELDS, write_batch
from orchestrator.db.store import Store
from orchestrator.engines.base import TOKEN_COLUMNS
from orchestrator.ingest.summaries import summary_run_record, turns_record
from orchestrator.engines.bmoe_format import (
    SIDECAR_KEY,
    BmoeCsvParser,
    parse_metrics_sidecar,
    split_log,
)
from orchestrator.engines.route_trace import RouteTrace
from orchestrator.ingest.checks import Refused, impossible_reason
from orchestrator.db.figures import compute_run
from orchestrator.ingest.figures import watch
from orchestrator.ingest.lines import lines
from orchestrator.ingest.state import state_lines
from orchestrator.ingest.when import MTIME_OUT_OF_RANGE, file_time
from orchestrator.record import KIB_PER_GIB, EntryState, Pressure, RunRecord, Turn
from orchestrator.run.recorder import RunRecorder
from orchestrator.stats import energy
from orchestrator.stats.status import Status

_MIB_PER_GIB = KIB_PER_GIB / 1024


@dataclass
class Planned:
    """A run about to be imported: what was read for it, then what the importer decided."""

    key: str                             # unique in the folder: its stem under its subfolder
    source: Path                         # its per-token CSV, or the log holding its section
    csv_text: str | None = None          # None: a summary-only run
    sidecars: list[tuple[Path, str]] = field(default_factory=list)
    stdout: list[str] = field(default_factory=list)   # a matched log section's lines
    trace: RouteTrace | None = None
    trace_digest: str | None = None      # sha256 of the trace file's bytes
    entry: dict[str, Any] | None = None  # driver log ENTRY (and "exit") STATE
    state: dict[str, Any] | None = None  # .state BEFORE/AFTER blocks (+ "file")
    shown: str = ""                      # its file relative to the folder [its section]
    settings: dict[str, Any] = field(default_factory=dict)   # the CSV preamble's key=values
    trailer: dict[str, Any] = field(default_factory=dict)    # its last `# summary`
    sidecar: dict[str, Any] | None = None                    # its `.metrics` values
    log_place: tuple[str, int] | None = None   # (log, section index) it was matched to
    # decided by the importer (ingest/importer.py) before it is written
    model: str = "-"
    config: str = ""
    repeat: int = 0
    order: int = 0
    started: dt.datetime | None = None   # recorded (ingest/when.py), design or --measured
    time_source: str | None = None
    flags: str | None = None             # a design config's flags, else the settings
    engine_build: str | None = None      # the design's, for files that name no build
    model_size: int | None = None        # the design's model file size in bytes
    warnings: list[str] = field(default_factory=list)
    encoding: str = "UTF-8"              # its file's, as ingest/encoding.py names it
    provenance: dict[str, Any] = field(default_factory=dict)   # record.extra["import"]
    turns: list[Turn] = field(default_factory=list)   # a session run's (turn records)
    samples: list[dict[str, Any]] = field(default_factory=list)   # device series rows
    samples_from: list[str] = field(default_factory=list)   # the series files they came from
    # every file that gave the run something, (its path in the folder, what it gave): the
    # report's provenance lists them (ingest/planning.py records them as it reads each)
    contributed: list[tuple[str, str]] = field(default_factory=list)


class _TokenMemory:
    """Peak rss_mib and lowest mem_available_mib over the token rows (22-column CSVs): the
    pressure table's values for a run with neither agent samples nor a sidecar that has them."""

    def __init__(self) -> None:
        self.rss: float | None = None
        self.avail: float | None = None
        # energy (stats/energy.py), streamed: no row kept, and a row without extra columns
        # (a plain CSV's every row) costs nothing more
        self.energy = energy.TokenEnergy()

    def __call__(self, row: Any, _seq: int) -> None:
        extra = row.extra
        if not extra:
            return
        self.energy.add(row.wall_ms, extra)
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
              start: Callable[..., Any], written: list[int] | None = None) -> list[str]:
    """Store the run as the importer named and placed it (plan.model, config, repeat, order,
    started, flags); return its parse problems (a missing trailer is its status instead).
    `start`: ingest/state.start_state, called with (sidecar, entry, state).
    All or nothing: the run is written in one store transaction (Store.transaction), so when
    anything fails while it is written (a file that vanished, the store, Ctrl-C or SIGTERM)
    nothing of it is kept and a failed import never leaves a `running` run behind; a file
    found impossible raises ingest/checks.py Refused so. `written`: the run's id is appended
    to it once it is stored. One transaction per run, not per import: SQLite's write lock is
    held for the transaction, and a concurrent `orch run` waits at most its busy timeout."""
    sidecar, out_lines = _sidecar_values(plan.sidecars)
    out_lines += plan.stdout
    with store.transaction():
        run_id = _create(store, adapter, session_id, device_id, plan)
        problems = _fill(store, adapter, run_id, plan, start, sidecar, out_lines)
    if written is not None:
        written.append(run_id)
    return problems


def _create(store: Store, adapter: Any, session_id: int, device_id: int, plan: Planned) -> int:
    cell = _cell(plan.config, plan.model, plan.repeat)
    return store.create_run(uid=uuid.uuid4().hex[:16], session_id=session_id,
                            device_id=device_id, cell_key=cell.key, model=plan.model,
                            config=plan.config, flags=None, repeat_index=plan.repeat,
                            order_index=plan.order, status=Status.RUNNING, engine=adapter.name,
                            superseded=False, remote_dir=str(plan.source),
                            source_file=plan.shown)


def _fill(store: Store, adapter: Any, run_id: int, plan: Planned, start: Callable[..., Any],
          sidecar: dict[str, Any] | None, out_lines: list[str]) -> list[str]:
    """The created run's tokens, route rows and final row (write_run)."""
    memory = _TokenMemory()
    parser = adapter.new_parser()
    recorder = RunRecorder(store, run_id, parser,
                           on_token=memory if _has_extra(plan.csv_text) else None)
    columns = watch(recorder)     # the figures' token columns, from the rows as they are stored
    # streamed: the CSV's lines one at a time into the recorder's batches, never a list of
    # them all
    csv_lines, unmeasured = not_measured(plan.csv_text or "")
    # the impossible values ingest/checks.py refuses a file for, found in this same pass: by
    # the adapter's own bmoe parser, else (another engine's parser) by one fed alongside it
    check = getattr(parser, "csv", None) if plan.csv_text is not None else None
    if plan.csv_text is not None and not isinstance(check, BmoeCsvParser):
        check = BmoeCsvParser()
        csv_lines = _fed(csv_lines, check.feed)
    # = handle("C\t" + line) for each line, without that string, in one frame
    recorder.handle_csv_lines(csv_lines)
    if check is not None and (why := impossible_reason(check)) is not None:
        raise Refused(plan.source, why)      # write_run deletes the run: nothing is kept
    for line in out_lines:
        recorder.handle("O\t" + line)
    recorder.flush()
    record = parser.record() if plan.csv_text is not None else \
        turns_record(plan.turns) if plan.turns else summary_run_record(plan.stdout)
    if plan.samples:
        _store_samples(store, recorder, plan.samples)
    if sidecar is not None:
        # the device pressure a measured run gets from the agent's samples
        record.pressure = Pressure.from_sidecar(sidecar)
        record.extra["sidecar"] = sidecar
    record.pressure = memory.fill(record.pressure)
    # energy: the CSV's power columns, else the sidecar's (stats/energy.py, docs/energy.md)
    def wall_s() -> float | None:     # the stored rows' summed wall time, as from_tokens sums
        return sum(w for w in Runs(store).walls(run_id) if w) / 1000 or None

    record.energy = memory.energy.result(recorder.token_seq, wall_s)
    if record.energy is None and sidecar is not None:
        decode_s = record.tokens / record.decode_tps if record.tokens and record.decode_tps \
            else wall_s()
        record.energy = energy.from_sidecar(sidecar, decode_s,
                                            record.tokens or recorder.token_seq)
    reported = state_lines([line for _, body in plan.sidecars for line in body.splitlines()]
                           + plan.stdout)
    if plan.entry is not None or plan.state is not None or reported:
        record.entry_state = EntryState(driver=plan.entry, state=plan.state,
                                        lines=reported or None)
    if plan.trace is not None:
        record.route_trace = plan.trace.meta()
        store.insert_route(run_id, plan.trace.rows)
    record.extra["import_key"] = plan.key
    record.extra["import"] = {"encoding": plan.encoding, **plan.provenance,
                              **({"samples_from": plan.samples_from} if plan.samples_from else {}),
                              "files": [{"path": path, "role": role} for path, role
                                        in dict.fromkeys(plan.contributed)]}
    status, cause = _status(plan, record)
    started, ended, source = _times(plan, record)
    temps, free_kb = start(sidecar, plan.entry, plan.state)
    warnings = plan.warnings + [f"{column} is 0 on every token: not measured (the program "
                                f"that wrote the CSV could not read it), shown as —"
                                for column in unmeasured]
    no_time = plan.csv_text is not None and source == "unknown"   # _times: mtime out of range
    if no_time:
        warnings.append(MTIME_OUT_OF_RANGE)
    flags = plan.flags if plan.flags is not None else \
        " ".join(f"{k}={v}" for k, v in record.settings.items()) or None
    build = record.engine_build or build_of(plan.trailer, out_lines) or plan.engine_build
    # every row stored: the run's figures, computed once (db/figures.py), from the rows the
    # recorder stored when they are all the run has, else read back
    stored = Runs(store).get(run_id)
    assert stored is not None, run_id   # written above, in this import
    row = stored.replace(flags=flags, engine_build=build)
    tokens = columns.tokens() if columns.usable(Runs(store).token_count(run_id)) else None
    figures = compute_run(store, row, record, tokens)
    store.update_run(run_id, status=status, cause=cause, summary=record.stored(),
                     figures=figures,
                     text=record.text or None, engine_build=build, model_size=plan.model_size,
                     flags=flags, started_at=started, ended_at=ended, time_source=source,
                     temp_start=temps, mem_avail_start_kb=free_kb, warnings=warnings or None,
                     cooldown_s=(plan.entry or {}).get("waited_s"))
    return [e for e in record.errors if "no '# summary' trailer" not in e] + \
        ([MTIME_OUT_OF_RANGE] if no_time else [])


def _store_samples(store: Store, recorder: RunRecorder, samples: list[dict[str, Any]]) -> None:
    """A device series' rows as the run's samples (ingest/series.py made them store rows),
    through the recorder's write path (its stored line count unchanged)."""
    rows = [{**dict.fromkeys(SAMPLE_FIELDS), "turn": None, "extra": None, **row,
             "run_id": recorder.run_id, "seq": seq} for seq, row in enumerate(samples)]
    write_batch(store, recorder.run_id, [], rows, [], recorder.stored_lines)


_KNOWN_COLUMNS = frozenset(TOKEN_COLUMNS) | {"steps"}    # what a TokenRow holds no extra for


def _has_extra(text: str | None) -> bool:
    """Whether a token row of this CSV can have `extra` columns (the only ones _TokenMemory
    reads): False only for one header, of TokenRow's own columns, so a plain CSV's rows need
    no per-row callback. "step," anywhere but that header counts as another header."""
    if not text or text.count("step,") != 1:
        return bool(text)
    start = 0 if text.startswith("step,") else text.find("\nstep,") + 1
    if start == 0 and not text.startswith("step,"):
        return True
    end = text.find("\n", start)
    header = text[start:end if end >= 0 else len(text)]
    return not {c.strip() for c in header.split(",")} <= _KNOWN_COLUMNS


def _fed(lines: Iterable[str], feed: Callable[[str], Any]) -> Iterator[str]:
    """The lines, each also given to `feed` as it passes."""
    for line in lines:
        feed(line)
        yield line


_BUILD_LINE = re.compile(r"^\s*(?:engine\s+)?(build|commit|version)\s*[:=]\s*(\S.*?)\s*$",
                         re.IGNORECASE)


def build_of(trailer: dict[str, Any], lines: list[str]) -> str | None:
    """The engine build the files name: the trailer's `build=` / `commit=`, else a log line
    `build: 3cb7ffb (10453)` (llama.cpp prints one), `commit: ...`, `version: ...`."""
    for key in ("build", "commit", "engine_build", "version"):
        if trailer.get(key) not in (None, ""):
            return str(trailer[key])
    for line in lines:
        found = _BUILD_LINE.match(line)
        if found:
            return found.group(2)
    return None


# Per-token columns of quantities that are never 0 on a running system: 0 on every row means
# the CSV's writer could not read them (Windows has no /proc), not that they were 0.
NEVER_ZERO = ("rss_mib", "rss_anon_mib", "mem_available_mib", "mem_free_mib")





def not_measured(text: str | list[str]) -> tuple[Iterable[str], list[str]]:
    """(the lines without the NEVER_ZERO columns that are 0 on every row, those columns).
    A text is read lazily (lines()): the check is one pass over the rows, the lines out another,
    neither a list of them all."""
    def each() -> Iterator[str]:
        return lines(text) if isinstance(text, str) else iter(text)

    header_line = next((line for line in each() if line.startswith("step,")), None)
    if header_line is None:
        return each(), []
    columns = header_line.rstrip("\r").split(",")
    wanted = {i: c for i, c in enumerate(columns) if c.strip() in NEVER_ZERO}
    if not wanted:
        return each(), []
    alive, seen = set(), False
    after = False
    for line in each():
        if not after:
            after = line is header_line or line == header_line
            continue
        if not line[:1].isdigit():
            continue
        seen = True
        r = line.split(",")
        for i in wanted:
            if i not in alive and not (len(r) == len(columns) and _zero(r[i])):
                alive.add(i)
        if len(alive) == len(wanted):
            break
    dead = [i for i in wanted if seen and i not in alive]
    if not dead:
        return each(), []
    keep = [i for i in range(len(columns)) if i not in dead]

    def out() -> Iterator[str]:
        after = False
        for line in each():
            if not after:
                after = line == header_line
                if not after:
                    yield line
                    continue
            fields = line.split(",")
            yield (",".join(fields[i] for i in keep) if len(fields) == len(columns)
                   and (line[:1].isdigit() or line.startswith("step,")) else line)

    return out(), [wanted[i].strip() for i in dead]


def _zero(text: str) -> bool:
    try:
        return float(text) == 0.0
    except ValueError:
        return False


def _status(plan: Planned, record: RunRecord) -> tuple[str, str | None]:
    if record.complete:
        return Status.OK, None
    if plan.csv_text is None:
        return Status.INTERRUPTED, "no 'generation:' line in its section: the run did not finish"
    return Status.INTERRUPTED, "no '# summary' trailer: the run was killed or the file cut"


def _times(plan: Planned, record: RunRecord
           ) -> tuple[dt.datetime | None, dt.datetime | None, str | None]:
    """(started, ended, time_source). A start the study recorded (plan.started, ingest/when.py)
    or was given (design, --measured) ends that long after as load, prefill and decode took;
    else the CSV was last written when the run ended (its trailer), and it started that long
    before: a guess from the file time, said so by time_source `mtime`."""
    took = _duration(record)
    if plan.started is not None:
        return plan.started, plan.started + took if took is not None else None, \
            plan.time_source
    if plan.csv_text is None:
        return None, None, "unknown"
    ended = file_time(plan.source)
    if ended is None:
        return None, None, "unknown"
    return (ended - took if took is not None else None), ended, "mtime"


def _duration(record: RunRecord) -> dt.timedelta | None:
    ttft = record.ttft_s if record.ttft_s is not None else \
        (record.load_s or 0.0) + (record.prefill_s or 0.0)
    if not record.tokens or not record.decode_tps or not ttft:
        return None
    return dt.timedelta(seconds=ttft + record.tokens / record.decode_tps)


def _cell(config: str, model: str, repeat: int) -> Cell:
    """An imported run's cell: its model, config and repeat as the importer named them."""
    return Cell(model=model, model_path=None, config=config, flags="", repeat=repeat)
