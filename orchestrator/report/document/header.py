"""The document's header section (header.md.j2): its title (the design's or matrix's
`title:`), what ran (engines, configs per model, repeats, tokens), when (UTC, or an import's
local file times; a date alone when only the day is known), the sessions, how many runs ended
ok, and the baseline of the A/B tables. Devices and engine builds are the Environment's."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from orchestrator.escape import visible
from orchestrator.report.document.environment import device_line, engine_builds
from orchestrator.report.document.request import SectionRequest
from orchestrator.report.format import markdown as md
from orchestrator.report.format.formatters import when
from orchestrator.report.format.labels import baseline_line
from orchestrator.results.listings import DATE_ONLY
from orchestrator.results.report_data import ReportData
from orchestrator.stats.values import DAGGER, DASH

TEMPLATE = "header.md.j2"


def context(data: ReportData, request: SectionRequest) -> dict[str, Any]:
    return {"header": header(data)}


def document_title(data: ReportData) -> str:
    """The title the author gave (a design file's or matrix's `title:`), else "Benchmark
    report: NAME" (the sessions' matrices or names)."""
    given = [d.title for d in data.designs.values() if d is not None and d.title]
    given += [str(m["title"]) for m in data.matrices.values() if m and m.get("title")]
    given = list(dict.fromkeys(given))
    return "; ".join(given) if given else f"Benchmark report: {data.title}"


def _measured_from_files(rows: Sequence[Any]) -> str:
    """When imported runs ran, as their files tell it: the range of the local wall-clock times
    the study recorded (no zone: it wrote none), and how many runs have only a file's mtime,
    which says when a file was last written, not when its run ran (RunRow.clock)."""
    local = [r for r in rows if r.clock == "local"]
    times = [t for r in local for t in (r.started_at, r.ended_at) if t is not None]
    file_only = len(rows) - len(local)
    order = "; order from the file order" if len(rows) > 1 else ""
    if not times:
        return "times unknown (file times)" + order
    if all(r.date_only for r in local):
        days = sorted({f"{r.started_at:%Y-%m-%d}" for r in local if r.started_at is not None})
        whose = "the folder name's date" if all(r.time_source == DATE_ONLY for r in local) \
            else "the design file's date" if all(r.time_source == "design date" for r in local) \
            else "a date only"
        text = (f"measured {' → '.join(dict.fromkeys([days[0], days[-1]]))} ({whose}; "
                f"the files do not record the times of day)")
        # runs without a time of day keep the design's or the driver log's order, else the
        # files' (ingest/importer.py _order)
        return text + (f"; {file_only} run(s) with file times only" if file_only else "") \
            + order
    text = f"measured {when(min(times))} → {when(max(times))} (local time, from the files)"
    return text + (f"; {file_only} run(s) with file times only" if file_only else "")


def _configs_per_model(rows: Sequence[Any], models: list[str], n_configs: int,
                       labels: dict[str, str] | None = None) -> str:
    """"8 configs of Qwen…, 6 of Gemma…": a config name repeats across models, so one total
    times the number of models would overstate what ran. Models by their label when given."""
    labels = labels or {}
    if not models:
        return f"{n_configs} config{'s' if n_configs != 1 else ''}"
    counts = [len({r.config for r in rows if r.model == m}) for m in models]
    names = [labels.get(m) or m for m in models]
    parts = [f"{n} {'config' if n == 1 else 'configs'} of {md.md_escape(m)}" if i == 0
             else f"{n} of {md.md_escape(m)}" for i, (n, m) in enumerate(zip(counts, names))]
    return ", ".join(parts)


def header(data: ReportData) -> dict[str, Any]:
    """The header's lines, markdown-escaped."""
    rows = [r.row for r in data.runs]
    matrices = list(data.matrices.values())
    starts = [t for r in rows for t in (r.started_at, r.ended_at) if t is not None]
    starts += [t for s in data.sessions for t in (s.started_at, s.ended_at) if t is not None]
    configs = list(dict.fromkeys(r.config for r in rows))
    models = list(dict.fromkeys(r.model for r in rows if r.model and r.model != "-"))
    engines = list(dict.fromkeys(r.engine or "?" for r in rows))
    repeats = max(r.repeat_index for r in rows) + 1
    tokens = sorted({m["tokens"] for m in matrices if isinstance(m.get("tokens"), int)})
    what = (f"engine {', '.join(md.md_code(e) for e in engines)}: "
            + _configs_per_model(rows, models, len(configs),
                                 {g.model: g.facts.label for g in data.groups
                                  if g.facts is not None and g.facts.label})
            + (f", up to {repeats} repeats each" if repeats > 1 else "")
            + (f", {', '.join(map(str, tokens))} tokens per run" if tokens else "")
            + f" — {len(rows)} run(s)")
    kinds = {s.kind for s in data.sessions}
    period = (f"{when(min(starts))} → {when(max(starts))} UTC" if starts else DASH)
    if kinds == {"import"}:
        # imported runs carry the times their files recorded, the session when it was imported
        imported = [s.ended_at for s in data.sessions if s.ended_at is not None]
        period = "; ".join([_measured_from_files(rows)]
                           + ([f"imported {when(max(imported))} UTC"] if imported else []))
    failed = data.failed
    return {
        "title": md.md_escape(data.title),        # the sessions' names (user templates)
        "heading": md.md_escape(document_title(data)),   # the document's title
        # the HTML page's <title> (autoescaped): a bidi override in a tab's title shown as \u202e
        "title_text": visible(document_title(data), keep=""),
        "descriptions": [md.md_escape(s.label) for s in data.sessions   # orch import --label
                         if getattr(s, "label", None)]
                        + [md.md_escape(m["description"]) for m in matrices
                           if m.get("description")],
        "what": what, "period": period,
        "sessions": ", ".join(str(s.id) for s in data.sessions),
        # kept for user templates; the Environment section shows them (document/environment.py)
        "devices": "; ".join(device_line(n, d) for n, d in data.devices.items()),
        "engines": engine_builds(data.runs),
        "counts": f"{len(rows) - len(failed)} ended ok, {len(failed)} left out ({DAGGER})"
                  + (f", {len(data.excluded)} excluded by the author (listed under Left out)"
                     if data.excluded else ""),
        "baseline": md.md_escape(baseline) if (baseline := baseline_line(data)) else None,
    }
