"""The document's Reproduce section (reproduce.md.j2): for a live session, the `orch run`
command that runs its matrix again on its devices and where the matrix text is; for an import,
the flags each config ran with (the design file's, else the engine's resolved settings) and
the `orch import` command as it was given. Paths as report/format/paths.py's rule says."""
from __future__ import annotations

import os
import shlex
from typing import Any

from orchestrator.report.document.request import SectionRequest
from orchestrator.report.format import markdown as md
from orchestrator.report.format.markdown import Table
from orchestrator.report.format.paths import Paths, base_of
from orchestrator.results.report_data import ReportData
from orchestrator.stats.values import DASH

TEMPLATE = "reproduce.md.j2"

# `orch run` options a rerun needs, by their long name (cli/run.py)
_KEPT = {"-i": "--inventory", "--inventory": "--inventory", "--link-grace": "--link-grace"}


def context(data: ReportData, request: SectionRequest) -> dict[str, Any]:
    return {"reproduce": reproduce(data, Paths(request.report.provenance_full))}


def _run_command(session: Any, devices: list[str], paths: Paths) -> str:
    """`orch run MATRIX --device D ...`, with the recorded command's inventory option."""
    matrix = paths.path(session.matrix_path or session.matrix_name or "MATRIX", base_of(session))
    words = ["orch", "run", matrix]
    for device in devices:
        words += ["--device", device]
    try:
        recorded = shlex.split(session.command or "")
    except ValueError:
        recorded = []
    for i, word in enumerate(recorded):
        name = word.split("=", 1)[0]
        if name in _KEPT:
            value = word.split("=", 1)[1] if "=" in word else \
                (recorded[i + 1] if i + 1 < len(recorded) else "")
            words += [_KEPT[name], paths.path(value, base_of(session))]
    return shlex.join(words)


_IMPORT_OPTIONS = (("device", "--device"), ("name", "--name"), ("label", "--label"),
                   ("measured", "--measured"))


def _import_command(session: Any, paths: Paths) -> str:
    """The `orch import` command as it was given (the folder by its name: relative to itself
    it would read "."), else one built from the options the session stored."""
    folder = base_of(session)
    if (session.command or "").startswith("orch import "):
        return paths.text(session.command, os.path.dirname(folder or "") or None) or ""
    options = session.import_options or {}
    words = ["orch", "import", paths.path(folder or "FOLDER", os.path.dirname(folder or ""))]
    if options.get("design"):
        words += ["--design", "DESIGN.yaml"]       # the design's path is not stored
    for key, flag in _IMPORT_OPTIONS:
        value = options.get(key)
        if value and not (key == "device" and value == "imported"):
            words += [flag, str(value)]
    return shlex.join(words)


def reproduce(data: ReportData, paths: Paths) -> dict[str, Any]:
    """{"commands": [(caption, command)], "flags": Table config -> flags (imports)}."""
    commands: list[tuple[str, str]] = []
    flags = Table(["Model", "Config", "label", "flags", "run ids"],
                  ["---", "---", "---", "---", "---"])
    for s in data.sessions:
        runs = [r for r in data.runs if r.row.session_id == s.id]
        devices = list(dict.fromkeys(r.row.device for r in runs))
        if s.kind == "import":
            commands.append((f"session {s.id} was imported with", _import_command(s, paths)))
            seen: dict[tuple[str, str], list[int]] = {}
            shown: dict[tuple[str, str], tuple[str, str]] = {}
            for r in runs:
                key = (r.row.model or "-", r.row.config)
                seen.setdefault(key, []).append(r.id)
                design = data.designs.get(s.id)
                label = (design.config_label(r.row.config) if design is not None else None) \
                    or r.config_label
                shown.setdefault(key, (label, r.row.flags or ""))
            for (model, config), ids in seen.items():
                label, text = shown[(model, config)]
                flags.rows.append([md.md_escape(model), md.md_escape(config),
                                   md.md_escape(label) if label != config else DASH,
                                   md.md_code(paths.text(text, base_of(s))) if text else DASH,
                                   ", ".join(map(str, ids))])
        else:
            sha = f" (sha256 {s.matrix_sha256[:16]}…)" if s.matrix_sha256 else ""
            commands.append((f"session {s.id}: run its matrix again; the matrix text as run"
                             f"{sha} is under Provenance", _run_command(s, devices, paths)))
    flags = flags.drop_empty(keep=(0, 1))
    if flags and "flags" not in flags.headers:
        flags.notes.append("The files record no flags for these runs: give them in a design "
                           "file's `configs.NAME.flags` (docs/import.md).")
    return {"commands": [(md.md_escape(c), cmd) for c, cmd in commands], "flags": flags}
