"""Render a report: Jinja2 templates -> markdown, and that markdown -> a standalone HTML page.

Templates come from `reports/templates/` (package data of orchestrator.reports); `--template`
puts a user file or directory in front of them (ChoiceLoader), so a user can replace the whole
document or one part (`provenance.md.j2`, `page.html.j2`, ...) and include the built-in rest.
Markdown templates are not autoescaped (markdown is not HTML): every value that comes from
data goes through the `md` / `code` filters, and the built cells are escaped already. HTML
templates (*.html, *.html.j2) are autoescaped; the markdown body is converted with HTML
disabled, so a `<script>` in a config name arrives as text.
"""
from __future__ import annotations

import datetime as dt
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jinja2 import (
    ChoiceLoader,
    Environment,
    FileSystemLoader,
    PackageLoader,
    StrictUndefined,
    TemplateError,
    TemplateSyntaxError,
    select_autoescape,
)
from markupsafe import Markup

from orchestrator import __version__
from orchestrator.errors import ConfigError
from orchestrator.report.document import ceilings as against_ceilings
from orchestrator.report.format import markdown as md
from orchestrator.report.document import provenance
from orchestrator.report.document import quality
from orchestrator.report.document import routing
from orchestrator.report.document import group_tables as sections
from orchestrator.report.format import grid
from orchestrator.report.format.cells import id_list
from orchestrator.report.format.columns import REPORT_PRESSURE
from orchestrator.report.format.formatters import cell, gib_from_kb, pct, ratio, when
from orchestrator.report.format.labels import baseline_line, group_title
from orchestrator.report.document.regressions import sections as regression_sections
from orchestrator.report.format.within_cells import with_trim
from orchestrator.results.listings import DATE_ONLY
from orchestrator.results.report_data import Group, ReportData
from orchestrator.stats.values import DAGGER, DASH

MAIN = {"md": "report.md.j2", "html": "page.html.j2"}


def environment(template: str | Path | None = None) -> tuple[Environment, str | None]:
    """(environment, name of the user's main template when --template is a file)."""
    loaders: list[Any] = []
    main = None
    if template is not None:
        path = Path(template).expanduser()
        if path.is_dir():
            loaders.append(FileSystemLoader(str(path)))
        elif path.is_file():
            loaders.append(FileSystemLoader(str(path.parent)))
            main = path.name
        elif path.exists():     # a FIFO, a socket, a device: never opened
            raise ConfigError(f"--template: {template}: not a directory or regular file")
        else:
            raise ConfigError(f"--template: {template}: no such file or directory")
    loaders.append(PackageLoader("orchestrator.reports", "templates"))
    env = Environment(loader=ChoiceLoader(loaders), undefined=StrictUndefined,
                      autoescape=select_autoescape(enabled_extensions=("html", "htm", "html.j2"),
                                                   default_for_string=False, default=False),
                      trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
    env.filters.update(md=md.md_escape, code=md.md_code, fence=md.md_fence, table=md.render,
                       prose=md.md_prose,      # orch's sentences that write `code` spans
                       pct=pct, ratio=ratio, when=when, ids=id_list,
                       stat=lambda value, key: cell(key, value))
    return env, main


def template_error(exc: TemplateError) -> ConfigError:
    """A user's template mistake as a one-line error (file:line: message), not a traceback."""
    where = ""
    if isinstance(exc, TemplateSyntaxError):
        where = f"{exc.filename or exc.name}:{exc.lineno}: "
    return ConfigError(f"template: {where}{exc.message or exc}")


def _is_html(name: str) -> bool:
    return name.endswith((".html", ".htm", ".html.j2"))


# ---- the document's context --------------------------------------------------------------

def _device_line(name: str, dev: Any) -> str:
    f = dict(dev.facts or {})
    bits = [" ".join(x for x in (f.get("prop.ro.product.manufacturer"),
                                 f.get("prop.ro.product.model")) if x),
            f.get("prop.ro.soc.model") or f.get("cpu_model") or "",
            f"{f['cores']} cores" if f.get("cores") else "",
            f"{gib_from_kb(f['mem_total_kb'])} RAM" if f.get("mem_total_kb") else "",
            f.get("storage") or "",      # a design file's (config/design.py) or a probe's
            f.get("os") or ""]
    detail = ", ".join(b for b in bits if b)
    return md.md_escape(f"{name} ({detail})" if detail else name)


def _measured_from_files(rows: Sequence[Any]) -> str:
    """When imported runs ran, as their files tell it: the range of the local wall-clock times
    the study recorded (no zone: it wrote none), and how many runs have only a file's mtime,
    which says when a file was last written, not when its run ran (RunRow.clock)."""
    local = [r for r in rows if r.clock == "local"]
    times = [t for r in local for t in (r.started_at, r.ended_at) if t is not None]
    file_only = len(rows) - len(local)
    if not times:
        return "times unknown (file times)"
    if all(r.time_source == DATE_ONLY for r in local):
        days = sorted({f"{r.started_at:%Y-%m-%d}" for r in local if r.started_at is not None})
        text = (f"measured {' → '.join(dict.fromkeys([days[0], days[-1]]))} (the folder "
                f"name's date; the files do not record the times of day)")
        return text + (f"; {file_only} run(s) with file times only" if file_only else "")
    text = f"measured {when(min(times))} → {when(max(times))} (local time, from the files)"
    return text + (f"; {file_only} run(s) with file times only" if file_only else "")


def _configs_per_model(rows: Sequence[Any], models: list[str], n_configs: int) -> str:
    """"8 configs of Qwen…, 6 of Gemma…": a config name repeats across models, so one total
    times the number of models would overstate what ran."""
    if not models:
        return f"{n_configs} config{'s' if n_configs != 1 else ''}"
    counts = [len({r.config for r in rows if r.model == m}) for m in models]
    parts = [f"{n} {'config' if n == 1 else 'configs'} of {md.md_escape(m)}" if i == 0
             else f"{n} of {md.md_escape(m)}" for i, (n, m) in enumerate(zip(counts, models))]
    return ", ".join(parts)


def header(data: ReportData) -> dict[str, Any]:
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
            + _configs_per_model(rows, models, len(configs))
            + (f", up to {repeats} repeats each" if repeats > 1 else "")
            + (f", {', '.join(map(str, tokens))} tokens per run" if tokens else "")
            + f" — {len(rows)} run(s)")
    builds = list(dict.fromkeys((r.engine or "?", r.binary_sha256) for r in rows))
    build_text = "; ".join(f"{md.md_escape(e)} sha256 {md.md_code(sha[:16]) + '…'}"
                           if sha else f"{md.md_escape(e)} (no binary hash recorded)"
                           for e, sha in builds)
    kinds = {s.kind for s in data.sessions}
    period = (f"{when(min(starts))} → {when(max(starts))} UTC" if starts else DASH)
    if kinds == {"import"}:
        # imported runs carry the times their files recorded, the session when it was imported
        imported = [s.ended_at for s in data.sessions if s.ended_at is not None]
        period = "; ".join([_measured_from_files(rows)]
                           + ([f"imported {when(max(imported))} UTC"] if imported else []))
    failed = data.failed
    return {
        "title": md.md_escape(data.title),
        "descriptions": [md.md_escape(s.label) for s in data.sessions   # orch import --label
                         if getattr(s, "label", None)]
                        + [md.md_escape(m["description"]) for m in matrices
                           if m.get("description")],
        "what": what, "period": period,
        "sessions": ", ".join(str(s.id) for s in data.sessions),
        "devices": "; ".join(_device_line(n, d) for n, d in data.devices.items()),
        "engines": build_text,
        "counts": f"{len(rows) - len(failed)} ended ok, {len(failed)} left out ({DAGGER})",
        "baseline": md.md_escape(baseline) if (baseline := baseline_line(data)) else None,
    }


def pressure_caption(table: md.Table) -> str:
    """The device-pressure caption naming only the columns the table has (the columns' notes,
    report/format/columns.py: REPORT_PRESSURE)."""
    return REPORT_PRESSURE.caption_naming(table.headers)


def group_facts_and_pivot(g: Group) -> dict[str, Any]:
    """What opens a (model, device) section: the model's facts (file size, arch, layers,
    experts, top-k, size against the device's RAM), and for a grid over two flags the pivot of
    mean tok/s, the same as `orch table` shows (results/model_facts.py, report/table/runs.py)."""
    if g.facts is None:
        return {"facts": None, "pivot": None, "pivot_caption": None}
    facts = g.facts.line()
    matrix = g.pivot_matrix
    pivot = grid.pivot(matrix, {a.config: a.values.get("mean") for a in g.configs})
    return {"facts": md.md_escape(facts) if facts else None, "pivot": pivot,
            "pivot_caption": grid.pivot_caption(matrix)
            if pivot is not None and matrix is not None else None}


def document_context(data: ReportData, plots: dict[str, list[Any]] | None,
                     plot_note: str | None = None, columns: list[str] | None = None,
                     full_provenance: bool = False) -> dict[str, Any]:
    """`columns`: the throughput table's columns by key (`--columns`); `full_provenance`:
    user@host and absolute paths in the provenance (`--provenance full`)."""
    groups = []
    caveats = data.caveats
    for g in data.groups:
        ab, ab_note = sections.ab(g)
        pressure = sections.pressure(g)
        groups.append({"title": md.md_escape(group_title(g)), "slug": g.slug, "group": g,
                       "throughput": sections.throughput(g, columns),
                       "detail": sections.detail(g, columns),
                       "pressure": pressure,
                       "pressure_caption": pressure_caption(pressure),
                       "ab": ab, "ab_note": ab_note,
                       "plots": (plots or {}).get(g.slug, []),
                       "warnings": [c for c in caveats if (c.model, c.device) == (g.model, g.device)],
                       **sections.design_group(data, g)})
    return {"data": data, "header": header(data), "groups": groups,
            "design": sections.design_document(data),     # an import's design file
            "captions": {k: with_trim(v, data.trim) if k in ("throughput", "detail") else v
                         for k, v in sections.CAPTIONS.items()},
            "left_out": sections.left_out(data.runs),
            "provenance": provenance.build(data, full=full_provenance),
            "plot_note": plot_note,
            "generated": when(dt.datetime.now(dt.UTC)),
            "orch_version": __version__}


# ---- markdown -> HTML --------------------------------------------------------------------

def _anchor(text: str) -> str:
    # GitHub's heading anchors, so the document's own [links](#provenance) work in HTML too
    return re.sub(r"[^\w\- ]", "", text.lower()).strip().replace(" ", "-")


def markdown_to_html(text: str) -> Markup:
    """CommonMark + GFM tables with raw HTML disabled: anything that looks like a tag in the
    data is escaped, and javascript: links are refused by markdown-it's link validation.
    (markdown-it-py comes with rich, a dependency of orch.)"""
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark", {"html": False}).enable("table")
    tokens = md.parse(text)
    for i, tok in enumerate(tokens):
        if tok.type == "heading_open" and i + 1 < len(tokens):
            tok.attrSet("id", _anchor(tokens[i + 1].content))
    html = md.renderer.render(tokens, md.options, {})
    # a wide table scrolls sideways in its own box instead of being cut at the page's width
    # (raw HTML is disabled, so every <table> here is the renderer's)
    html = html.replace("<table>", '<div class="table-scroll"><table>').replace(
        "</table>", "</table></div>")
    return Markup(html)


# ---- entry point -------------------------------------------------------------------------

@dataclass(frozen=True)
class ReportRequest:
    """How `orch report` renders a document (what it is about: results/report_data.py
    ReportData). `out`: written there, its figures in `<out stem>_files/`; `columns`: the
    throughput table's (`--columns`); `provenance_full`: user@host and absolute paths;
    `comparison`: `--compare`'s section (report/document/compare.py section), or None."""

    out: Path | None = None
    fmt: str = "md"
    template: str | Path | None = None
    plots: bool = True
    columns: list[str] | None = None
    provenance_full: bool = False
    comparison: dict[str, Any] | None = None


def render_report(data: ReportData, request: ReportRequest = ReportRequest()) -> str:
    """The report of these runs as markdown or HTML; written to `out` when given. Markdown
    links its figures from `<out stem>_files/` (drawn only with `out`); HTML embeds them as
    data: URIs, so the page is one file. Returns the text."""
    out, fmt, plots = request.out, request.fmt, request.plots
    env, user_main = environment(request.template)   # a bad --template refuses before drawing
    traced, untraceable = routing.build(data)   # none traced: the report as before
    drawn, note = None, None
    if plots and out is None and fmt != "html":
        note = "Figures are written only with `-o FILE` (next to the document)."
    elif plots:
        try:
            import matplotlib  # noqa: F401  (the `plots` extra: optional)
        except ImportError:
            note = "No figures: matplotlib is not installed (`pip install 'orch[plots]'`)."
        else:
            from orchestrator.report.document import plots as plotting
            from orchestrator.report.document import routing_plots as route_plots

            # HTML is one self-contained file: its figures are embedded, none written beside it
            drawn = plotting.draw(data, None if fmt == "html" else out)
            route_plots.draw(traced, None if fmt == "html" else out)
    ctx = document_context(data, drawn, note, request.columns, request.provenance_full)
    for group in ctx["groups"]:
        group.update(group_facts_and_pivot(group["group"]))
        group.update(against_ceilings.group_context(group["group"]))  # orch ceilings
        group.update(quality.group_context(group["group"]))  # quality probes
    ctx["quantile"] = data.quantile     # the Method paragraph names the p5/p95 method used
    ctx["comparison"] = request.comparison  # `--compare`: report/document/compare.py's section()
    ctx["routing"] = [routing.section_context(s) for s in traced]   # report/document/routing.py
    ctx["routing_problems"] = untraceable
    ctx["regressions"] = regression_sections(data.regressions)  # earlier sessions of the matrix
    try:
        if fmt == "html" and user_main is not None and _is_html(user_main):
            # the user's page template wraps the built-in markdown body
            ctx["body"] = markdown_to_html(env.get_template(MAIN["md"]).render(ctx))
            text = env.get_template(user_main).render(ctx)
        else:
            md_text = env.get_template(user_main or MAIN["md"]).render(ctx)
            if fmt == "html":
                ctx["body"] = markdown_to_html(md_text)
                text = env.get_template(MAIN["html"]).render(ctx)
            else:
                text = md_text
    except TemplateError as exc:
        raise template_error(exc) from None
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text, encoding="utf-8")
    return text
