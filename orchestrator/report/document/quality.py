"""The report's quality part of a (model, device) group: accuracy beside tok/s, config by
config (the A/B table's mean and Δ next to the probes' accuracy and its Wilson interval), the
largest accuracy drop against the baseline the probe sample rules out, and the questions whose
graded answers differ. A group without probe rows gets nothing (and no words).

Kept out of results/ab.py on purpose: the A/B table stays the speed table of `orch table`, and
this table sits right under it in the report (group.md.j2 includes quality.md.j2)."""
from __future__ import annotations

from typing import Any

from orchestrator.report.document.request import SectionRequest
from orchestrator.report.format.ab_rows import mean_cell
from orchestrator.report.format.formatters import STATS, pct
from orchestrator.report.format.markdown import Table, md_escape
from orchestrator.report.format.quality_cells import (
    METHOD,
    accuracy_cell,
    differ_lines,
    pp,
    rules_out_cell,
)
from orchestrator.results.quality import ModelQuality
from orchestrator.results.report_data import Group, ReportData
from orchestrator.stats.values import DASH

NONE: dict[str, Any] = {"quality": None, "quality_caption": None, "quality_differ": []}


def table(group: Group, probed: ModelQuality) -> Table:
    """Config | decode tok/s | Δ tok/s | accuracy [95% CI] | Δ accuracy | drop ruled out."""
    ab_rows = {r.config: r for r in (group.ab.rows if group.ab is not None else [])}
    out = Table(["Config", "decode tok/s [95% CI]", "Δ tok/s", "accuracy [95% CI]",
                 "Δ accuracy", "drop ruled out (95%)", "probe failures"],
                ["---", "---:", "---:", "---:", "---:", "---:", "---:"])
    for q in probed.configs:
        agg = group.config(q.config)
        ab = ab_rows.get(q.config)
        if ab is not None and ab.ids:
            speed = mean_cell(ab.interval, headline=False)
        elif agg is not None and agg.runs:
            speed = STATS["mean"].fmt(agg.values.get("mean"))
        else:
            speed = DASH
        if q.config == probed.baseline:
            delta, acc_delta = "baseline", "baseline"
        else:
            c = ab.comparison if ab is not None else None
            delta = pct(c.delta_pct) if c is not None else DASH
            acc_delta = pp(-q.drop.drop) if q.drop else DASH
        label = agg.label if agg is not None and agg.label else q.config
        out.rows.append([md_escape(label), speed, delta, accuracy_cell(q), acc_delta,
                         rules_out_cell(q), str(q.failed) if q.failed else DASH])
    return out.drop_empty(keep=(0, 1, 3))


TEMPLATE = "quality.md.j2"


def group_context(group: Group, data: ReportData, request: SectionRequest) -> dict[str, Any]:
    """`quality` (a Table or None), `quality_caption` and `quality_differ` (markdown bullet
    lines) for quality.md.j2: the group's model in the newest of its sessions that ran
    probes (results/report_data.py)."""
    probed = group.quality
    if probed is None or not probed.configs:
        return dict(NONE)
    labels = {a.config: a.label for a in group.configs if a.label}
    total = max(q.total + q.failed for q in probed.configs)
    caption = (f"**Quality beside speed** ({total} probe question(s) per config, baseline "
               f"{md_escape(labels.get(probed.baseline, probed.baseline))}). {METHOD}")
    return {"quality": table(group, probed), "quality_caption": caption,
            "quality_differ": differ_lines(probed, labels)}
