"""`orch quality` output: markdown, CSV (one row per config) and JSON:
{"configs": [{config, correct, total, accuracy_pct, ci_low_pct, ci_high_pct}],
 "differ": [{id, expected, answers: {config: answer}}]}.
A session with several models names its configs `MODEL/CONFIG` there (and its questions
`MODEL/ID`), so the keys keep this shape and never mix two models' answers."""
from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from typing import Any

from orchestrator.report.format.markdown import Table, md_escape, render
from orchestrator.report.format.quality_cells import (
    METHOD,
    accuracy_cell,
    differ_lines,
    pp,
    rules_out_cell,
)
from orchestrator.results.quality import ConfigQuality, Differ, ModelQuality
from orchestrator.stats.values import DASH


def _pct(value: float | None) -> float | None:
    return None if value is None else round(100 * value, 2)


def _name(model: str, name: str, several: bool) -> str:
    return f"{model}/{name}" if several else name


def config_record(q: ConfigQuality, several: bool) -> dict[str, Any]:
    low, high = q.interval if q.interval else (None, None)
    return {"config": _name(q.model, q.config, several), "correct": q.correct,
            "total": q.total, "accuracy_pct": _pct(q.accuracy), "ci_low_pct": _pct(low),
            "ci_high_pct": _pct(high)}


def differ_record(d: Differ, several: bool) -> dict[str, Any]:
    return {"id": _name(d.model, d.id, several), "expected": d.expected,
            "answers": {_name(d.model, c, several): a for c, a in d.answers.items()}}


def to_json(models: Sequence[ModelQuality]) -> str:
    several = len(models) > 1
    return json.dumps({
        "configs": [config_record(q, several) for m in models for q in m.configs],
        "differ": [differ_record(d, several) for m in models for d in m.differ],
    }, indent=2, ensure_ascii=False) + "\n"


CSV_COLUMNS = ("model", "config", "correct", "total", "failed", "accuracy_pct", "ci_low_pct",
               "ci_high_pct", "baseline", "drop_pp", "rules_out_drop_over_pp")


def to_csv(models: Sequence[ModelQuality]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for m in models:
        for q in m.configs:
            rec = config_record(q, False)
            writer.writerow([m.model, q.config, q.correct, q.total, q.failed,
                             rec["accuracy_pct"], rec["ci_low_pct"], rec["ci_high_pct"],
                             m.baseline, _pct(q.drop.drop) if q.drop else None,
                             _pct(q.drop.upper) if q.drop else None])
    return out.getvalue()


def quality_table(m: ModelQuality, labels: dict[str, str] | None = None) -> Table:
    labels = labels or {}
    table = Table(["Config", "accuracy [95% CI] (correct/answered)", "Δ vs baseline",
                   "drop ruled out (95%)", "failed"], ["---", "---:", "---:", "---:", "---:"])
    for q in m.configs:
        name = md_escape(labels.get(q.config, q.config))
        table.rows.append([name, accuracy_cell(q),
                           "baseline" if q.config == m.baseline else
                           (pp(-q.drop.drop) if q.drop else DASH),
                           rules_out_cell(q), str(q.failed) if q.failed else DASH])
    return table


def to_markdown(models: Sequence[ModelQuality]) -> str:
    if not models:
        return "No quality probes in this session (a matrix adds them with `quality:`).\n"
    out = []
    for m in models:
        model = f": {md_escape(m.model)}" if m.model != "-" else ""   # "-": no models
        out.append(f"## Quality{model} (baseline {md_escape(m.baseline)})\n")
        out.append(render(quality_table(m)))
        out.append("")
        if m.differ:
            out.append("Questions whose graded answers differ between configs:\n")
            out.extend(differ_lines(m))
        else:
            out.append("Every config gave the same graded answers.")
        out.append("")
    out.append(METHOD)
    return "\n".join(out) + "\n"
