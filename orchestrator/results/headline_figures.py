"""`orch compare` beyond decode tok/s: each headline figure of a matched config, side against
the reference side, with its interval where the runs support one.

A ratio (B/A, on the logs as the decode comparison: stats/uncertainty.py compare) for rates,
times and memory; a difference (B − A, °C) for temperatures, whose ratio means nothing. Each
side's value is the mean over its ok runs that measured the figure (for peak RSS and the
maxima too: an interval needs the runs, and the worst run is the report's tables'), with its
95% Student-t interval; the comparison's interval is Welch's (the sides ran at different
times), none when a side has a single run. These describe; only decode tok/s is tested (and
Holm-corrected) in the comparison table, so none of them is called significant.
"""
from __future__ import annotations

from dataclasses import dataclass

from orchestrator.stats.config_figures import ConfigFigures
from orchestrator.stats.uncertainty import (
    Comparison,
    Difference,
    Interval,
    compare,
    difference,
    mean_interval,
)

RATIO, DIFFERENCE = "ratio", "difference"


@dataclass(frozen=True)
class Figure:
    """A headline figure: its RunFigures key, its name and unit, and how two sides compare."""

    key: str
    name: str
    unit: str = ""
    kind: str = RATIO


# the report's headline figures: throughput (decode, prefill, the p95 column), latency,
# memory and temperature (docs/compare.md "Every headline figure")
FIGURES = (
    Figure("mean", "decode", "tok/s"),
    Figure("prefill_tps", "prefill", "tok/s"),
    Figure("ttft_s", "TTFT", "s"),
    Figure("p95", "p95", "tok/s"),
    Figure("latency_p99_ms", "p99 latency", "ms"),
    Figure("peak_rss_gib", "peak RSS", "GiB"),
    Figure("cpu_temp_start_c", "CPU temp at start", "°C", DIFFERENCE),
    Figure("cpu_temp_max_c", "CPU temp max", "°C", DIFFERENCE),
    Figure("batt_temp_max_c", "battery temp max", "°C", DIFFERENCE),
)
BY_KEY = {f.key: f for f in FIGURES}


@dataclass(frozen=True)
class FigureComparison:
    """One figure of a matched config on the reference side and another."""

    figure: Figure
    reference: Interval
    other: Interval
    change: Comparison | Difference      # a ratio (Comparison) or a difference

    @property
    def value(self) -> float | None:
        c = self.change
        return c.ratio if isinstance(c, Comparison) else c.value


def figure_comparisons(reference: ConfigFigures, other: ConfigFigures
                       ) -> list[FigureComparison]:
    """Each headline figure both sides measured (FIGURES' order)."""
    out = []
    for fig in FIGURES:
        a, b = reference.of_runs(fig.key), other.of_runs(fig.key)
        ia, ib = mean_interval(a), mean_interval(b)
        if ia.mean is None or ib.mean is None:
            continue
        change = compare(a, b, paired=False) if fig.kind == RATIO else difference(a, b)
        out.append(FigureComparison(fig, ia, ib, change))
    return out
