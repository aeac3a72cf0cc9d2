"""`orch import`: existing engine artifacts (a folder of bmoe CSVs, sidecars, logs) -> a session.

One run per per-token CSV, named by the file's stem (its config name). Next to a CSV, files with
the same stem add what they tell: `.metrics` (device pressure sidecar), `.log` (summary lines +
sidecar, UTF-8 BOM), `.out` (the whole stdout: text and summary lines). The file contents are
fed through the same adapter parser a live run uses, so imported and measured runs agree.
A `<tag>.route.csv` expert-routing trace (route-trace.md) is one run with `<tag>.metrics`,
which is then that run's per-token CSV: its rows go to the `route` table, its preamble and
layer sizes to the record's extra["route_trace"].

What a measured run gets from its cooldown and first sample, an imported one gets from its
files, so the same comparability checks (results/drift.py) run on it: the start temperature and
free RAM from the sidecar's `*_before_*` values, and from a driver log (`driver*.log`: a
`==== NAME ====` section per run with an `ENTRY STATE: batt=380 dC, memavail=... kB,
freq=..., waited=180s` line) the cooldown waited and the CPU frequency at entry. A run's
times are its files' times: it ended when its per-token CSV was last written (the trailer),
and started that long before as its load, prefill and decode took; never the import time.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import re
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import select

from orchestrator import __version__
from orchestrator.config.plan import Cell
from orchestrator.config.yamlfile import ConfigError
from orchestrator.db import schema
from orchestrator.db.store import Store, now
from orchestrator.engines import get_adapter
from orchestrator.engines.bmoe_format import (
    SIDECAR_KEY,
    parse_metrics_sidecar,
    split_log,
)
from orchestrator.record import Pressure, RunRecord
from orchestrator.results.route_trace import RouteTrace, read_route_trace
from orchestrator.run import controller
from orchestrator.run.recorder import RunRecorder

ROUTE_SUFFIX = ".route.csv"   # bmoe-cli --route-trace; its run's per-token CSV is <tag>.metrics
MAX_FILE = 512 * 1024 * 1024   # a per-token CSV of a 256-token run is ~50 KB; refuse absurd files
_SECTION = re.compile(r"^=+ (\S.*?) =+$")
_ENTRY_ITEM = re.compile(r"(\w+)=(-?\d+)\s*(dC|kB|s)?")
_ENTRY_KEYS = {"batt": "batt_temp_dC", "memavail": "mem_avail_kb", "freq": "cpu_khz",
               "waited": "waited_s"}


@dataclass
class ImportReport:
    session_id: int
    imported: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)   # per-file messages, printed to the user


def _read_text(path: Path) -> str:
    data = path.read_bytes()
    return data.decode("utf-8", errors="replace").lstrip("\ufeff")


def _digest(paths: list[Path]) -> str:
    sha = hashlib.sha256()
    for path in paths:
        sha.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return sha.hexdigest()


def _find_session(store: Store, source: str) -> int | None:
    rows = store.fetch(select(schema.session.c.id).where(schema.session.c.kind == "import",
                                                         schema.session.c.source_dir == source))
    return rows[0].id if rows else None


def import_dir(store: Store, directory: str | Path, engine: str = "bmoe",
               device: str = "imported", name: str | None = None) -> ImportReport:
    folder = Path(directory).resolve()
    if not folder.is_dir():
        raise ConfigError(f"{directory}: not a directory")
    csvs = sorted(p for p in folder.glob("*.csv") if not p.name.endswith(ROUTE_SUFFIX))
    traces = {p.name[:-len(ROUTE_SUFFIX)]: p for p in folder.glob("*" + ROUTE_SUFFIX)}
    # a traced run's per-token rows are in <tag>.metrics (route-trace.md §1), one run with its trace
    csvs += sorted(folder / f"{tag}.metrics" for tag in traces
                   if tag not in {c.stem for c in csvs} and (folder / f"{tag}.metrics").is_file())
    if not csvs:
        raise ConfigError(f"{directory}: no per-token .csv files to import")
    try:
        adapter = get_adapter(engine)
    except KeyError as exc:
        raise ConfigError(str(exc.args[0])) from None
    source = str(folder)
    session_id = _find_session(store, source)
    if session_id is None:
        session_id = store.create_session(
            kind="import", name=name or folder.name, matrix_name=name or folder.name,
            source_dir=source, orch_version=__version__, git_rev=controller.git_revision(),
            python_version=controller.python_version(), controller_host=controller.host(),
            started_at=now())
    elif name:
        store.update_session(session_id, name=name, matrix_name=name)
    device_id = store.upsert_device(device, "imported")
    report = ImportReport(session_id)
    known = {r.path: r for r in store.fetch(select(schema.imported_file)
                                            .where(schema.imported_file.c.session_id == session_id))}
    existing = {r.config: r for r in store.runs(session_id, include_superseded=True)}
    entries = driver_entries(folder)
    for order, csv in enumerate(csvs):
        sidecars = [p for p in (csv.with_suffix(s) for s in (".metrics", ".log", ".out"))
                    if p.exists() and p != csv]
        route = traces.get(csv.stem)
        files = [csv, *sidecars, *([route] if route else [])]
        digest = _digest(files)
        stem = csv.stem
        if stem in known and known[stem].sha256 == digest and stem in existing:
            report.unchanged.append(stem)
            continue
        try:
            problems = _import_run(store, adapter, session_id, device_id, csv, sidecars, order,
                                   existing.get(stem), entries.get(stem), route)
        except (OSError, ValueError) as exc:
            report.problems.append(f"{csv.name}: not imported: {exc}")
            continue
        report.problems.extend(f"{csv.name}: {p}" for p in problems)
        store.set_imported_file(session_id, stem, digest)
        report.imported.append(stem)
    store.update_session(session_id, ended_at=now())
    return report


def driver_entries(folder: Path) -> dict[str, dict[str, Any]]:
    """Run name -> what its driver log's ENTRY STATE line says (batt_temp_dC, mem_avail_kb,
    cpu_khz, waited_s) plus the log's name, from every `driver*.log` of the folder."""
    entries: dict[str, dict[str, Any]] = {}
    for log in sorted(folder.glob("driver*.log")):
        section = None
        for line in _read_text(log).splitlines():
            line = line.strip()
            head = _SECTION.match(line)
            if head:
                section = head.group(1)
            elif line.startswith("ENTRY STATE:") and section:
                found = {_ENTRY_KEYS[k]: int(v) for k, v, _ in _ENTRY_ITEM.findall(line)
                         if k in _ENTRY_KEYS}
                entries[section] = {**found, "log": log.name}
    return entries


def _times(csv: Path, record: RunRecord) -> tuple[dt.datetime, dt.datetime | None]:
    """(started, ended) from the files: the CSV was last written when the run ended (its
    trailer); the start is that minus load, prefill and decode, when the record has them."""
    ended = dt.datetime.fromtimestamp(csv.stat().st_mtime, dt.timezone.utc)
    ttft = record.ttft_s if record.ttft_s is not None else \
        (record.load_s or 0.0) + (record.prefill_s or 0.0)
    if not record.tokens or not record.decode_tps or not ttft:
        return ended, None
    return ended, ended - dt.timedelta(seconds=ttft + record.tokens / record.decode_tps)


def _start_state(sidecar: dict[str, Any] | None,
                 entry: dict[str, Any] | None) -> tuple[dict[str, int] | None, int | None]:
    """(temp_start, mem_avail_start_kb) as a measured run stores them, from the sidecar's
    before-values, else the driver log's entry state."""
    side, entry = sidecar or {}, entry or {}
    temps = {"cpu_temp_mC": side.get("cpu_temp_before_mC"),
             "batt_temp_dC": side.get("batt_temp_before_dC", entry.get("batt_temp_dC"))}
    temps = {k: int(v) for k, v in temps.items() if isinstance(v, (int, float))}
    free = side.get("mem_avail_before_kb", entry.get("mem_avail_kb"))
    return temps or None, int(free) if isinstance(free, (int, float)) else None


def _import_run(store: Store, adapter: Any, session_id: int, device_id: int, csv: Path,
                sidecars: list[Path], order: int, previous: Any,
                entry: dict[str, Any] | None, route: Path | None = None) -> list[str]:
    if csv.stat().st_size > MAX_FILE:
        raise ValueError(f"larger than {MAX_FILE >> 20} MiB")
    trace = _trace(route) if route is not None else None
    text = _read_text(csv)
    if "step," not in text:
        raise ValueError("no header row starting 'step,' (not a per-token CSV, or binary)")
    sidecar: dict[str, Any] | None = None
    out_lines: list[str] = []
    for path in sidecars:
        body = _read_text(path)
        if path.suffix == ".metrics":
            sidecar = parse_metrics_sidecar(body)
        elif path.suffix == ".log":   # summary lines, then the sidecar's key=value lines
            metrics = split_log(body)["metrics"]
            if sidecar is None and any(v is not None for v in metrics.values()):
                sidecar = metrics
            out_lines.extend(l for l in body.splitlines() if not SIDECAR_KEY.match(l.strip()))
        else:
            out_lines.extend(body.splitlines())
    if previous is not None:   # re-import of a changed file: replace, never duplicate
        store.delete_run(previous.id)
    run_id = store.create_run(uid=uuid.uuid4().hex[:16], session_id=session_id,
                              device_id=device_id, cell_key=_cell(csv, "-").key, model="-",
                              config=csv.stem, flags=None, repeat_index=0, order_index=order,
                              status="running", engine=adapter.name, superseded=False,
                              remote_dir=str(csv))
    parser = adapter.new_parser()
    recorder = RunRecorder(store, run_id, parser)
    for line in text.splitlines():
        recorder.handle("C\t" + line)
    for line in out_lines:
        recorder.handle("O\t" + line)
    recorder.flush()
    record = parser.record()
    if sidecar is not None:
        # the device pressure a measured run gets from the agent's samples
        record.pressure = Pressure.from_sidecar(sidecar)
        record.extra["sidecar"] = sidecar
    if entry is not None:
        record.extra["driver"] = entry
    if trace is not None:
        record.extra["route_trace"] = trace.meta()
        store.insert_route(run_id, trace.rows)
    model = _model_name(csv, record.settings.get("model"))
    status = "ok" if record.complete else "interrupted"
    cause = None if record.complete else "no '# summary' trailer: the run was killed or the file cut"
    ended, started = _times(csv, record)
    temps, free_kb = _start_state(sidecar, entry)
    store.update_run(run_id, status=status, cause=cause, summary=record.stored(),
                     text=record.text or None, engine_build=record.engine_build, model=model,
                     cell_key=_cell(csv, model).key,
                     flags=" ".join(f"{k}={v}" for k, v in record.settings.items()) or None,
                     started_at=started, ended_at=ended, temp_start=temps,
                     mem_avail_start_kb=free_kb,
                     cooldown_s=(entry or {}).get("waited_s"))
    return [e for e in record.errors if "no '# summary' trailer" not in e]


def _trace(route: Path) -> RouteTrace:
    if route.stat().st_size > MAX_FILE:
        raise ValueError(f"{route.name}: larger than {MAX_FILE >> 20} MiB")
    try:
        return read_route_trace(route)
    except ValueError as exc:
        raise ValueError(f"{route.name}: {exc}") from None


def _model_name(csv: Path, preamble_model: Any) -> str:
    """The model a run measured: the CSV preamble's `model=` file name, else
    the part of the file name before its first `_` (bench-run.sh writes `<model>_<config>`:
    qwen_sg.csv, gemma_base_ov.csv), else "-". Runs of one model form one group in tables
    and reports, with its own baseline: deltas never cross models."""
    if preamble_model:
        return str(preamble_model)
    prefix, sep, _ = csv.stem.partition("_")
    return prefix if sep and prefix else "-"


def _cell(csv: Path, model: str) -> Cell:
    """An imported run is the one repeat of the cell (its model, config = the file's stem)."""
    return Cell(model=model, model_path=None, config=csv.stem, flags="", repeat=0)
