"""Whether a run's per-token rate had settled: a trend test on what the steady state keeps.

MSER-5 (statistics._steady_state) finds where the warm-up ends by minimising the standard
error of what remains; it does not ask whether what remains is flat. A run that keeps getting
faster (an expert cache still filling, reclaim easing off) can get a truncation point early
on and a "steady-state mean" that no stretch of the run actually ran at: the desktop round's
"steady from token 6, 4.86 tok/s" climbed from 4.14 to 6.32 tok/s between its first and last
quarter. So the tokens the steady state keeps are tested for a trend:

- Spearman's rank correlation of the per-token rate (1000 / wall_ms) with the token's
  position, which assumes no shape of the trend (over stretches of consecutive tokens for a
  run of more than COARSE_ABOVE tokens), and
- the change of the rate (n / Σ decode s) from the first quarter to the last.

A trend that is significant (p < TREND_P) *and* large (|change| > TREND_PCT) means the run
had not settled: no steady-state mean is claimed. Either alone is not enough: over a
thousand tokens a 2% drift is significant, and a short noisy run can change 15% by chance.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

SETTLE_MIN_TOKENS = 40   # fewer (after the trim): quarters of under 10 tokens, too few to tell
TREND_P = 0.05
TREND_PCT = 10.0
TOO_SHORT = "too short to tell"


@dataclass(frozen=True)
class Settling:
    settled: bool | None         # None: too short to tell
    trend_pct: float             # first → last quarter change of the rate, % (NaN: not tested)
    trend_p: float               # Spearman's p-value (NaN: not tested or no variation)
    note: str                    # "" when settled, else what the tables show instead

    @classmethod
    def too_short(cls) -> Settling:
        return cls(None, float("nan"), float("nan"), TOO_SHORT)


# A longer run is tested over the rates of consecutive stretches of its tokens, at most
# COARSE_POINTS of them (as its within-run interval is bootstrapped, stats/within_run.py):
# ranking millions of per-token rates cost a second per run, and a trend is a trend of the
# stretches as much as of the tokens
COARSE_ABOVE = 8192
COARSE_POINTS = 2048


def _rates(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(position, tok/s) of each token with a decode time (speculative groups' followers,
    wall 0, have no rate of their own), or for a long run of each stretch of `size` tokens:
    its n / Σ decode s (the last stretch of fewer tokens left out)."""
    if len(w) <= COARSE_ABOVE:
        pos = w > 0
        return np.flatnonzero(pos), 1000.0 / w[pos]
    size = -(-len(w) // COARSE_POINTS)
    sums = w[:len(w) // size * size].reshape(-1, size).sum(axis=1)
    kept = sums > 0
    return np.flatnonzero(kept), size * 1000.0 / sums[kept]


def settling(wall_ms: np.ndarray, tested_from: int = 0) -> Settling:
    """The trend test on `wall_ms` (a run's tokens after the trim, in token order) from index
    `tested_from` on (where MSER-5 ends the warm-up; 0 when it found no end). Too short to
    tell under SETTLE_MIN_TOKENS tokens after the trim."""
    w = np.asarray(wall_ms, dtype=float)
    w = w[~np.isnan(w)]
    if len(w) < SETTLE_MIN_TOKENS:
        return Settling.too_short()
    w = w[max(int(tested_from), 0):]
    q = len(w) // 4
    first, last = w[:q].sum(), w[-q:].sum()
    if q == 0 or first <= 0 or last <= 0:
        return Settling.too_short()
    # n / Σ s over each quarter: the same quarter lengths, so the rate ratio is the inverse
    # ratio of the quarters' decode time
    trend = (first / last - 1.0) * 100.0
    p = float("nan")
    at, rate = _rates(w)
    if len(rate) and np.ptp(rate) > 0:
        p = float(sps.spearmanr(at, rate).pvalue)
    moving = not np.isnan(p) and p < TREND_P and abs(trend) > TREND_PCT
    note = f"not settled ({trend:+.0f}% first → last quarter)" if moving else ""
    return Settling(not moving, float(trend), p, note)
