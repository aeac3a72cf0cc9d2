"""`orch import`: existing engine artifacts (a folder of bmoe CSVs, sidecars, logs) -> a session.

One run per per-token CSV, named by the file's stem (its config name). Next to a CSV, files with
the same stem add what they tell: `.metrics` (device pressure sidecar), `.log` (summary lines +
sidecar, UTF-8 BOM), `.out` (the whole stdout: text and summary lines). The file contents are
fed through the same adapter parser a live run uses, so imported and measured runs agree.
"""
from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import select

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
from orchestrator.record import Pressure
from orchestrator.run.recorder import RunRecorder

MAX_FILE = 512 * 1024 * 1024   # a per-token CSV of a 256-token run is ~50 KB; refuse absurd files


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
    csvs = sorted(folder.glob("*.csv"))
    if not csvs:
        raise ConfigError(f"{directory}: no per-token .csv files to import")
    try:
        adapter = get_adapter(engine)
    except KeyError as exc:
        raise ConfigError(str(exc.args[0])) from None
    source = str(folder)
    session_id = _find_session(store, source)
    if session_id is None:
        session_id = store.create_session(kind="import", name=name or folder.name,
                                          matrix_name=name or folder.name, source_dir=source)
    elif name:
        store.update_session(session_id, name=name, matrix_name=name)
    device_id = store.upsert_device(device, "imported")
    report = ImportReport(session_id)
    known = {r.path: r for r in store.fetch(select(schema.imported_file)
                                            .where(schema.imported_file.c.session_id == session_id))}
    existing = {r.config: r for r in store.runs(session_id, include_superseded=True)}
    for order, csv in enumerate(csvs):
        sidecars = [p for p in (csv.with_suffix(s) for s in (".metrics", ".log", ".out")) if p.exists()]
        files = [csv, *sidecars]
        digest = _digest(files)
        stem = csv.stem
        if stem in known and known[stem].sha256 == digest and stem in existing:
            report.unchanged.append(stem)
            continue
        try:
            problems = _import_run(store, adapter, session_id, device_id, csv, sidecars, order,
                                   existing.get(stem))
        except (OSError, ValueError) as exc:
            report.problems.append(f"{csv.name}: not imported: {exc}")
            continue
        report.problems.extend(f"{csv.name}: {p}" for p in problems)
        store.set_imported_file(session_id, stem, digest)
        report.imported.append(stem)
    store.update_session(session_id, ended_at=now())
    return report


def _import_run(store: Store, adapter: Any, session_id: int, device_id: int, csv: Path,
                sidecars: list[Path], order: int, previous: Any) -> list[str]:
    if csv.stat().st_size > MAX_FILE:
        raise ValueError(f"larger than {MAX_FILE >> 20} MiB")
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
    model = str(record.settings.get("model") or "-")
    status = "ok" if record.complete else "interrupted"
    cause = None if record.complete else "no '# summary' trailer: the run was killed or the file cut"
    store.update_run(run_id, status=status, cause=cause, summary=record.stored(),
                     text=record.text or None, engine_build=record.engine_build, model=model,
                     cell_key=_cell(csv, model).key,
                     flags=" ".join(f"{k}={v}" for k, v in record.settings.items()) or None,
                     ended_at=now())
    return [e for e in record.errors if "no '# summary' trailer" not in e]


def _cell(csv: Path, model: str) -> Cell:
    """An imported run is the one repeat of the cell (its model, config = the file's stem)."""
    return Cell(model=model, model_path=None, config=csv.stem, flags="", repeat=0)
