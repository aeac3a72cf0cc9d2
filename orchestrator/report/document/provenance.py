"""Provenance: what a reader needs to trust or reproduce every number of a report.

Per device its facts, per engine build its binary hash and version, model files, the matrix
file and its hash, orch's version and git revision, and every run with its id, exact flags,
timestamps and the cooldown it got.

Paths and the controller's user@host are shown as report/format/paths.py's rule says: by default
relative to the study (or by file name) and no user@host; `full` shows them as stored.
"""
from __future__ import annotations

import datetime as dt
import os
from dataclasses import dataclass, field
from typing import Any

from orchestrator.results.listings import RunRow
from orchestrator import __version__
from orchestrator.record import load_record
from orchestrator.report.document.request import SectionRequest
from orchestrator.report.format.cells import id_list
from orchestrator.report.format.device_facts import DESIGN_SOURCE, facts_source, ram_text
from orchestrator.report.format.formatters import file_size, tokens_after_trim, when
from orchestrator.report.format.markdown import Table, md_code, md_escape, md_flags
from orchestrator.report.format.labels import repeat_shown
from orchestrator.report.format.paths import SHARE, Paths, base_of
from orchestrator.results.report_data import ReportData, RunView
from orchestrator.stats.values import DAGGER, DASH


@dataclass
class Provenance:
    sessions: Table
    devices: Table
    engines: Table
    models: Table
    files: Table
    runs: Table
    notes: Table = field(default_factory=lambda: Table([], []))
    prompts: list[tuple[str, str]] = field(default_factory=list)   # (caption, text)
    matrices: list[tuple[str, str]] = field(default_factory=list)  # (caption, YAML text)


def _fact(facts: dict[str, Any], *keys: str) -> str:
    for key in keys:
        if facts.get(key):
            return md_escape(facts[key])
    return DASH


def devices_table(data: ReportData) -> Table:
    t = Table(["Device", "kind", "model", "SoC / CPU", "cores", "RAM", "kernel", "OS",
               "build fingerprint", "ABI / arch", "facts from"], ["---"] * 11)
    for name, dev in data.devices.items():
        f = dict(dev.facts or {})
        model = " ".join(x for x in (f.get("prop.ro.product.manufacturer"),
                                     f.get("prop.ro.product.model")) if x)
        soc = " / ".join(x for x in (f.get("prop.ro.soc.model") or f.get("prop.ro.board.platform"),
                                     f.get("cpu_model")) if x)
        os_ = f.get("os") or ""
        if f.get("prop.ro.build.version.sdk"):
            os_ += f" (SDK {f['prop.ro.build.version.sdk']})"
        t.rows.append([md_escape(name), md_escape(dev.kind), md_escape(model) or DASH,
                       md_escape(soc) or DASH, _fact(f, "cores"), ram_text(f),
                       _fact(f, "kernel", "uname"), md_escape(os_.strip()) or DASH,
                       md_code(f.get("prop.ro.build.fingerprint")),
                       _fact(f, "prop.ro.product.cpu.abi", "arch"), md_escape(facts_source(dev))])
    t = t.drop_empty(keep=(0, 1))
    probed = [name for name, dev in data.devices.items() if dev.facts and not dev.snapshot
              and dev.facts.get("source") != DESIGN_SOURCE]
    if probed:
        t.notes.append(f"Facts of {', '.join(md_escape(n) for n in probed)}: the newest probe, "
                       f"not a snapshot of when the session ran (sessions stored by an older "
                       f"orch, or imports).")
    if any(not dev.facts for dev in data.devices.values()):
        t.notes.append("Devices without facts were imported from files (no probe) or never "
                       "probed (`orch devices --probe`).")
    return t


def _version(r: RunView) -> str:
    """The engine's own version and build as its output gave them (bmoe preamble v2
    `# engine=`, llama.cpp's build commit in `run.engine_build`), each once; else nothing:
    a hash is then the only identity."""
    settings = load_record(r.row.summary).settings
    values = (settings.get("engine"), settings.get("version"), settings.get("build"),
              r.row.engine_build)
    return "; ".join(dict.fromkeys(str(v) for v in values if v))


def _bases(data: ReportData) -> dict[int, str | None]:
    """Session id -> the folder its paths are shown relative to (paths.base_of)."""
    return {s.id: base_of(s) for s in data.sessions}


def engines_table(data: ReportData, paths: Paths = SHARE) -> Table:
    t = Table(["Engine", "binary", "sha256", "version", "run ids"], ["---"] * 5)
    seen: dict[tuple[str, str, str, str], list[int]] = {}
    for r in data.runs:
        # the binary's path is the device's layout; its name and hash identify it
        binary = (r.row.binary_path or "") if paths.full else \
            os.path.basename(r.row.binary_path or "")
        key = (r.row.engine or "", binary,
               r.row.binary_sha256 or "", _version(r))
        seen.setdefault(key, []).append(r.id)
    for (engine, binary, sha, version), ids in seen.items():
        t.rows.append([md_escape(engine) or DASH, md_code(binary), md_code(sha),
                       md_code(version), id_list(ids)])
    return t.drop_empty(keep=(0, 2, 4))


def models_table(data: ReportData, paths: Paths = SHARE) -> Table:
    t = Table(["Model", "file", "size", "sha256", "run ids"], ["---", "---", "---:", "---", "---"])
    seen: dict[tuple[str, str, Any, str], list[int]] = {}
    for r in data.runs:
        settings = load_record(r.row.summary).settings
        declared = (data.matrices.get(r.row.session_id, {}).get("models") or {})
        path = declared.get(r.row.model) if isinstance(declared, dict) else None
        if isinstance(path, dict):     # `{local: FILE}`: the controller's file orch pushed
            path = path.get("local")
        file = paths.path(str(path or settings.get("model") or ""),
                          _bases(data).get(r.row.session_id))
        key = (r.row.model or "-", file, _size(data, r), r.row.model_sha256 or "")
        seen.setdefault(key, []).append(r.id)
    unhashed: dict[str, list[int]] = {}
    for (model, file, size, sha), ids in seen.items():
        t.rows.append([md_escape(model), md_code(file), size, md_code(sha), id_list(ids)])
        if not sha and model != "-":
            unhashed.setdefault(model, []).extend(ids)
    kinds = {s.id: s.kind for s in data.sessions}
    for model, ids in unhashed.items():
        imported = all(kinds.get(r.row.session_id) == "import" for r in data.runs if r.id in ids)
        why = ("imported from result files: the model file itself was not read" if imported
               else "the device could not hash it (the file was missing, or the device has no "
                    "`sha256sum`)")
        t.notes.append(md_escape(f"{model} (runs {id_list(ids)}): no sha256 — {why}."))
    t = t.drop_empty(keep=(0, 4))
    return t if any(c != DASH for row in t.rows for c in row[1:-1]) else Table([], [])


def _size(data: ReportData, r: RunView) -> str:
    """The model file's size as it is known: a design file's as it gave it (17.23 GiB, not the
    bytes computed from it), else the bytes orch read."""
    design = data.designs.get(r.row.session_id)
    given = design.models.get(r.row.model or "") if design is not None else None
    if given is not None and given.size_gib is not None:
        return f"{given.size_gib:g} GiB (given by the design file)"
    if given is not None and given.size_bytes is not None:
        return f"{file_size(given.size_bytes)}, given by the design file"
    return file_size(r.row.model_size)


def sessions_table(data: ReportData, paths: Paths = SHARE) -> Table:
    t = Table(["Session", "kind", "name", "matrix file", "matrix sha256", "orch", "git revision",
               "Python", "controller", "command", "started", "ended", "adaptive repeats"],
              ["---"] * 13)
    for s in data.sessions:
        # the matrix file (an import: its folder) by name, in full by its absolute path
        source = s.matrix_path or s.source_dir or ""
        shown = source if paths.full else os.path.basename(source)
        t.rows.append([str(s.id), md_escape(s.kind), md_escape(s.name or DASH),
                       md_code(shown),
                       md_code(s.matrix_sha256), md_escape(s.orch_version or DASH),
                       md_code(s.git_rev), md_escape(s.python_version or DASH),
                       md_escape(paths.host(s.controller_host) or DASH),
                       md_code(paths.text(s.command, base_of(s))), when(s.started_at),
                       when(s.ended_at),
                       md_escape(s.repeat_stop or DASH)])
    return t.drop_empty(keep=(0, 1, 2))


_SIDECARS = (".metrics", ".log", ".out")


def _contributed(r: RunView) -> list[dict[str, str]] | None:
    """The files the importer recorded as giving the run something ({path, role}, relative to
    the study folder); None for a run imported before they were recorded."""
    files = (load_record(r.row.summary).extra.get("import") or {}).get("files")
    return [f for f in files if isinstance(f, dict) and f.get("path")] \
        if isinstance(files, list) else None


def _short_role(role: str) -> str:
    """"driver log section: the run's summary lines and text" -> "the run's summary lines and
    text": the file's name says the kind."""
    return role.split(": ", 1)[-1]


def files_table(data: ReportData, paths: Paths = SHARE) -> Table:
    """Imported runs: every file that gave each run something (by its path in the study
    folder) with what it gave, and the digest `orch import` recorded. A driver log that gave
    a run its text and summary, a `.state` file, a route trace and device samples are listed
    as well as the CSV and its sidecars."""
    t = Table(["Run", "per-token CSV", "sidecars", "other files (what each gave)",
               "files sha256"], ["---:", "---", "---", "---", "---"])
    bases = _bases(data)
    for r in data.runs:
        by_stem = data.imported_files.get(r.row.session_id, {})
        # recorded under the file's stem in the folder, which a design file may have renamed
        stem_in_folder = (r.row.source_file or "").removesuffix(".csv")
        imported = by_stem.get(stem_in_folder) or by_stem.get(r.row.config)
        files = _contributed(r)
        if files is None:
            row = _older_files_row(r, paths, bases.get(r.row.session_id))
            if row is None or imported is None:
                continue
            t.rows.append([str(r.id), *row, md_code(imported.sha256 if imported else "")])
            continue
        # the paths were recorded relative to the study; in full they are shown under it
        base = bases.get(r.row.session_id) if paths.full else None
        shown = [(os.path.join(base, f["path"]) if base else f["path"], f.get("role", ""))
                 for f in files]
        csv = [p for p, role in shown if role == "per-token CSV"]
        sidecars = [p for p, role in shown if role != "per-token CSV"
                    and p.endswith(_SIDECARS) and "[" not in p]
        other = [f"{md_code(p)} ({md_escape(_short_role(role))})" for p, role in shown
                 if p not in csv and p not in sidecars]
        t.rows.append([str(r.id), ", ".join(md_code(p) for p in csv) or DASH,
                       ", ".join(md_code(p) for p in sidecars) or DASH,
                       "; ".join(other) or DASH,
                       md_code(imported.sha256) if imported is not None else DASH])
    t = t.drop_empty(keep=(0, 1))
    if t.rows and "sidecars" in t.headers:
        t.notes.append("Sidecars: a `.metrics` file gave its run's device pressure; a `.log` or "
                       "`.out` file its summary lines and generated text.")
    return t


def _older_files_row(r: RunView, paths: Paths, base: str | None) -> list[str] | None:
    """A run imported before the importer recorded its files: its CSV and the sidecars that
    exist beside it now."""
    source = r.row.remote_dir or ""
    if not source.endswith(".csv"):
        return None
    shown = paths.run_file(r.row, base)
    shown_stem = shown[:-4] if shown.endswith(".csv") else source[:-4]
    sidecars = [shown_stem + s for s in _SIDECARS if os.path.exists(source[:-4] + s)]
    return [md_code(shown), ", ".join(md_code(s) for s in sidecars) or DASH, DASH]


def runs_table(data: ReportData, paths: Paths = SHARE) -> Table:
    t = Table(["Run", "session", "device", "model", "config", "rep", "status", "tokens",
               "started", "ended", "cooldown (s)", "flags", "entry state"],
              ["---:", "---:", "---", "---", "---", "---:", "---", "---:", "---", "---",
               "---:", "---", "---"])
    bases = _bases(data)
    for r in data.runs:
        row = r.row
        status = row.status if r.ok else f"{DAGGER} {row.status}"
        if row.cause and not r.ok:
            status += f": {row.cause}"
        cooldown = DASH if row.cooldown_s is None else f"{row.cooldown_s:g}"
        if row.cooldown_met is False:
            cooldown += " (not met)"
        t.rows.append([str(row.id), str(row.session_id), md_escape(row.device),
                       md_escape(row.model or "-"), md_escape(row.config),
                       repeat_shown(row.repeat_index), md_escape(status),
                       tokens_after_trim(r.figures.tokens, r.figures.n, data.trim),
                       _started(row), _ended(row), cooldown,
                       md_flags(paths.text(row.flags, bases.get(row.session_id))),
                       md_code(entry_state(row))])
    return t.drop_empty(keep=tuple(range(12)))


def notes_table(data: ReportData) -> Table:
    """The notes on the report's sessions and runs (`orch note`), oldest first."""
    t = Table(["On", "note", "when", "by"], ["---"] * 4)
    for n in sorted(data.notes.all(), key=lambda n: n.id):
        t.rows.append([f"{n.target_kind} {n.target}", md_escape(n.text), when(n.created_at),
                       md_escape(n.author or DASH)])
    return t


def entry_state(row: RunRow) -> str:
    """An imported run's entry state as its files said it (key=value as recorded): the driver
    log's ENTRY STATE line and the KEY=VALUE state lines of its logs (`freq_cap=2265600`)."""
    state = load_record(row.summary).entry_state
    if state is None:
        return ""
    values = {k: v for k, v in (state.driver or {}).items() if k not in ("log", "exit")}
    values.update({k: v for k, v in (state.lines or {}).items() if k not in values})
    return " ".join(f"{k}={v}" for k, v in values.items() if v is not None)


def _ended(row: RunRow) -> str:
    """The end as stored; for a run whose day only is known, the day alone (its time of day
    would be the start's invented midnight plus the run's duration)."""
    if row.ended_at is not None and row.date_only:
        return f"{row.ended_at:%Y-%m-%d}"
    return when(row.ended_at)


def _started(row: RunRow) -> str:
    """The start as stored: orch's clock (UTC, as the report's header says) or a study's local
    time as it wrote it; a file's mtime is marked, as it is when the file was last written."""
    if row.started_at is not None and row.clock == "file":
        return f"{when(row.started_at)} (file time)"
    if row.started_at is not None and row.date_only:
        return f"{row.started_at:%Y-%m-%d} ({row.date_note})"
    return when(row.started_at)


def _prompt_from_argv(argv: Any) -> str | None:
    if not isinstance(argv, list):
        return None
    for flag in ("-p", "--prompt"):
        if flag in argv[:-1]:
            return str(argv[argv.index(flag) + 1])
    return None


def _matrix(s: Any, paths: Paths) -> tuple[str, str]:
    """(caption, text) of a session's matrix: as written (its sha256 is over those bytes),
    except that a shared document shows its absolute paths by name, and says so."""
    text = s.matrix_text
    shown = paths.text(text, base_of(s)) or ""
    caption = (f"session {s.id}: {paths.path(s.matrix_path or '', base_of(s))} "
               f"(sha256 {s.matrix_sha256})")
    if shown != text:
        caption += ("; its absolute paths shown by file name, the sha256 is over the file as "
                    "written (`--provenance full` shows it so)")
    return caption, shown


def build(data: ReportData, full: bool = False) -> Provenance:
    """`full`: absolute paths and the controller's user@host (`--provenance full`)."""
    paths = Paths(full)
    prompts: list[tuple[str, str]] = []
    seen: set[str] = set()
    for r in data.runs:             # the prompt exactly as the engine received it (argv)
        text = _prompt_from_argv(r.row.argv)
        if text is not None and text not in seen:
            seen.add(text)
            prompts.append((f"session {r.row.session_id}", text))
    # the matrix text is shown as written: its sha256 is over those bytes
    matrices = [_matrix(s, paths) for s in data.sessions if s.matrix_text]
    return Provenance(sessions=sessions_table(data, paths), devices=devices_table(data),
                      engines=engines_table(data, paths), models=models_table(data, paths),
                      files=files_table(data, paths), runs=runs_table(data, paths),
                      notes=notes_table(data), prompts=prompts,
                      matrices=matrices)


TEMPLATE = "provenance.md.j2"


def context(data: ReportData, request: SectionRequest) -> dict[str, Any]:
    """The provenance tables, and when and by which orch the document was made."""
    return {"provenance": build(data, full=request.report.provenance_full),
            "generated": when(dt.datetime.now(dt.UTC)), "orch_version": __version__}
