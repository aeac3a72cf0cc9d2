"""`orch import`: a study folder as it is (a tree of bmoe CSVs, sidecars, logs) -> one session,
with each run as it was measured: when it ran, which model, which config, which repeat.

ONE session per folder given, subfolders included: a run found in a subfolder is named by its
path, `warmup/gemma_k6` beside the top folder's `gemma_k6`, so same-stem files in different
subfolders stay two runs (one session per subfolder would split what the study measured as one
day into sessions `orch table` and the report never show together).

The steps: which file is what (ingest/scan.py) and whether it is what it claims
(ingest/checks.py); the files read into planned runs, with driver-log sections matched to
them by content (ingest/planning.py, ingest/sections.py); then, over all runs at once, each
run's model (`model_of`), start (ingest/when.py), config and repeat (ingest/grouping.py) and
place in the order (`_order`); a design file (config/design.py) says what files cannot. Then
one run at a time into the store (ingest/write.py), each in one transaction: a run whose write
fails is rolled back and its file reported as skipped. One import of a folder at a time
(db/session_lock.py `import_lock`, taken before the session is looked up). Every file not
imported is reported with its reason. docs/import.md says how each fact is found and how to
override it.

Importing a folder again imports only files that changed (their runs are replaced, never
duplicated), with the options stored at the first import, and renames, regroups and reorders
the others as the folder now says; `replace=True` re-imports every run with the options given
now.

About 430 lines on purpose: the steps after planning (each run's model, start, config,
repeat and order, decided over all runs at once; then the writes, renames and the session's
end) share the import's options, its report and its lock; the steps that stand alone are
already modules of their own (listed above).
"""
from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from orchestrator.config.design import Design, design_from_stored, parse_measured
from orchestrator.config.plan import Cell
from orchestrator.db.rows import RunRow, SessionRow
from orchestrator.db.runs import Runs, Sessions
from orchestrator.db.session_lock import import_lock
from orchestrator.db.store import Store, now
from orchestrator.ingest import planning
from orchestrator.ingest.checks import Refused
from orchestrator.ingest.full_store import store_full, undo_and_fail
from orchestrator.ingest.grouping import Member, name_configs
from orchestrator.ingest.naming import (
    model_from_file_name,
    model_from_path,
    model_globs,
    rule_model,
)
from orchestrator.ingest.request import MAX_FILE, ImportRequest
from orchestrator.ingest.scan import ROUTE_SUFFIX, scan
from orchestrator.ingest.state import driver_entries, start_state
from orchestrator.ingest.when import file_time, folder_date, recorded_start
from orchestrator.ingest.write import Planned, write_run
from orchestrator.run.controller import SessionProvenance

__all__ = ["ROUTE_SUFFIX", "ImportOptions", "ImportReport", "driver_entries", "import_dir",
           "model_rules"]

class ImportOptions(BaseModel):
    """What `orch import` was told; stored with the session (session.import_options)."""

    device: str = "imported"
    name: str | None = None
    label: str | None = None
    model: dict[str, str] = Field(default_factory=dict)   # see naming.model_globs
    measured: str | None = None          # --measured: the start of runs whose files say none
    design: dict[str, Any] | None = None  # --design: the design file as read (Design.stored)


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


model_rules = model_globs      # the CLI's name for it


def model_of(planned: Planned, rules: Mapping[str, str], design: Design | None) -> str:
    """The model a run measured: a --model rule for its path, the design's models, the files'
    own word (the CSV preamble's `model=`, the route trace's, the `.metrics` sidecar's), else
    a model-family word of its path (ingest/naming.py), else "-". Runs of one model form one
    group in tables and reports, with its own baseline: deltas never cross models."""
    rel = _file_of(planned)
    trace = planned.trace.preamble.get("model") if planned.trace is not None else None
    return (rule_model(rules, rel)
            or (design.model_of(rel) if design is not None else None)
            or model_from_file_name(planned.settings.get("model"))
            or model_from_file_name(trace)
            or model_from_file_name((planned.sidecar or {}).get("model"))
            or model_from_path(rel) or "-")


def _file_of(planned: Planned) -> str:
    """The run's file relative to the folder (a section's: its log's)."""
    return planned.shown.split(" [", 1)[0]


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
               replace: bool = False, max_bytes: int = MAX_FILE,
               measured: str | None = None, design: str | Path | None = None) -> ImportReport:
    """Import a folder (recursively) as one session; see the module doc. `measured`: the
    start (YYYY-MM-DD[THH:MM]) of runs whose files record none; `design`: a design file."""
    request = ImportRequest.checked(directory, engine, design, device=device, name=name,
                                    model=model, label=label, replace=replace,
                                    max_bytes=max_bytes, measured=measured)
    with import_lock(store, str(request.folder)):   # before the session is looked up
        refused: dict[Path, str] = {}
        while True:
            try:
                return _import_locked(store, request, refused)
            except Refused as exc:
                # a CSV found impossible while it was written: what this attempt wrote is
                # undone (_import_locked), and the folder is planned again without the file,
                # so the other runs are named, matched and ordered as if it had been refused
                # before anything was written (ingest/checks.py csv_reason)
                refused[exc.path] = exc.reason


def _import_locked(store: Store, request: ImportRequest,
                   refused: Mapping[Path, str]) -> ImportReport:
    """One attempt at the folder, its lock held: plan every run, then write them."""
    folder = request.folder
    row = _find_session(store, str(folder))
    given = request.given()
    opts, ignored = _options(row, given, request.replace)
    the_design = design_from_stored(opts.design)
    found = scan(folder, request.max_bytes,
                 the_design.file_rule if the_design is not None else None)
    report = ImportReport(row.id if row is not None else None, ignored=ignored,
                          skipped=found.skipped)
    plans = planning.plan(found, report.skipped.append, refused)
    if not plans and row is None:
        return report
    decide(plans, opts, the_design, folder)
    if "device" not in given and opts.device == ImportOptions().device \
            and the_design is not None and the_design.device is not None:
        opts.device = the_design.device.name      # the design names it; --device wins
    sid = row.id if row is not None else _new_session(store, opts, folder)
    report.session_id = sid
    old = Runs(store).current(sid, include_superseded=True)
    writer = RunWriter(store, request.adapter, sid, store.upsert_device(opts.device, "imported"),
                       report, old, replace=request.replace)
    try:
        writer.write_all(plans, drop_session=row is None)
        _finish(store, report, sid, row is None, old if request.replace else None,
                writer.digests, opts, folder, the_design)
    except Exception as exc:
        if not store_full(exc):
            raise
        # the attempt is taken back whole: a partial import with a raw driver error is none
        raise undo_and_fail(store, exc, folder, writer.written,
                            sid if row is None else None) from None
    return report


def _new_session(store: Store, opts: ImportOptions, folder: Path) -> int:
    """The session row of a folder imported for the first time."""
    return store.create_session(
        kind="import", name=opts.name or folder.name, matrix_name=opts.name or folder.name,
        source_dir=str(folder), **SessionProvenance.collect().columns(), started_at=now())


@dataclass
class RunWriter:
    """Writes one attempt's planned runs into session `sid`, each all or nothing, and keeps
    what undoing the attempt needs: the runs it wrote, the runs it replaces."""

    store: Store
    adapter: Any
    sid: int
    device_id: int
    report: ImportReport
    old: list[RunRow]                  # the session's runs before this import
    replace: bool = False              # --replace: every run is written anew
    digests: dict[str, str] = field(default_factory=dict)
    written: list[int] = field(default_factory=list)
    replaced: list[int] = field(default_factory=list)   # deleted once every run is in

    def __post_init__(self) -> None:
        self.existing = {} if self.replace else {_key_of(r): r for r in self.old}
        self.known = {} if self.replace else {
            r.path: r.sha256 for r in Sessions(self.store).imported_files([self.sid])}

    def write_all(self, plans: list[Planned], drop_session: bool) -> None:
        """Every planned run, then the runs they replace are deleted. On a Refused, what was
        written is undone (and the session, `drop_session`: a new one) for import_dir to plan
        again, the replaced runs kept for it to find (the renames of unchanged runs are made
        again by the next attempt); on any other error, the runs replaced so far are gone,
        as before."""
        try:
            for planned in plans:
                self.write(planned)
        except Refused:
            for run_id in self.written:
                self.store.delete_run(run_id)
            if drop_session:
                self.store.delete_session(self.sid)
            raise
        except BaseException as exc:
            if not store_full(exc):   # a full store: the attempt is undone (full_store.py)
                self._drop_replaced()
            raise
        self._drop_replaced()

    def _drop_replaced(self) -> None:
        for run_id in self.replaced:
            self.store.delete_run(run_id)

    def write(self, planned: Planned) -> None:
        """One planned run: renamed when its files are unchanged, else written (a write that
        fails is reported as skipped; write_run rolled the half-written run back)."""
        digest = _digest(planned)
        before = self.existing.get(planned.key)
        if self.known.get(planned.key) == digest and before is not None:
            _rename(self.store, before, planned)
            self.report.unchanged.append(planned.key)
            return
        try:
            problems = write_run(self.store, self.adapter, self.sid, self.device_id, planned,
                                 start_state, self.written)
        except Refused:
            raise
        except Exception as exc:   # noqa: BLE001 (write_run rolled the half-written run back)
            if store_full(exc):    # not this file's fault: no other run will fit either
                raise
            why = f"not written: {type(exc).__name__}: {str(exc).strip()[:200]}"
            self.report.skipped.append((planned.shown, why))
            return
        if before is not None:    # a changed file: its run is replaced once the new is in
            self.replaced.append(before.id)
        self.report.problems.extend(f"{planned.shown}: {p}" for p in problems)
        self.digests[planned.key] = digest
        self.report.imported.append(planned.key)


def decide(plans: list[Planned], opts: ImportOptions, design: Design | None,
           folder: Path | None = None) -> None:
    """Each run's model, start, config, repeat, order and flags, over all runs at once.
    `folder`: the study folder, whose name's date (and its subfolders') dates runs whose
    files record no time (ingest/when.py)."""
    given = parse_measured(opts.measured) if opts.measured else None
    fallback = (given, _measured_source("option", opts.measured)) if given is not None else \
        (design.measured_at(), _measured_source("design", design.measured)) \
        if design is not None and design.measured_at() else (None, None)
    members = []
    for planned in plans:
        planned.model = model_of(planned, opts.model, design)
        stem = planned.key.rpartition("/")[2]
        planned.started, planned.time_source = recorded_start(
            stem if planned.csv_text is not None else "", planned.settings, planned.trailer,
            planned.sidecar, planned.stdout if planned.log_place else None, planned.state)
        recorded = planned.started
        if planned.started is None and fallback[0] is not None:
            planned.started, planned.time_source = fallback
        elif planned.started is None and folder is not None:
            subfolders = list(reversed(planned.key.split("/")[:-1])) + [folder.name]
            day = folder_date(subfolders)
            if day is not None and not _written_that_day(planned, day):
                planned.started, planned.time_source = day, "folder name"
        rel = _file_of(planned)
        members.append(Member(planned.key, planned.model, planned.settings, recorded,
                              design.config_of(rel, planned.model) if design else None,
                              requested=_int(planned.settings.get("n_predict")),
                              generated=_generated(planned)))
    named = name_configs(members)
    for planned in plans:
        planned.config = named[planned.key].config
        planned.repeat = named[planned.key].repeat_index
        if design is None:
            continue
        info = design.configs.get(planned.config)
        if info is not None and info.flags:
            planned.flags = info.flags
        planned.engine_build = design.engine_build
        model = design.models.get(planned.model)
        planned.model_size = model.size() if model is not None else None
    for index, planned in enumerate(sorted(plans, key=lambda p: _order(p, design))):
        planned.order = index


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _generated(planned: Planned) -> int | None:
    """The tokens the run generated as its files say (trailer, turns, summary lines)."""
    count = _int(planned.trailer.get("tokens"))
    if count is None and planned.turns:
        count = sum(t.tokens or 0 for t in planned.turns) or None
    if count is None and planned.stdout:
        found = re.findall(r"generation: (\d+) tokens", "\n".join(planned.stdout))
        count = sum(int(n) for n in found) or None
    return count


def _order(planned: Planned, design: Design | None) -> tuple[Any, ...]:
    """The run's place: the design's `order`, else its recorded start, else its place in the
    driver logs (log name, section), else its name: a file time (mtime) is never an order,
    since a copy rewrites it."""
    place = design.order_key(_file_of(planned)) if design is not None else None
    if place is not None:
        return (0, place, planned.key)
    if planned.started is not None and planned.time_source not in DAY_ONLY:
        return (1, planned.started.replace(tzinfo=None), planned.key)
    if planned.log_place is not None:
        return (2, planned.log_place, planned.key)
    return (3, planned.key)


def _written_that_day(planned: Planned, day: dt.datetime) -> bool:
    """Whether the file was last written within a day of its folder's date: then its mtime is
    likely the run's own (not a later copy's) and tells the time of day too (still marked as a
    file time); otherwise the folder's day is the better record."""
    if planned.csv_text is None:
        return False
    written = file_time(planned.source)
    if written is None:
        return False
    return abs((written.date() - day.date()).days) <= 1


# one time for every run: never an order
DAY_ONLY = ("design", "option", "folder name", "design date", "option date")


def _measured_source(kind: str, text: str | None) -> str:
    """`design` / `option` for a time of day, `design date` / `option date` for a date alone
    (views then print the date, never a midnight no file holds)."""
    return kind if text is not None and "T" in text.strip() else f"{kind} date"


def _key_of(run: RunRow) -> str:
    """The planned run a stored run came from (runs imported before keys were stored were
    named by it)."""
    return run.record.extra.get("import_key") or run.config or ""


def _rename(store: Store, run: RunRow, planned: Planned) -> None:
    """An unchanged file's run, named and placed as the folder now says."""
    wanted = {"model": planned.model, "config": planned.config,
              "repeat_index": planned.repeat, "order_index": planned.order,
              "cell_key": Cell(model=planned.model, model_path=None, config=planned.config,
                               flags="", repeat=planned.repeat).key}
    if planned.flags is not None:
        wanted["flags"] = planned.flags
    changed = {k: v for k, v in wanted.items() if getattr(run, k) != v}
    if changed:
        store.update_run(run.id, **changed)


def _finish(store: Store, report: ImportReport, sid: int, new: bool, replaced: list[Any] | None,
            digests: dict[str, str], opts: ImportOptions, folder: Path,
            design: Design | None) -> None:
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
    facts = design.device.facts() if design is not None and design.device is not None else None
    store.update_session(sid, name=opts.name or folder.name, matrix_name=opts.name or folder.name,
                         label=opts.label or (design.label if design is not None else None),
                         import_options=opts.model_dump(),
                         **({"device_facts": facts} if facts else {}), ended_at=now())


_DIGEST_PIECE = 1 << 20      # characters of a CSV encoded at a time for its digest


def _digest(plan: Planned) -> str:
    """What the run was imported from: its files' bytes, its stdout section, its entry state
    (a driver log or .state file added later changes the run)."""
    sha = hashlib.sha256()
    # the text's UTF-8 bytes and a NUL, piece by piece (a cut between two characters encodes
    # to the same bytes): no 100 MB copy of a big CSV's bytes, then another with the NUL
    text = plan.csv_text or ""
    for at in range(0, len(text), _DIGEST_PIECE):
        sha.update(text[at:at + _DIGEST_PIECE].encode())
    sha.update(b"\0")
    for path, body in plan.sidecars:
        sha.update(path.name.encode() + b"\0" + body.encode() + b"\0")
    sha.update("\n".join(plan.stdout).encode() + b"\0")
    sha.update((plan.trace_digest or "").encode())
    sha.update(json.dumps([plan.entry, plan.state], sort_keys=True, default=str).encode())
    return sha.hexdigest()
