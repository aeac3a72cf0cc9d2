"""`orch import`: a study folder as it is (a tree of bmoe CSVs, sidecars, logs) -> one session.

ONE session per folder given, subfolders included: a run found in a subfolder is named by its
path, `warmup/gemma_k6` beside the top folder's `gemma_k6`, so same-stem files in different
subfolders stay two runs (one session per subfolder would split what the study measured as one
day into sessions `orch table` and the report never show together).

Which file is what: ingest/scan.py; what makes a file unreadable as what it claims:
ingest/checks.py; matrix stdout sections: ingest/sections.py; entry state
(driver logs, `.state`): ingest/state.py; one run into the store:
ingest/write.py. Every file not imported is reported with its reason.

Importing a folder again imports only files that changed (their runs are replaced, never
duplicated), with the options stored at the first import; `replace=True` re-imports every run
with the options given now.
"""
from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from orchestrator import __version__
from orchestrator.db.runs import SessionRow, Sessions
from orchestrator.db.store import Store, now
from orchestrator.engines.route_trace import RouteTrace, parse_route_trace
from orchestrator.errors import ConfigError
from orchestrator.ingest import sections as import_sections
from orchestrator.ingest.checks import csv_reason, read_regular, text_reason
from orchestrator.ingest.scan import ROUTE_SUFFIX, RunFiles, Scan, scan
from orchestrator.ingest.state import (
    driver_entries,
    driver_log_entries,
    parse_state,
    start_state,
)
from orchestrator.ingest.write import Planned, write_run
from orchestrator.plugins import get_adapter
from orchestrator.run import controller

__all__ = ["ROUTE_SUFFIX", "ImportOptions", "ImportReport", "driver_entries", "import_dir",
           "model_rules"]

MAX_FILE = 512 * 1024 * 1024   # a per-token CSV of a 256-token run is ~50 KB; refuse absurd files
ALL_RUNS = "*"                 # model_rules key: the model of every run


class ImportOptions(BaseModel):
    """What `orch import` was told; stored with the session (session.import_options)."""

    device: str = "imported"
    name: str | None = None
    label: str | None = None
    model: dict[str, str] = Field(default_factory=dict)   # see model_rules


@dataclass
class ImportReport:
    session_id: int | None                   # None: nothing imported, no session kept
    imported: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)   # (file, reason)
    problems: list[str] = field(default_factory=list)   # imported runs' parse problems
    ignored: list[str] = field(default_factory=list)    # options a re-import did not apply
    kept: int = 0                                       # --replace found nothing: runs kept

    @property
    def ok(self) -> bool:
        """Whether the session has runs from this folder (exit 0)."""
        return bool(self.imported or self.unchanged)


def model_rules(values: Sequence[str]) -> dict[str, str]:
    """`--model NAME` (every run) and `--model PREFIX=NAME` (runs whose file name starts with
    `PREFIX_`, e.g. `gptoss=gpt-oss-120b` for gptoss_k2.csv) -> {"*" or PREFIX: NAME}."""
    rules: dict[str, str] = {}
    for value in values:
        prefix, sep, name = value.partition("=")
        if sep and (not prefix or not name):
            raise ConfigError(f"--model {value!r}: expected NAME or PREFIX=NAME")
        rules[prefix if sep else ALL_RUNS] = name if sep else value
    return rules


def _model(rules: Mapping[str, str], prefix: str | None, preamble: Any) -> str:
    """The model a run measured: --model, else a --model rule for its file-name prefix, else
    the CSV preamble's `model=` file name, else the file-name prefix (bench-run.sh writes
    `<model>_<config>`: qwen_sg.csv), else "-". Runs of one model form one group in tables and
    reports, with its own baseline: deltas never cross models."""
    if ALL_RUNS in rules:
        return rules[ALL_RUNS]
    if prefix and prefix in rules:
        return rules[prefix]
    if preamble:
        return str(preamble)
    return prefix or "-"


def _find_session(store: Store, source: str) -> SessionRow | None:
    rows = Sessions(store).imports_of(source)
    return rows[0] if rows else None


def _options(row: SessionRow | None, given: dict[str, Any], replace: bool) -> tuple[ImportOptions, list[str]]:
    """The options this import applies, and those it ignores: a folder imported before keeps
    its stored options unless `replace` (its runs must not mix two devices or model rules)."""
    stored = ImportOptions.model_validate(row.import_options) \
        if row is not None and row.import_options else None
    if stored is None or replace:
        return ImportOptions(**given), []
    ignored = [f"--{k} {v!r} (stored: {getattr(stored, k)!r})" for k, v in given.items()
               if getattr(stored, k) != v]
    return stored, ignored


def import_dir(store: Store, directory: str | Path, engine: str = "bmoe",
               device: str | None = None, name: str | None = None,
               model: Mapping[str, str] | None = None, label: str | None = None,
               replace: bool = False, max_bytes: int = MAX_FILE) -> ImportReport:
    """Import a folder (recursively) as one session; see the module doc."""
    folder = Path(directory).resolve()
    if not folder.is_dir():
        raise ConfigError(f"{directory}: not a directory")
    try:
        adapter = get_adapter(engine)
    except KeyError as exc:
        raise ConfigError(str(exc.args[0])) from None
    source = str(folder)
    row = _find_session(store, source)
    given = {k: v for k, v in (("device", device), ("name", name), ("label", label),
                               ("model", dict(model) if model else None)) if v is not None}
    opts, ignored = _options(row, given, replace)
    found = scan(folder, max_bytes)
    report = ImportReport(row.id if row is not None else None, ignored=ignored,
                          skipped=found.skipped)
    plans = _plan(found, report)
    if not plans and row is None:
        return report
    sid = row.id if row is not None else store.create_session(
        kind="import", name=opts.name or folder.name, matrix_name=opts.name or folder.name,
        source_dir=source, orch_version=__version__, git_rev=controller.git_revision(),
        python_version=controller.python_version(), controller_host=controller.host(),
        started_at=now())
    report.session_id = sid
    old = store.runs(sid, include_superseded=True)
    existing = {} if replace else {r.config: r for r in old}
    known = {} if replace else {r.path: r.sha256 for r in Sessions(store).imported_files([sid])}
    device_id = store.upsert_device(opts.device, "imported")
    order = max((r.order_index for r in old), default=-1) + 1
    digests: dict[str, str] = {}
    for plan in plans:
        digest = _digest(plan)
        if known.get(plan.config) == digest and plan.config in existing:
            report.unchanged.append(plan.config)
            continue
        if plan.config in existing:        # a changed file: its run is replaced
            store.delete_run(existing[plan.config].id)
        problems = write_run(store, adapter, sid, device_id, plan, order,
                             lambda pre, p=plan.model_prefix, r=opts.model: _model(r, p, pre),
                             start_state)
        order += 1
        report.problems.extend(f"{plan.shown}: {p}" for p in problems)
        digests[plan.config] = digest
        report.imported.append(plan.config)
    _finish(store, report, sid, row is None, old if replace else None, digests, opts, folder)
    return report


def _finish(store: Store, report: ImportReport, sid: int, new: bool, replaced: list[Any] | None,
            digests: dict[str, str], opts: ImportOptions, folder: Path) -> None:
    """Session bookkeeping after the runs: drop a new session that got nothing; with
    --replace (`replaced`: the runs before it), drop the old runs only once new ones are in,
    else keep them and say so."""
    if not report.ok:
        if new:
            store.delete_session(sid)
            report.session_id = None
        report.kept = len(replaced or [])
        return
    if replaced is not None:
        for run in replaced:
            store.delete_run(run.id)
        store.forget_imported_files(sid)
    for config, digest in digests.items():
        store.set_imported_file(sid, config, digest)
    store.update_session(sid, name=opts.name or folder.name, matrix_name=opts.name or folder.name,
                         label=opts.label, import_options=opts.model_dump(), ended_at=now())


def _digest(plan: Planned) -> str:
    """What the run was imported from: its files' bytes, its stdout section, its entry state
    (a driver log or .state file added later changes the run)."""
    sha = hashlib.sha256()
    sha.update((plan.csv_text or "").encode() + b"\0")
    for path, body in plan.sidecars:
        sha.update(path.name.encode() + b"\0" + body.encode() + b"\0")
    sha.update("\n".join(plan.stdout).encode() + b"\0")
    sha.update((plan.trace_digest or "").encode())
    sha.update(json.dumps([plan.entry, plan.state], sort_keys=True, default=str).encode())
    return sha.hexdigest()


def _read_text(path: Path) -> tuple[str | None, str | None]:
    """(text, None) or (None, why it cannot be read as text)."""
    try:
        data = read_regular(path)
    except OSError as exc:
        return None, f"unreadable: {exc.strerror or exc}"
    reason = text_reason(data)
    if reason:
        return None, reason
    return data.decode("utf-8", errors="replace").lstrip("\ufeff"), None


def _rel(found_path: Path, config: str) -> str:
    """A file's name as the user sees it: under the run's subfolder."""
    folder = config.rpartition("/")[0]
    return f"{folder}/{found_path.name}" if folder else found_path.name


def _plan(found: Scan, report: ImportReport) -> list[Planned]:
    """Read what the scan found; every file that cannot be used goes to report.skipped."""
    skip = report.skipped.append
    plans: list[Planned] = []
    entries: dict[str, dict[str, dict[str, Any]]] = {}
    for rel, logs in found.driver_logs.items():
        for log in logs:
            text, why = _read_text(log)
            got = driver_log_entries(log.name, text) if text is not None else {}
            stems = {r.csv.stem for r in found.runs if r.config.rpartition("/")[0] == rel}
            if why or not set(got) & stems:
                skip((f"{rel}/{log.name}" if rel else log.name,
                      why or "driver log whose sections name no run of its folder"))
            entries.setdefault(rel, {}).update(got)
    for files in found.runs:
        plan = _plan_run(files, entries.get(files.config.rpartition("/")[0], {}), skip)
        if plan is not None:
            plans.append(plan)
    _plan_stdouts(found, plans, skip)
    return plans


def _plan_run(files: RunFiles, entries: dict[str, dict[str, Any]], skip: Any) -> Planned | None:
    text, why = _read_text(files.csv)
    why = why or (csv_reason(text) if text is not None else None)
    if why or text is None:
        skip((_rel(files.csv, files.config), why))
        return None
    stem = files.config.rpartition("/")[2]
    prefix, sep, _ = stem.partition("_")
    plan = Planned(files.config, files.csv, prefix if sep and prefix else None, text,
                   entry=entries.get(stem), shown=_rel(files.csv, files.config))
    for side in files.sidecars:
        body, why = _read_text(side)
        if body is None:
            skip((_rel(side, files.config), f"{why} (sidecar; the run imports without it)"))
        else:
            plan.sidecars.append((side, body))
    if files.state is not None:
        body, why = _read_text(files.state)
        if body is None:
            skip((_rel(files.state, files.config), f"{why} (state file)"))
        else:
            plan.state = {**parse_state(body), "file": files.state.name}
    if files.route is not None:
        plan.trace, plan.trace_digest, why = _trace(files.route)
        if plan.trace is None:
            skip((_rel(files.route, files.config), f"not a readable route trace: {why}"))
            skip((_rel(files.csv, files.config), (f"the traced run's route trace is unreadable: "
                                                 f"{files.route.name}: {why}")))
            return None
    return plan


def _trace(route: Path) -> tuple[RouteTrace | None, str | None, str | None]:
    """(the trace, its bytes' sha256, None), or (None, None, why it cannot be read)."""
    try:
        data = read_regular(route)
        why = text_reason(data)
        if why is None:
            trace = parse_route_trace(data.decode("utf-8", errors="replace"))
            return trace, hashlib.sha256(data).hexdigest(), None
    except (OSError, ValueError) as exc:
        why = str(exc)
    return None, None, why


def _plan_stdouts(found: Scan, plans: list[Planned], skip: Any) -> None:
    """Matrix stdout files: sections that are a CSV run's stdout join it; the others with
    summary lines become summary-only runs (ingest/sections.py)."""
    for rel, path in found.stdouts:
        shown = f"{rel}/{path.name}" if rel else path.name
        text, why = _read_text(path)
        if text is None:
            skip((shown, why))
            continue
        secs, empty = import_sections.sections(path, text)
        if not secs:
            skip((shown, (f"no {path.stem}.csv (not a sidecar) and no engine summary lines "
                         "(not a matrix stdout)")))
            continue
        for tag in empty:
            skip((f"{shown} [{tag}]", "section without engine summary lines"))
        here = [p for p in plans if p.csv_text is not None and p.config.rpartition("/")[0] == rel]
        trailers = {p.config: import_sections.trailer(p.csv_text or "") for p in here}
        head = re.split(r"[-_]", path.stem, maxsplit=1)
        prefix = head[0] if len(head) > 1 and head[0] else None
        taken = {p.config for p in plans}
        for sec in secs:
            name = sec.name if sec.name != "(before the first section)" else path.stem
            owner = next((p for p in here if import_sections.same_run(
                sec, p.config.rpartition("/")[2], trailers[p.config])), None)
            if owner is not None:
                if not any(s.suffix in (".out", ".log") for s, _ in owner.sidecars):
                    owner.stdout = sec.lines     # its text and summary lines
                continue
            config = f"{rel}/{name}" if rel else name
            if config in taken:
                config = f"{rel}/{path.stem}/{name}" if rel else f"{path.stem}/{name}"
            taken.add(config)
            plans.append(Planned(config, path, prefix, stdout=sec.lines,
                                 shown=f"{shown} [{sec.name}]"))
