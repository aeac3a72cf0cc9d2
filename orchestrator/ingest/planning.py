"""What a scanned study folder holds, read: one `Planned` run per per-token CSV (with its
sidecars, `.state`, route trace), the driver-log and matrix-stdout sections matched to them by
content (ingest/sections.py), and a summary-only run per section that matches none. Every file
that cannot be used goes to `skipped` with its reason. Naming, times and order are decided
after (ingest/importer.py), over all runs at once.
"""
from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from orchestrator.engines.bmoe_format import parse_kv_tokens, parse_metrics_sidecar
from orchestrator.engines.bmoe_session import sessions_from_lines
from orchestrator.engines.route_trace import RouteTrace, parse_route_trace
from orchestrator.ingest.attach import attach_series
from orchestrator.ingest import sections as import_sections
from orchestrator.ingest.checks import csv_reason, read_regular, text_reason
from orchestrator.ingest.encoding import read_decoded
from orchestrator.ingest.lines import lines
from orchestrator.ingest.scan import RunFiles, Scan
from orchestrator.ingest.state import driver_log_entries, parse_state
from orchestrator.ingest.write import Planned

Skip = Callable[[tuple[str, str]], None]


def read_text(path: Path) -> tuple[str | None, str | None]:
    """(text, None) or (None, why it cannot be read as text)."""
    text, _, why = read_decoded(path)
    return text, why


# what each kind of file gives the run it belongs to (the provenance's "role" column)
ROLES = {"csv": "per-token CSV", ".metrics": "`.metrics` sidecar: device pressure",
         ".log": "`.log`: the engine's summary lines and text",
         ".out": "`.out` stdout: the engine's summary lines and generated text",
         ".state": "`.state`: device state before and after",
         "route": "route trace", "turns": "turn records",
         "section": "driver log section: the run's summary lines and text",
         "order": "driver log section: entry state and run order",
         "entry": "driver log: entry state", "samples": "device samples"}


def _rel(found_path: Path, key: str) -> str:
    """A file's path as the user sees it: under the run's subfolder."""
    folder = key.rpartition("/")[0]
    return f"{folder}/{found_path.name}" if folder else found_path.name


def plan(found: Scan, skip: Skip, refused: Mapping[Path, str] | None = None) -> list[Planned]:
    """Every run the folder holds (see the module doc). `refused`: per-token CSVs an earlier
    attempt found impossible while writing them (ingest/checks.py Refused), with the reason:
    skipped as csv_reason would have."""
    refused = refused or {}
    plans = [p for p in (_plan_run(files, skip, refused) for files in found.runs)
             if p is not None]
    logs = [(rel, path) for rel, paths in found.driver_logs.items() for path in paths]
    logs += list(found.stdouts)
    for rel, path in sorted(logs, key=lambda item: (item[0], item[1].name)):
        _plan_log(rel, path, plans, skip, driver=path.name.startswith("driver"))
    for rel, path in sorted(found.turn_files, key=lambda item: (item[0], item[1].name)):
        _plan_turns(rel, path, plans, skip)
    attach_series(found.series, plans, skip)
    return plans


def _plan_turns(rel: str, path: Path, plans: list[Planned], skip: Skip) -> None:
    """A file of turn records: one session run per process in it (a `BMOE_READY` starts the
    next), one Turn per `BMOE_DONE` (engines/bmoe_session.py, the live runs' reader too)."""
    shown = f"{rel}/{path.name}" if rel else path.name
    text, encoding, why = read_decoded(path)
    if text is None:
        skip((shown, why or "unreadable"))
        return
    sessions = sessions_from_lines(text.splitlines())
    if not sessions:
        skip((shown, "turn records without a BMOE_DONE or BMOE_ERROR line"))
        return
    base = f"{rel}/{path.stem}" if rel else path.stem
    taken = {p.key for p in plans}
    for index, (ready, turns) in enumerate(sessions):
        key = base if len(sessions) == 1 else f"{base}/session-{index + 1}"
        if key in taken:
            key = f"{key}.turns"
        where = shown if len(sessions) == 1 else f"{shown} [session {index + 1}]"
        settings = {k: v for k, v in ready.items()
                    if k in ("arch", "n_ctx", "n_expert_used", "think_ctl")}
        plans.append(Planned(key, path, shown=where, turns=turns, encoding=encoding,
                             settings=settings, log_place=(shown, index),
                             provenance={"kind": "turn records"},
                             contributed=[(where, ROLES["turns"])]))


def _plan_run(files: RunFiles, skip: Skip, refused: Mapping[Path, str]) -> Planned | None:
    text, why = read_text(files.csv)
    why = why or refused.get(files.csv) or (csv_reason(text) if text is not None else None)
    shown = _rel(files.csv, files.config)
    if why or text is None:
        skip((shown, why or "unreadable"))
        return None
    planned = Planned(files.config, files.csv, text, shown=shown,
                      settings=_preamble(text), trailer=import_sections.trailer(text),
                      contributed=[(shown, ROLES["csv"])])
    for side in files.sidecars:
        body, why = read_text(side)
        if body is None:
            skip((_rel(side, files.config), f"{why} (sidecar; the run imports without it)"))
        else:
            planned.sidecars.append((side, body))
            planned.contributed.append((_rel(side, files.config),
                                        ROLES.get(side.suffix, ROLES[".out"])))
            if side.suffix == ".metrics" and side != files.csv:
                planned.sidecar = parse_metrics_sidecar(body)
    if files.state is not None:
        body, why = read_text(files.state)
        if body is None:
            skip((_rel(files.state, files.config), f"{why} (state file)"))
        else:
            planned.state = {**parse_state(body), "file": files.state.name}
            planned.contributed.append((_rel(files.state, files.config), ROLES[".state"]))
    if files.route is not None:
        planned.trace, planned.trace_digest, why = _trace(files.route)
        if planned.trace is None:
            skip((_rel(files.route, files.config), f"not a readable route trace: {why}"))
            skip((shown, (f"the traced run's route trace is unreadable: "
                          f"{files.route.name}: {why}")))
            return None
        planned.contributed.append((_rel(files.route, files.config), ROLES["route"]))
    return planned


def _preamble(text: str) -> dict[str, Any]:
    """The CSV preamble's settings (`# model=... arch=...` lines before the header)."""
    settings: dict[str, Any] = {}
    for line in lines(text):       # lazily: the header comes first, not after 2M split lines
        if line.startswith("step,"):
            break
        body = line.lstrip("#").strip()
        if line.startswith("#") and "=" in body and not body.startswith("summary"):
            settings.update(parse_kv_tokens(body))
    return settings


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


def _plan_log(rel: str, path: Path, plans: list[Planned], skip: Skip, driver: bool) -> None:
    """One log's sections: matched to CSV runs by content, else (a driver log's state-only
    sections) by name, else summary-only runs."""
    shown = f"{rel}/{path.name}" if rel else path.name
    text, encoding, why = read_decoded(path)
    if text is None:
        skip((shown, why or "unreadable"))
        return
    secs = import_sections.sections(path, text)
    here = [p for p in plans if p.csv_text is not None and p.key.rpartition("/")[0] == rel]
    names = {p.key.rpartition("/")[2]: p for p in here}
    used = False
    for sec in secs:
        owner = _owner(sec, here)
        if owner is None and not sec.has_summary:
            owner = names.get(sec.name) if (sec.entry or sec.exit) else None
            if owner is None:
                if sec.name != import_sections.NO_NAME and not driver:
                    skip((f"{shown} [{sec.name}]", "section without engine summary lines"))
                continue
        if owner is not None:
            _join(owner, sec, shown, has_summary=sec.has_summary)
            used = True
            continue
        used = True
        key = f"{rel}/{sec.name}" if rel else sec.name
        if sec.name == import_sections.NO_NAME or any(p.key == key for p in plans):
            key = f"{rel}/{path.stem}/{sec.name}" if rel else f"{path.stem}/{sec.name}"
        if sec.name == import_sections.NO_NAME:
            key = f"{rel}/{path.stem}" if rel else path.stem
        summary_only = Planned(key, path, stdout=sec.lines, shown=f"{shown} [{sec.name}]",
                               log_place=(shown, sec.index), settings=dict(sec.settings),
                               flags=sec.flags or None, encoding=encoding)
        if sec.label:
            summary_only.provenance["section"] = sec.label
        summary_only.contributed.append((f"{shown} [{sec.name}]", ROLES["section"]))
        _entry(summary_only, sec, shown)
        plans.append(summary_only)
    if not used and driver:
        skip((shown, "driver log whose sections name no run of its folder"))
    elif not used:
        skip((shown, (f"no {path.stem}.csv (not a sidecar) and no engine summary lines "
                      "(not a matrix stdout)")))
    # older driver logs: ENTRY STATE lines in sections named after the run (kept for them)
    for name, entry in driver_log_entries(path.name, text).items():
        owner = names.get(name)
        if owner is not None and owner.entry is None:
            owner.entry = entry
            owner.contributed.append((f"{shown} [{name}]", ROLES["entry"]))


def _owner(sec: import_sections.Section, here: list[Planned]) -> Planned | None:
    """The CSV run whose stdout the section is: by figures; a name breaks a tie."""
    if not sec.has_summary:
        return None
    found = [p for p in here if p.log_place is None
             and import_sections.same_figures(sec, p.trailer)]
    if len(found) > 1:
        found = [p for p in found
                 if import_sections.name_matches(sec, p.key.rpartition("/")[2])] or found
    return found[0] if len(found) == 1 else None


def _join(owner: Planned, sec: import_sections.Section, shown: str, has_summary: bool) -> None:
    """The section is the owner's stdout: its text (unless a sidecar gave the whole stdout),
    its entry/exit state and its place in the driver's order."""
    gave_text = has_summary and not any(s.suffix in (".out", ".log") for s, _ in owner.sidecars)
    if gave_text:
        owner.stdout = sec.lines
    owner.log_place = (shown, sec.index)
    owner.contributed.append((f"{shown} [{sec.name}]",
                              ROLES["section"] if gave_text else ROLES["order"]))
    _entry(owner, sec, shown)


def _entry(planned: Planned, sec: import_sections.Section, shown: str) -> None:
    if sec.entry or sec.exit:
        planned.entry = {**sec.entry, "log": shown,
                         **({"exit": sec.exit} if sec.exit else {})}
