"""Adaptive repeats (`repeat: {min: 3, max: 10, until: 2%}`): is every config's mean known well
enough yet? Phoronix's dynamic run count, judged by the 95% interval of the mean instead of a
standard-deviation threshold.

The judgement reads the same figure the report prints, the config's mean tok/s with its 95%
interval (stats/config_figures.py ConfigFigures.mean, over the runs' stored figures), or a
session could stop on a figure the report then contradicts.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from orchestrator.config.matrix_values import RepeatPolicy
from orchestrator.db.runs import Runs
from orchestrator.db.store import Store
from orchestrator.stats.config_figures import RunResult, combine_all


@dataclass(frozen=True)
class Verdict:
    met: bool
    widest: float               # widest half-width, % of the mean (inf: a config has n < 2)
    widest_config: str | None   # "model/config" (or "config" without a model)
    unjudged: tuple[str, ...]   # configs without an ok run: nothing to judge

    def reason(self, rounds: int, policy: RepeatPolicy) -> str:
        """Why the session stopped adding rounds, as the session row and the report say it."""
        widest = ("no interval yet" if math.isinf(self.widest)
                  else f"widest ±{self.widest:.2f}% ({self.widest_config})")
        text = (f"target met after {rounds} rounds: every config's 95% interval within "
                f"±{policy.target:g}% of its mean ({widest})" if self.met else
                f"max reached: {rounds} rounds, {widest} above the ±{policy.target:g}% target")
        if self.unjudged:
            text += f"; not judged (no ok run): {', '.join(self.unjudged)}"
        return text


def judge(store: Store, session_id: int, policy: RepeatPolicy) -> Verdict:
    """The session's ok runs, per (model, config): is every 95% interval of the mean tok/s
    within `policy.until` percent of the mean?"""
    rows = Runs(store).current(session=session_id)
    figures = Runs(store).figures(rows)
    groups: dict[str, list[RunResult]] = {}
    for r in rows:
        name = f"{r.config}" if (r.model or "-") == "-" else f"{r.model}/{r.config}"
        groups.setdefault(name, []).append(RunResult(r.id, r.status, figures[r.id]))
    widths: dict[str, float] = {}
    for name, config in combine_all(groups).items():
        if config.ok:
            half = config.mean.half_width_pct
            widths[name] = math.inf if half is None else half
    unjudged = tuple(n for n in groups if n not in widths)
    if not widths:
        return Verdict(False, math.inf, None, unjudged)
    widest_config = max(widths, key=lambda n: widths[n])
    widest = widths[widest_config]
    return Verdict(widest <= policy.target, widest, widest_config, unjudged)
