"""Render a report: Jinja2 templates -> markdown, and that markdown -> a standalone HTML page.

Templates come from `reports/templates/` (package data of orchestrator.reports); `--template`
puts a user file or directory in front of them (ChoiceLoader), so a user can replace the whole
document or one part (`provenance.md.j2`, `page.html.j2`, ...) and include the built-in rest.
Markdown templates are not autoescaped (markdown is not HTML): every value that comes from
data goes through the `md` / `code` filters, and the built cells are escaped already. HTML
templates (*.html, *.html.j2) are autoescaped; the markdown body is converted with HTML
disabled, so a `<script>` in a config name arrives as text.

The context the templates read is the sections' (sections_registry.py SECTIONS): render_report
draws the figures first (_draw), then goes down the list.
"""
from __future__ import annotations

import functools

import re
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

from orchestrator.errors import ConfigError
from orchestrator.report.document import routing
from orchestrator.report.document.request import ReportRequest, SectionRequest
from orchestrator.report.document.sections_registry import SECTIONS
from orchestrator.report.format import markdown as md
from orchestrator.report.format.cells import id_list
from orchestrator.report.format.formatters import cell, pct, ratio, when
from orchestrator.report.format.labels import group_title
from orchestrator.results.report_data import ReportData

MAIN = {"md": "report.md.j2", "html": "page.html.j2"}


@functools.lru_cache(maxsize=16)
def environment(template: str | Path | None = None) -> tuple[Environment, str | None]:
    """(environment, name of the user's main template when --template is a file). One per
    template argument, kept: its compiled templates are reused by every document rendered
    with it (`orch site` renders hundreds; jinja reloads a template file that changed)."""
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

def document_context(data: ReportData, request: SectionRequest) -> dict[str, Any]:
    """The templates' names: each section's (sections_registry.py SECTIONS, in its order),
    the groups (`title`, `slug`, `group`, then each section's group names), `data` and
    `quantile` (the p5/p95 method the Method paragraph names)."""
    ctx: dict[str, Any] = {"data": data, "quantile": data.quantile}
    groups = [{"title": md.md_escape(_heading(g)), "slug": g.slug, "group": g}
              for g in data.groups]
    for section in SECTIONS:
        if section.context is not None:
            ctx.update(section.context(data, request))
        if section.group_context is not None:
            for names, g in zip(groups, data.groups):
                names.update(section.group_context(g, data, request))
    ctx["groups"] = groups
    return ctx


def _heading(group: Any) -> str:
    """A group's heading: its model's label on its device (labels.group_title)."""
    return group_title(group)


def _draw(data: ReportData, request: ReportRequest) -> SectionRequest:
    """What the sections need drawn or analysed first: the traced runs' routing parts
    (document/routing.py; none traced: the report as before) and, when figures are asked for
    and can be drawn, every group's and traced run's figures."""
    out, fmt = request.out, request.fmt
    traced, untraceable = routing.build(data)
    drawn: dict[str, list[Any]] = {}
    note = None
    if request.plots and out is None and fmt != "html":
        note = "Figures are written only with `-o FILE` (next to the document)."
    elif request.plots:
        try:
            import matplotlib  # noqa: F401  (the `plots` extra: optional)
        except ImportError:
            note = "No figures: matplotlib is not installed (`pip install 'orch[plots]'`)."
        else:
            from orchestrator.report.document import plots as plotting
            from orchestrator.report.document import routing_plots

            # HTML is one self-contained file: its figures are embedded, none written beside it
            drawn = plotting.draw(data, None if fmt == "html" else out)
            routing_plots.draw(traced, None if fmt == "html" else out)
    return SectionRequest(report=request, figures=drawn, plot_note=note, traced=traced,
                          untraceable=untraceable)


def render_report(data: ReportData, request: ReportRequest = ReportRequest()) -> str:
    """The report of these runs as markdown or HTML; written to `out` when given. Markdown
    links its figures from `<out stem>_files/` (drawn only with `out`); HTML embeds them as
    data: URIs, so the page is one file. Returns the text."""
    out, fmt = request.out, request.fmt
    env, user_main = environment(request.template)   # a bad --template refuses before drawing
    ctx = document_context(data, _draw(data, request))
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
