"""`ConfigFigures`: a config's runs combined, the result model's other half.

Every place that shows or judges a config over its repeats reads this, and nothing else
combines runs: the report's and `orch table`'s rows, A/B, `orch compare`, history and its
change points, the pivot tables, the regressions section and the adaptive-repeat judgement
(docs/architecture.md, "Statistics"). The rules, written once:

- only runs that ended ok count (`Status.OK`); every other run is counted by status and named
  (`not_ok`), never averaged in;
- the headline is the mean of the runs' means (each run's n / Σ decode s) with its 95%
  Student-t interval over those means (`mean`); the spread of the means beside it
  (`spread`), or, for a single run whose engine repeated internally (llama-bench -r N), the
  spread of those repetitions;
- every other figure averages the ok runs that measured it (None when none did, never 0),
  except the extremes and device pressure, which take the worst run (a report must not hide
  the hottest or fullest run: `WORST`); `n` sums the runs' tokens;
- a run that had not settled says so for the config (`settle_note`);
- the stall of a serial run is not measured (stats/overlap.py), so a serial config has none;
- a session config's turn comparisons (stats/turns.py, Δ% of the after-idle and first turns
  against the warm ones) over two or more runs are the mean of the runs' Δ with its 95%
  Student-t interval over them (between-run noise, as for the mean); one run keeps its own
  within-run bootstrap interval. Intervals are never averaged.
"""
from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from orchestrator.stats.figures import FIELDS, RunFigures
from orchestrator.stats.overlap import all_same
from orchestrator.stats.status import Status
from orchestrator.stats.uncertainty import Interval, mean_interval
from orchestrator.stats.values import is_missing

# the figures whose config value is the worst run's, and which way is worse
WORST = {"min": min, "max": max, "peak_rss_gib": max, "mem_floor_gib": min,
         "cpu_temp_max_c": max, "batt_temp_max_c": max}
REPETITIONS = "repetitions"   # Spread.unit of one run's internal repetitions


@dataclass(frozen=True)
class RunResult:
    """One run as a config's figures need it."""

    id: int
    status: str                 # a Status value (a stored string compares equal)
    figures: RunFigures

    @property
    def ok(self) -> bool:
        return self.status == Status.OK


@dataclass(frozen=True)
class Spread:
    """The spread of repeated measurements: runs' means, or one run's repetitions."""

    mean: float | None = None
    stdev: float | None = None      # sample stdev (n - 1), as llama-bench's stddev_ts
    min: float | None = None
    max: float | None = None
    n: int = 0
    unit: str = "runs"              # "runs" | REPETITIONS

    def get(self, key: str, default: Any = None) -> Any:
        """As a mapping (the report's spread cell reads it so)."""
        return getattr(self, key, default)

    def __getitem__(self, key: str) -> Any:
        return getattr(self, key)


def spread(values: Sequence[float | None], unit: str = "runs") -> Spread:
    """The spread of repeated measurements, missing values skipped."""
    xs = [float(x) for x in values if not is_missing(x)]
    if not xs:
        return Spread(unit=unit)
    return Spread(statistics.fmean(xs), statistics.stdev(xs) if len(xs) > 1 else None,
                  min(xs), max(xs), len(xs), unit)


@dataclass(frozen=True)
class ConfigFigures:
    """A config's runs combined (see the module doc)."""

    runs: tuple[RunResult, ...]                  # every run of the config, in run order
    values: Mapping[str, Any]                    # the combined figures, by RunFigures name
    mean: Interval                               # mean tok/s over the ok runs' means, 95%
    spread: Spread
    statuses: Mapping[str, int] = field(default_factory=dict)   # status -> runs

    @property
    def ok(self) -> tuple[int, ...]:
        """The ids of the runs every figure comes from."""
        return tuple(r.id for r in self.runs if r.ok)

    @property
    def not_ok(self) -> tuple[int, ...]:
        """The ids of the runs that did not end ok: in no figure."""
        return tuple(r.id for r in self.runs if not r.ok)

    @property
    def overlapped(self) -> bool | None:
        """The ok runs' common overlap (the ‡ of the tables), None when they differ."""
        return all_same(r.figures.overlapped for r in self.runs if r.ok)

    def get(self, key: str, default: Any = None) -> Any:
        value = self.values.get(key)
        return default if value is None else value

    def of_runs(self, key: str) -> list[float | None]:
        """Figure `key` of each ok run, in run order (None where a run did not measure it)."""
        return [r.figures.get(key) for r in self.runs if r.ok]

    def samples(self, key: str = "mean") -> tuple[list[float], str]:
        """(the measurements behind the config's `key`, their basis): the ok runs' values
        ("runs", or "run" for one), or for `mean` of a single run whose engine repeated
        internally, those repetitions ("repetitions"). What history and the regressions
        section test across sessions."""
        ok = [r for r in self.runs if r.ok and not is_missing(r.figures.get(key))]
        if len(ok) == 1 and key == "mean":
            reps = ok[0].figures.repetitions or ()
            if len(reps) >= 2:
                return list(reps), REPETITIONS
        return [float(r.figures.get(key)) for r in ok], "runs" if len(ok) > 1 else "run"

    def interval(self, key: str = "mean") -> Interval:
        """The 95% interval of figure `key` over the ok runs (`mean`'s is `self.mean`)."""
        return self.mean if key == "mean" else mean_interval(self.of_runs(key))


def combine(runs: Sequence[RunResult]) -> ConfigFigures:
    """A config's figures from its runs (all of them, in run order; see the module doc)."""
    good = [r for r in runs if r.ok]
    values: dict[str, Any] = {}
    if good:
        for key in FIELDS:
            xs = [v for v in (r.figures.get(key) for r in good) if not is_missing(v)]
            if not xs:
                values[key] = None
            elif key in WORST:
                values[key] = WORST[key](xs)
            elif all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in xs):
                values[key] = statistics.fmean(xs) if len(xs) > 1 else xs[0]
            else:
                values[key] = xs[0]
        values["n"] = sum(r.figures.n for r in good)
        values["tokens"] = sum(r.figures.tokens or 0 for r in good) or None
        # the engine's printed precision only where every figure is the engine's summary
        values["summary_only"] = all(r.figures.summary_only for r in good)
        # a config with a run that had not settled says so where the steady state would be
        values["settle_note"] = next((r.figures.settle_note for r in good
                                      if r.figures.settle_note), None)
        _turn_comparisons(values, good)
    means = [r.figures.mean for r in good]
    interval = mean_interval(means)
    values["mean_ci_low"], values["mean_ci_high"] = interval.low, interval.high
    reps = good[0].figures.repetitions if len(good) == 1 else None
    shown = spread(reps, REPETITIONS) if reps and len(reps) >= 2 else spread(means)
    return ConfigFigures(tuple(runs), values, interval, shown,
                         dict(Counter(str(r.status) for r in runs)))


TURN_COMPARISONS = ("after_idle_vs_warm", "first_vs_warm")


def _turn_comparisons(values: dict[str, Any], good: Sequence[RunResult]) -> None:
    """The config's turn comparisons over its ok runs (see the module doc), in `values`."""
    for key in TURN_COMPARISONS:
        deltas = [r.figures.get(f"{key}_pct") for r in good]
        deltas = [d for d in deltas if not is_missing(d)]
        if len(deltas) < 2:
            continue
        iv = mean_interval(deltas)
        values[f"{key}_pct"], values[f"{key}_ci_low"], values[f"{key}_ci_high"] = (
            iv.mean, iv.low, iv.high)


def combine_all(groups: Mapping[Any, Sequence[RunResult]]) -> dict[Any, ConfigFigures]:
    """`combine` for each group of runs (key -> its runs), keys kept in order."""
    return {key: combine(runs) for key, runs in groups.items()}
