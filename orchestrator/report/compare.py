"""`orch compare`: one matrix on several devices side by side, with each device's ratio to the
first (B/A). Repeats combine as in the report (mean of the ok runs' means); runs that did not
end ok are left out and named under the table.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from jinja2 import TemplateError
from rich.console import Console
from rich.table import Table as RichTable
from rich.text import Text

from orchestrator.config.yamlfile import ConfigError
from orchestrator.db.store import Store
from orchestrator.report import context, render
from orchestrator.report.cells import id_list
from orchestrator.results.formatting import STATS, ratio
from orchestrator.results.markdown import Table, md_escape
from orchestrator.results.values import DASH, is_missing

# (header, stats key, header of its ratio column or None). Cells are formatted by the shared
# formatter of each statistic, so a figure reads the same here as in the report.
METRICS: tuple[tuple[str, str, str | None], ...] = (
    ("mean tok/s", "mean", "mean"),
    ("p50 tok/s", "median", "p50"),
    ("p95 tok/s", "p95", None),
    ("read/token", "read_mib_per_token", None),
    ("peak RSS", "peak_rss_gib", "peak RSS"),
)


def comparison(data: context.ReportData, devices: Sequence[str]) -> dict[str, Any]:
    """Rows keyed (model, config) in first-seen order, each device's ConfigAgg (or None)."""
    keyed: dict[tuple[str, str], dict[str, context.ConfigAgg]] = {}
    for g in data.groups:
        for agg in g.configs:
            keyed.setdefault((g.model, agg.config), {})[g.device] = agg
    headers = ["Model", "Config"]
    for d in devices:
        headers += [f"{d} {h}" for h, _, _ in METRICS] + [f"{d} runs"]
    base = devices[0]
    for d in devices[1:]:
        headers += [f"{d}/{base} {r}" for _, _, r in METRICS if r]
    rows = []
    for (model, config), per_device in keyed.items():
        row = [model, config]
        for d in devices:
            agg = per_device.get(d)
            v = agg.values if agg is not None and agg.runs else {}
            row += [STATS[k].fmt(v.get(k)) for _, k, _ in METRICS]
            row.append(id_list(agg.ids) if agg is not None and agg.runs else DASH)
        a = per_device.get(base)
        for d in devices[1:]:
            b = per_device.get(d)
            for _, key, with_ratio in METRICS:
                if not with_ratio:
                    continue
                x = a.values.get(key) if a is not None and a.runs else None
                y = b.values.get(key) if b is not None and b.runs else None
                row.append(ratio(y / x) if not is_missing(x) and not is_missing(y) and x else DASH)
        rows.append(row)
    drop_model = all(r[0] == "-" for r in rows)
    if drop_model:
        headers, rows = headers[1:], [r[1:] for r in rows]
    return {"headers": headers, "rows": rows, "devices": list(devices),
            "left_out": [context.left_out_line(r) for r in data.failed]}


def markdown_table(comp: dict[str, Any]) -> Table:
    text_cols = 1 if comp["headers"][0] == "Config" else 2
    table = Table(list(map(md_escape, comp["headers"])),
                        ["---"] * text_cols + ["---:"] * (len(comp["headers"]) - text_cols))
    for row in comp["rows"]:
        table.rows.append([md_escape(c) for c in row])
    return table


def print_rich(console: Console, comp: dict[str, Any], title: str) -> None:
    table = RichTable(title=title, title_justify="left")
    for i, h in enumerate(comp["headers"]):
        # a device's group is its name on the first header line
        table.add_column(Text(h.replace(" ", "\n", 1)), justify="left" if i < 2 else "right")
    for row in comp["rows"]:
        table.add_row(*(Text(c) for c in row))     # Text: no rich markup from config names
    console.print(table)
    for line in comp["left_out"]:
        console.print(Text(line))


def compare(store: Store, devices: Sequence[str], session: str | None = None,
            matrix: str | None = None, out: Path | None = None,
            console: Console | None = None, template: str | Path | None = None) -> str:
    if len(devices) < 2:
        raise ConfigError("compare needs at least two --device")
    rows = context.select_runs(store, session, matrix, devices)
    data = context.build(store, rows, keep_frames=False)
    present = {r.row.device for r in data.runs}
    missing = [d for d in devices if d not in present]
    if missing:
        raise ConfigError(f"no runs on {', '.join(missing)}")
    comp = comparison(data, devices)
    title = f"{data.title}: " + " vs ".join(devices)
    if console is not None:
        print_rich(console, comp, title)
    env, user_main = render.environment(template)
    sessions = {d: sorted({r.row.session_id for r in data.runs if r.row.device == d})
                for d in devices}
    try:
        text = env.get_template(user_main or "compare.md.j2").render(
            title=md_escape(title), table=markdown_table(comp), devices=devices,
            sessions=sessions, left_out=[md_escape(x) for x in comp["left_out"]],
            header=render.header(data), base=devices[0], data=data, comparison=comp)
    except TemplateError as exc:
        raise render.template_error(exc) from None
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text, encoding="utf-8")
    return text
