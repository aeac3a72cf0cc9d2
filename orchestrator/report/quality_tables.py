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

from orchestrator.report.formatting import MINUS
from orchestrator.report.markdown import Table, md_escape, render
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


def pp(value: float | None) -> str:
    # + 0.0: no "−0.0 pp" for a drop of exactly zero
    return DASH if value is None else f"{100 * value + 0.0:+.1f} pp".replace("-", MINUS)


def accuracy_cell(q: ConfigQuality) -> str:
    """"80.0% [54.8–93.0] (12/15)"."""
    if q.accuracy is None or q.interval is None:    # both None exactly when nothing answered
        return f"{DASH} (0/0)"
    low, high = q.interval
    return (f"{100 * q.accuracy:.1f}% [{100 * low:.1f}–{100 * high:.1f}] "
            f"({q.correct}/{q.total})")


def rules_out_cell(q: ConfigQuality) -> str:
    """What the sample rules out: a drop larger than the one-sided 95% bound."""
    if q.drop is None:
        return DASH
    if q.drop.upper <= 0:
        return f"any drop (bound {pp(q.drop.upper)})"
    return f"> {100 * q.drop.upper:.1f} pp"


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


def differ_lines(m: ModelQuality, labels: dict[str, str] | None = None) -> list[str]:
    """One bullet per question whose graded answers differ: each answer, then the configs
    that gave it ("7: good; 8: bad")."""
    labels = labels or {}
    lines = []
    for d in m.differ:
        groups: dict[str | None, list[str]] = {}
        for config, answer in d.answers.items():
            groups.setdefault(answer, []).append(labels.get(config, config))
        parts = [f"{md_escape(a) if a is not None else '(none)'}: "
                 f"{', '.join(md_escape(c) for c in cs)}" for a, cs in groups.items()]
        lines.append(f"- {md_escape(d.id)} (expected {md_escape(d.expected or DASH)}): "
                     + "; ".join(parts))
    return lines


METHOD = ("Accuracy over the probes each config answered (an engine failure is counted apart, "
          "not as a wrong answer), with its Wilson 95% interval. *Drop ruled out*: the one-sided "
          "95% upper bound of baseline accuracy − config accuracy, paired question by question "
          "(Newcombe's score interval for paired proportions): a larger regression is "
          "incompatible with this sample, a smaller one is not.")


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
