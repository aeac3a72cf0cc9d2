"""How much a probe sample says: Wilson score intervals for an accuracy, and the largest
accuracy drop against the baseline that the sample can rule out.

Both by formula (no statsmodels): the Wilson interval is (p + z²/2n ± z·sqrt(p(1-p)/n +
z²/4n²)) / (1 + z²/n). The drop bound pairs the two configs question by question (they
answered the same questions, so their errors are correlated), with Newcombe's hybrid score
interval for a paired difference (Newcombe 1998, Stat Med 17:2635, method 10, without
continuity correction): it stays inside [-1, 1] and behaves at 0 and n, where a Wald interval
on a 15-question sample does not.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from scipy.stats import norm

Z95 = float(norm.ppf(0.975))          # two-sided 95%
Z95_ONE_SIDED = float(norm.ppf(0.95))  # one-sided 95% (a two-sided 90% interval's ends)


def wilson(correct: int, total: int, z: float = Z95) -> tuple[float, float] | None:
    """(low, high) proportions of the Wilson score interval; None when total is 0."""
    if total <= 0:
        return None
    if not 0 <= correct <= total:
        raise ValueError(f"{correct} correct of {total}")
    p = correct / total
    z2 = z * z
    centre = p + z2 / (2 * total)
    half = z * math.sqrt(p * (1 - p) / total + z2 / (4 * total * total))
    scale = 1 + z2 / total
    return max(0.0, (centre - half) / scale), min(1.0, (centre + half) / scale)


@dataclass(frozen=True)
class DropBound:
    """Baseline accuracy minus a config's, on the questions both answered."""

    n: int                 # questions both answered
    drop: float            # observed: baseline accuracy - config accuracy (proportion)
    upper: float           # one-sided 95% upper bound of the drop: a larger one is ruled out


def paired_drop_bound(baseline: Sequence[bool], config: Sequence[bool],
                      z: float = Z95_ONE_SIDED) -> DropBound | None:
    """One-sided upper confidence bound on p_baseline - p_config for paired outcomes (same
    questions, same order). None when there are no pairs."""
    n = len(baseline)
    if n != len(config):
        raise ValueError("paired outcomes need the same questions on both sides")
    if n == 0:
        return None
    both = sum(1 for b, c in zip(baseline, config) if b and c)
    only_base = sum(1 for b, c in zip(baseline, config) if b and not c)
    only_conf = sum(1 for b, c in zip(baseline, config) if c and not b)
    neither = n - both - only_base - only_conf
    p1 = (both + only_base) / n          # baseline
    p2 = (both + only_conf) / n          # config
    _, u1 = wilson(both + only_base, n, z)   # type: ignore[misc]  # n > 0: wilson gives a pair
    l2, _ = wilson(both + only_conf, n, z)   # type: ignore[misc]  # n > 0: wilson gives a pair
    denom = ((both + only_base) * (only_conf + neither) * (both + only_conf)
             * (only_base + neither))
    phi = (both * neither - only_base * only_conf) / math.sqrt(denom) if denom > 0 else 0.0
    du1, dl2 = u1 - p1, p2 - l2
    spread = du1 * du1 - 2 * phi * du1 * dl2 + dl2 * dl2
    upper = (p1 - p2) + math.sqrt(max(0.0, spread))
    return DropBound(n=n, drop=p1 - p2, upper=min(1.0, upper))
