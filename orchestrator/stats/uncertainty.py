"""How sure a number is: intervals for a config's mean over repeats, and A/B comparisons with
an interval on the % change, a p-value and a multiple-comparison correction
(docs/architecture.md, "Statistics").

Ratios are compared on the log scale: a 10% slow-down and a 10% speed-up are symmetric there,
and the interval of a ratio never crosses zero. `compare` is paired when both configs ran in
the same rounds (an interleaved order or A/B pairs: each round's two runs saw the same device
state, so the round-to-round drift cancels) and Welch's unequal-variance test otherwise. The
reported change is the ratio of geometric means, so the interval always contains it; with the
few percent of run-to-run spread benchmarks have, it differs from the ratio of arithmetic means
by far less than the interval's width.

A comparison is `significant` only when its Holm-corrected p-value is below alpha: with ten A/B
rows in a report, one would be "significant" at p < 0.05 by chance about 40% of the time
without a correction. Figures that carry no noise (a cache hit rate, MiB read per token, a
token count) are not compared here: their difference is exact and needs no caveat.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np
from scipy import stats

CONFIDENCE = 0.95
ALPHA = 0.05


@dataclass(frozen=True)
class Interval:
    """A mean over n repeats with its confidence interval (None when n < 2)."""

    mean: float | None
    low: float | None
    high: float | None
    n: int

    @property
    def half_width_pct(self) -> float | None:
        """Half the interval's width as a % of the mean: how precise the mean is."""
        if self.low is None or self.high is None or not self.mean:
            return None
        return (self.high - self.low) / 2 / abs(self.mean) * 100.0


def _finite(values: Sequence[float | None]) -> np.ndarray:
    out = np.array([v for v in values if v is not None], dtype=float)
    return out[np.isfinite(out)]


# `orch site` computes the same figures' intervals and tests again and again (a session's
# runs in its history, its report, and its neighbours' regressions sections): both functions
# are pure, so each set of values is computed once per process (a forked renderer inherits
# what its parent computed). The results are frozen dataclasses, safe to share.
CACHED = 1 << 16


def mean_interval(values: Sequence[float | None], confidence: float = CONFIDENCE) -> Interval:
    """Student-t interval of the mean of repeated measurements (missing values skipped)."""
    return _mean_interval(tuple(values), confidence)


@lru_cache(maxsize=CACHED)
def _mean_interval(values: tuple[float | None, ...], confidence: float) -> Interval:
    x = _finite(values)
    n = len(x)
    if n == 0:
        return Interval(None, None, None, 0)
    mean = float(x.mean())
    if n < 2:
        return Interval(mean, None, None, n)
    sem = float(x.std(ddof=1)) / math.sqrt(n)
    if sem == 0:
        return Interval(mean, mean, mean, n)
    low, high = stats.t.interval(confidence, n - 1, loc=mean, scale=sem)
    return Interval(mean, float(low), float(high), n)


@dataclass(frozen=True)
class Comparison:
    """Candidate vs baseline: ratio of (geometric) means with its interval and p-value."""

    ratio: float | None
    low: float | None
    high: float | None
    p_value: float | None
    method: str | None          # "paired" | "welch" | None (too few runs to tell)
    n_base: int
    n_cand: int
    p_adjusted: float | None = None
    significant: bool = False

    @property
    def delta_pct(self) -> float | None:
        return None if self.ratio is None else (self.ratio - 1.0) * 100.0

    @property
    def ci_low_pct(self) -> float | None:
        return None if self.low is None else (self.low - 1.0) * 100.0

    @property
    def ci_high_pct(self) -> float | None:
        return None if self.high is None else (self.high - 1.0) * 100.0


def _positive_logs(values: Sequence[float | None]) -> np.ndarray:
    x = _finite(values)
    return np.log(x[x > 0])


def compare(base: Sequence[float | None], cand: Sequence[float | None], paired: bool = False,
            confidence: float = CONFIDENCE) -> Comparison:
    """Compare repeated measurements of a candidate with a baseline (e.g. runs' tok/s).

    paired: `base[i]` and `cand[i]` ran in the same round; rounds where either is missing
    are dropped. Falls back to Welch when fewer than two complete rounds remain.
    """
    return _compare(tuple(base), tuple(cand), paired, confidence)


@lru_cache(maxsize=CACHED)
def _compare(base: tuple[float | None, ...], cand: tuple[float | None, ...], paired: bool,
             confidence: float) -> Comparison:
    if paired:
        rounds = [(a, b) for a, b in zip(base, cand)
                  if a is not None and b is not None and np.isfinite(a) and np.isfinite(b)
                  and a > 0 and b > 0]
        if len(rounds) >= 2:
            d = np.log([b for _, b in rounds]) - np.log([a for a, _ in rounds])
            return _one_sample(d, "paired", len(rounds), len(rounds), confidence)
    la, lb = _positive_logs(base), _positive_logs(cand)
    if not len(la) or not len(lb):
        return Comparison(None, None, None, None, None, len(la), len(lb))
    ratio = float(np.exp(lb.mean() - la.mean()))
    if len(la) < 2 or len(lb) < 2:
        return Comparison(ratio, None, None, None, None, len(la), len(lb))
    # identical values have a std of ~1e-16 from rounding in the mean: test the range instead
    if np.ptp(la) == 0 and np.ptp(lb) == 0:
        return _exact(ratio, "welch", len(la), len(lb))
    result = stats.ttest_ind(lb, la, equal_var=False)
    ci = result.confidence_interval(confidence)
    return Comparison(ratio, float(np.exp(ci.low)), float(np.exp(ci.high)),
                      float(result.pvalue), "welch", len(la), len(lb))


def _one_sample(d: np.ndarray, method: str, n_base: int, n_cand: int,
                confidence: float) -> Comparison:
    ratio = float(np.exp(d.mean()))
    if np.ptp(d) == 0:
        return _exact(ratio, method, n_base, n_cand)
    result = stats.ttest_1samp(d, 0.0)
    ci = result.confidence_interval(confidence)
    return Comparison(ratio, float(np.exp(ci.low)), float(np.exp(ci.high)),
                      float(result.pvalue), method, n_base, n_cand)


def _exact(ratio: float, method: str, n_base: int, n_cand: int) -> Comparison:
    """No spread at all on either side: the difference is what it is."""
    return Comparison(ratio, ratio, ratio, 1.0 if ratio == 1.0 else 0.0, method, n_base, n_cand)


def holm(p_values: Sequence[float | None]) -> list[float | None]:
    """Holm-Bonferroni adjusted p-values (missing ones stay None and do not count)."""
    known = sorted((p, i) for i, p in enumerate(p_values) if p is not None)
    m = len(known)
    adjusted: list[float | None] = [None] * len(p_values)
    running = 0.0
    for rank, (p, i) in enumerate(known):
        running = max(running, min(1.0, (m - rank) * p))   # step-down, kept monotone
        adjusted[i] = running
    return adjusted


def correct(comparisons: Sequence[Comparison], alpha: float = ALPHA) -> list[Comparison]:
    """The comparisons of one report with Holm-adjusted p-values and `significant` set."""
    adjusted = holm([c.p_value for c in comparisons])
    return [replace(c, p_adjusted=p, significant=p is not None and p < alpha)
            for c, p in zip(comparisons, adjusted)]


@dataclass(frozen=True)
class Difference:
    """Candidate minus baseline (a temperature in °C, where a ratio of two readings means
    nothing): the difference of the means with its Welch interval (None below two runs a
    side)."""

    value: float | None
    low: float | None
    high: float | None
    n_base: int
    n_cand: int


def difference(base: Sequence[float | None], cand: Sequence[float | None],
               confidence: float = CONFIDENCE) -> Difference:
    """The difference of two sets of repeated measurements' means, with a Welch interval
    (the sides ran at different times: unpaired)."""
    a, b = _finite(base), _finite(cand)
    if not len(a) or not len(b):
        return Difference(None, None, None, len(a), len(b))
    value = float(b.mean() - a.mean())
    if len(a) < 2 or len(b) < 2:
        return Difference(value, None, None, len(a), len(b))
    if np.ptp(a) == 0 and np.ptp(b) == 0:
        return Difference(value, value, value, len(a), len(b))
    ci = stats.ttest_ind(b, a, equal_var=False).confidence_interval(confidence)
    return Difference(value, float(ci.low), float(ci.high), len(a), len(b))
