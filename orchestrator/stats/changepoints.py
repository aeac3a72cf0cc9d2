"""Steps in a benchmark history: where a series of per-session figures moved to a new level.

Method: ruptures' PELT with the l2 cost (a piecewise-constant fit) on the logarithms of the
figures, so a 15% slow-down is the same step whether the config runs at 5 or 500 tok/s. The
penalty per change point is PENALTY * sigma^2 * log(n) (a BIC-like penalty, stricter than
BIC's 2 to keep false alarms rare on short histories), where sigma is the noise of one point
on the log scale, estimated robustly from the series itself (the MAD of successive
differences, which one step barely moves) and never below the points' own within-session
spread nor MIN_NOISE. Each step PELT proposes is then confirmed with Welch's test on the logs
of the two segments it separates (uncertainty.compare) and kept only when p < alpha and the
step is at least min_delta_pct: PELT says where, the test says whether it is beyond the noise.

Why not asv's method: asv's step detection (an L1 piecewise-constant fit with its own penalty
heuristic) lives inside asv and is not a library; PELT with l2 is the same family of penalised
fits, exact, linear time, and ruptures is a maintained package. The l2 cost is less robust to
one wild outlier than asv's L1, which the Welch confirmation (a lone outlier is a segment of one
point, shorter than MIN_SIZE) covers.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from orchestrator.stats.uncertainty import ALPHA, compare

PENALTY = 8.0
MIN_SIZE = 2          # points per segment: a single point is an outlier, not a level
MIN_NOISE = 0.002     # 0.2% on the log scale: exact (noise-free) figures still need a floor
MIN_DELTA_PCT = 1.0   # smaller steps are not reported even when significant


@dataclass(frozen=True)
class Step:
    """A change point: `index` is the first point after the step."""

    index: int
    before: float          # geometric mean of the segment before
    after: float           # geometric mean of the segment after
    p_value: float | None

    @property
    def delta_pct(self) -> float:
        return (self.after / self.before - 1.0) * 100.0


def noise(logs: np.ndarray, spreads: Sequence[float | None] = ()) -> float:
    """One point's noise on the log scale: MAD of successive differences / sqrt(2) (robust to
    the steps themselves), at least the median within-point spread and MIN_NOISE."""
    sigma = 0.0
    if len(logs) >= 3:
        d = np.diff(logs)
        mad = float(np.median(np.abs(d - np.median(d))))
        sigma = mad / 0.6745 / math.sqrt(2.0)
    own = [s for s in spreads if s is not None and math.isfinite(s)]
    if own:
        sigma = max(sigma, float(np.median(own)))
    return max(sigma, MIN_NOISE)


def detect(values: Sequence[float], spreads: Sequence[float | None] = (),
           alpha: float = ALPHA, min_delta_pct: float = MIN_DELTA_PCT) -> list[Step]:
    """The confirmed steps of a series (all values > 0, in history order). spreads: each
    point's own standard error on the log scale (None where unknown)."""
    import ruptures

    v = np.asarray(values, dtype=float)
    x = np.log(v)
    n = len(x)
    if n < 2 * MIN_SIZE or not np.all(np.isfinite(x)):
        return []
    sigma = noise(x, spreads)
    algo = ruptures.Pelt(custom_cost=_cumulative_l2(x), min_size=MIN_SIZE,
                         jump=1).fit(x.reshape(-1, 1))
    breaks = [b for b in algo.predict(pen=PENALTY * sigma ** 2 * math.log(n)) if b < n]
    bounds = [0, *breaks, n]
    steps = []
    for k, b in enumerate(breaks):
        seg_a, seg_b = x[bounds[k]:b], x[b:bounds[k + 2]]
        test = compare(v[bounds[k]:b].tolist(), v[b:bounds[k + 2]].tolist())   # the figures as measured
        before, after = float(np.exp(seg_a.mean())), float(np.exp(seg_b.mean()))
        step = Step(b, before, after, test.p_value)
        if test.p_value is not None and test.p_value < alpha \
                and abs(step.delta_pct) >= min_delta_pct:
            steps.append(step)
    return steps


def _cumulative_l2(x: np.ndarray) -> Any:
    """ruptures' l2 cost (a segment's squared deviations from its mean) from running sums, in
    constant time per segment: ruptures' own CostL2 takes a numpy variance of every segment
    PELT tries, O(n^2) small array calls on a 500-point history (seconds per series). The
    values are centred first, so the sums stay small and the difference of sums exact to
    rounding."""
    import ruptures.base

    centred = (x - x.mean()).tolist()
    s1, s2 = [0.0], [0.0]
    for v in centred:
        s1.append(s1[-1] + v)
        s2.append(s2[-1] + v * v)

    class CumulativeL2(ruptures.base.BaseCost):
        model = "l2"
        min_size = 1

        def fit(self, signal: np.ndarray) -> CumulativeL2:
            self.signal = signal                    # Pelt reads its length
            return self

        def error(self, start: int, end: int) -> float:
            total = s1[end] - s1[start]
            return max(0.0, (s2[end] - s2[start]) - total * total / (end - start))

    return CumulativeL2()
