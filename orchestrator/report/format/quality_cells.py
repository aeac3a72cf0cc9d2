"""The cells and lines of the quality probes' results (results/quality.py), shared by `orch
quality` (table/quality.py) and the report's quality part (document/quality.py): a Δ in
percentage points, accuracy with its Wilson interval, the drop the sample rules out, the
questions whose graded answers differ, and the method's paragraph."""
from __future__ import annotations

from orchestrator.report.format.formatters import MINUS
from orchestrator.report.format.markdown import md_escape
from orchestrator.results.quality import ConfigQuality, ModelQuality
from orchestrator.stats.values import DASH


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
