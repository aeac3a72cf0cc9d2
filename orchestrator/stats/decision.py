"""Time to a decision (`repeat: {until: decided}`): which configs differ from their baseline,
and by how much, judged after every round with error rates that hold under repeated looks.

The design (docs/decision.md says why):
- Each comparison is paired by round: d = log(config) - log(baseline) of the two runs of one
  round (the baseline runs in every round its comparisons need), so the device's drift
  cancels and a ratio is symmetric.
- Group-sequential, Pocock's constant boundary: a look after every round from `first` to
  `max` pairs, each at the same nominal level, chosen so that the chance of ever crossing it
  under no difference is alpha over all the looks (the constant is computed for these looks'
  information levels, n = first..max, by a seeded simulation of the Brownian-motion
  z-statistics). The nominal level is applied with Student's t at each look's degrees of
  freedom (the usual repeated-confidence-interval form when the variance is estimated).
- Holm across the matrix's comparisons, sequentially rejective (Maurer & Bretz 2013): at a
  look, each undecided comparison is tested at alpha / (comparisons not yet found to differ);
  a comparison found to differ stays so ("sticky") and passes its share on, at that look too.
- Equivalence by TOST: a comparison is equivalent once its repeated interval at two-sided
  level 2·alpha (each one-sided test at alpha, the same Pocock correction) lies within
  ±`equivalence` %; it stays so.
- An outlier run is set aside: at each look, the run whose externally studentized residual
  is largest is tested against Student's t (df - 1), Bonferroni over the look's runs, at
  OUTLIER_LEVEL; one that fails is left out of that look and every later one (only a run
  with two others of its series is tested; at most one run per series). Under normal
  run-to-run noise this happens in at most OUTLIER_LEVEL x looks of sessions, which bounds
  what it can add to the error rates; a run slowed by a background task (10 sd away) is
  set aside within a round or two instead of widening every comparison of its block until
  `max`.
Pure: the callers hand in the measured values; the store stays the truth (the decisions are
replayed from the stored runs on every call, so --resume recomputes the same ones).
"""
from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np
from scipy import stats

ALPHA = 0.05
OUTLIER_LEVEL = 0.001     # per look, Bonferroni over its runs (docs/decision.md)
DIFFERS, EQUIVALENT, UNDECIDED = "differs", "equivalent", "undecided"
BASELINE = "baseline"      # the baseline's series, in Decision.aside
_PATHS = 200_000          # simulated paths for Pocock's constant (its error: ~0.01 on c)


@dataclass(frozen=True)
class Rule:
    """The stopping rule: looks after `first`..`max` paired rounds; `equivalence` in %."""

    max: int = 10
    equivalence: float = 2.0
    first: int = 2
    alpha: float = ALPHA

    def __post_init__(self) -> None:
        if not 2 <= self.first <= self.max:
            raise ValueError(f"looks from {self.first} to {self.max} pairs: need 2 <= first "
                             f"<= max")


@dataclass(frozen=True)
class Decision:
    """One config against its baseline after the rounds given."""

    config: str
    state: str                     # differs | equivalent | undecided
    n: int                         # pairs used (for a decided one: at the look it was decided)
    delta_pct: float | None        # ratio of geometric means - 1, in %
    low_pct: float | None          # the repeated interval the decision rests on, in %
    high_pct: float | None
    why: str
    # runs of the block set aside as outliers by the end: (series, round, residual in %),
    # series = the config's name or BASELINE
    aside: tuple[tuple[str, int, float], ...] = ()

    @property
    def decided(self) -> bool:
        return self.state != UNDECIDED

    @property
    def half_pct(self) -> float | None:
        if self.low_pct is None or self.high_pct is None:
            return None
        return (self.high_pct - self.low_pct) / 2.0

    def shown(self, next_round: int, rule: Rule) -> str:
        """The progress line's words for this config."""
        if not self.decided:
            return f"running round {next_round} of ≤ {rule.max}"
        half = self.half_pct
        word = "differs" if self.state == DIFFERS else "equivalent"
        figure = "" if self.delta_pct is None else f" {self.delta_pct:+.1f}%"
        return f"decided ({word}):{figure}" + ("" if half is None else f" (±{half:.1f}%)")


@lru_cache(maxsize=256)
def pocock(alpha: float, first: int, last: int) -> float:
    """Pocock's constant c: P(max over looks n = first..last of |Z_n| >= c) = alpha for the
    z-statistics of a Brownian motion observed at information n (corr sqrt(n_i / n_j))."""
    looks = np.arange(first, last + 1, dtype=float)
    rng = np.random.default_rng(20261205)     # seeded: the same boundary every time
    steps = np.diff(np.concatenate([[0.0], looks]))
    paths = np.cumsum(rng.standard_normal((_PATHS, len(looks))) * np.sqrt(steps), axis=1)
    biggest = np.max(np.abs(paths) / np.sqrt(looks), axis=1)
    return float(np.quantile(biggest, 1.0 - alpha))


def nominal(alpha: float, rule: Rule) -> float:
    """The two-sided nominal level every look is tested at, for overall level alpha."""
    return float(2.0 * stats.norm.sf(pocock(alpha, rule.first, rule.max)))


@dataclass(frozen=True)
class Block:
    """One baseline and the configs compared with it (one model's), each as round -> value
    (a positive figure such as tok/s; a round where a run failed is simply absent)."""

    baseline: Mapping[int, float]
    configs: Mapping[str, Mapping[int, float]]

    @staticmethod
    def of_pairs(pairs: Mapping[str, Sequence[tuple[float, float]]]) -> "Block":
        """Configs given as (baseline, config) per round, all against one baseline series
        (the first config's baseline values are used)."""
        first = next(iter(pairs.values()), [])
        return Block({k: b for k, (b, _) in enumerate(first)},
                     {c: {k: v for k, (_, v) in enumerate(vs)} for c, vs in pairs.items()})


@dataclass(frozen=True)
class _Look:
    mean: float          # the config's effect on log(value), against the baseline
    se: float
    df: int

    def p_value(self) -> float:
        if self.se == 0.0:
            return 1.0 if self.mean == 0.0 else 0.0
        return float(2.0 * stats.t.sf(abs(self.mean) / self.se, self.df))

    def interval(self, level: float) -> tuple[float, float]:
        """The interval of the effect at two-sided nominal `level`."""
        half = 0.0 if self.se == 0.0 else float(stats.t.isf(level / 2.0, self.df)) * self.se
        return self.mean - half, self.mean + half


Aside = dict[tuple[int, str | None], float]   # (round, config or None: baseline) -> residual


def _fit(block: Block, rounds: int, stopped: Mapping[str, int],
         aside: Aside) -> dict[str, _Look]:
    """The block's rounds before `rounds` (a config stopped at look j: its rounds before j),
    as log(value) = round effect + config effect (the baseline's is 0), by least squares:
    each config's effect with its standard error from the residual variance pooled over the
    block (a randomized complete block design; with one config, the paired t-test). Runs in
    `aside` are left out; a run this fit finds to be an outlier is added to it (sticky: the
    caller keeps `aside` across looks) and the block refitted without it."""
    while True:
        looks, outlier = _fit_once(block, rounds, stopped, aside)
        if outlier is None:
            return looks
        aside[outlier[0]] = outlier[1]


def _fit_once(block: Block, rounds: int, stopped: Mapping[str, int], aside: Aside
              ) -> tuple[dict[str, _Look], tuple[tuple[int, str | None], float] | None]:
    rows: list[tuple[int, str | None, float]] = [
        (k, None, math.log(v)) for k, v in block.baseline.items() if k < rounds]
    for c, series in block.configs.items():
        end = min(rounds, stopped.get(c, rounds))
        rows += [(k, c, math.log(v)) for k, v in series.items() if k < end]
    rows = [r for r in rows if (r[0], r[1]) not in aside]
    present = sorted({k for k, c, _ in rows if c is not None})
    names = sorted({c for _, c, _ in rows if c is not None})
    rows = [r for r in rows if r[0] in present]   # a round without a config tells nothing
    if not names or not rows:
        return {}, None
    col = {k: i for i, k in enumerate(present)}
    x = np.zeros((len(rows), len(present) + len(names)))
    for i, (k, which, _) in enumerate(rows):
        x[i, col[k]] = 1.0
        if which is not None:
            x[i, len(present) + names.index(which)] = 1.0
    y = np.array([v for _, _, v in rows])
    beta, _, rank, _ = np.linalg.lstsq(x, y, rcond=None)
    df = len(y) - int(rank)
    residual = y - x @ beta
    mse = float(residual @ residual) / df if df > 0 else math.inf
    cov = np.linalg.pinv(x.T @ x)
    # only a run with two others of its series can be told from them: of a config's two
    # runs that disagree, neither is the outlier more than the other, and setting aside the
    # wrong one would leave the outlier as the config's only value
    per_series = Counter(c for _, c, _ in rows)
    told = np.array([per_series[c] >= 3 for _, c, _ in rows])
    outlier = _outlier(x, cov, residual, df, told)
    if outlier is not None and rows[outlier[0]][1] not in {c for _, c in aside}:
        k, which, _ = rows[outlier[0]]
        return {}, ((k, which), _pct(outlier[1]))
    out = {}
    for j, c in enumerate(names):
        var = float(cov[len(present) + j, len(present) + j])
        if df <= 0 or var > 1e6:             # no baseline beside it: not estimable yet
            continue
        out[c] = _Look(float(beta[len(present) + j]), math.sqrt(max(0.0, mse * var)), df)
    return out, None


def _outlier(x: np.ndarray, cov: np.ndarray, residual: np.ndarray, df: int,
             told: np.ndarray) -> tuple[int, float] | None:
    """The fit's one outlier, if any, as (row, its distance on the log scale from what the
    other runs predict): the largest externally studentized residual (each run's residual
    against the fit without it, t with df - 1 under normal noise) among the rows that can be
    `told` from the rest, Bonferroni over the rows, at OUTLIER_LEVEL. The caller sets aside
    at most one run per series: a config noisier than the rest is not trimmed to fit."""
    if df < 2:
        return None
    leverage = np.einsum("ij,jk,ik->i", x, cov, x)
    free = (leverage < 1.0 - 1e-9) & told        # a run alone in its round/config fits exactly
    if not free.any():
        return None
    squared = residual ** 2
    sse = float(squared.sum())
    keep = np.where(free, 1.0 - leverage, 1.0)
    spread = (sse - squared / keep) / (df - 1)
    t = np.where(free & (spread > 0),
                 np.abs(residual) / np.sqrt(np.maximum(spread, 1e-300) * keep), 0.0)
    row = int(np.argmax(t))
    p = 2.0 * float(stats.t.sf(t[row], df - 1)) * int(free.sum())
    if p > OUTLIER_LEVEL:
        return None
    return row, float(residual[row] / keep[row])


def set_aside(state: Mapping[str, Decision]) -> tuple[tuple[str, int, float], ...]:
    """Every run the decisions set aside as an outlier, once each, in order."""
    return tuple(sorted({run for d in state.values() for run in d.aside}))


def _pct(x: float) -> float:
    return (math.exp(x) - 1.0) * 100.0


def decide(blocks: Sequence[Block] | Mapping[str, Sequence[tuple[float, float]]],
           rule: Rule) -> dict[str, Decision]:
    """Each config's decision against its block's baseline, from its values per round. The
    looks are replayed from round `first` on, so a decision never depends on when the
    caller asks (sticky, and --resume gives the same answer). Pairs (config -> (baseline,
    config) per round) stand for one block."""
    if isinstance(blocks, Mapping):
        blocks = [Block.of_pairs(blocks)]
    names = [c for b in blocks for c in b.configs]
    m = len(names)
    decided: dict[str, Decision] = {}
    stopped: dict[str, int] = {}
    differ = 0
    longest = max((k + 1 for b in blocks for s in (b.baseline, *b.configs.values()) for k in s),
                  default=0)
    tost = nominal(min(1.0, 2.0 * rule.alpha), rule)
    margin = math.log1p(rule.equivalence / 100.0)
    asides: list[Aside] = [{} for _ in blocks]
    for n in range(rule.first, min(longest, rule.max) + 1):
        looks: dict[str, _Look] = {}
        for b, aside in zip(blocks, asides):
            looks.update({c: lk for c, lk in _fit(b, n, stopped, aside).items()
                          if c not in decided})
        while differ < m:      # step-down within the look: a rejection frees alpha for the rest
            level = nominal(rule.alpha / (m - differ), rule)
            found = [c for c, lk in looks.items() if c not in decided and lk.p_value() <= level]
            if not found:
                break
            for c in found:
                lk = looks[c]
                low, high = lk.interval(level)
                decided[c] = Decision(c, DIFFERS, n, _pct(lk.mean), _pct(low), _pct(high),
                                      f"differs after {n} rounds: its {1 - level:.4g} "
                                      f"repeated interval excludes 0 (Holm over {m - differ}, "
                                      f"Pocock over looks {rule.first}..{rule.max})")
            differ += len(found)
        for c, lk in looks.items():
            if c in decided:
                continue
            low, high = lk.interval(tost)
            if -margin < low and high < margin:
                decided[c] = Decision(c, EQUIVALENT, n, _pct(lk.mean), _pct(low), _pct(high),
                                      f"equivalent after {n} rounds: its repeated interval "
                                      f"lies within ±{rule.equivalence:g}% (TOST)")
        stopped.update({c: n for c in decided if c not in stopped})
    out: dict[str, Decision] = {}
    last: dict[str, _Look] = {}
    set_aside: dict[str, tuple[tuple[str, int, float], ...]] = {}
    for b, aside in zip(blocks, asides):
        last.update(_fit(b, min(longest, rule.max), stopped, aside))
        runs = tuple((BASELINE if c is None else c, k, r) for (k, c), r in aside.items())
        set_aside.update({c: runs for c in b.configs})
    for c in names:
        if c in decided:
            out[c] = replace(decided[c], aside=set_aside.get(c, ()))
            continue
        final = last.get(c)
        rounds = len([k for b in blocks for k in b.configs.get(c, {}) if k < rule.max])
        if final is None:
            out[c] = Decision(c, UNDECIDED, rounds, None, None, None,
                              f"{rounds} round(s): no interval yet", set_aside.get(c, ()))
            continue
        low, high = final.interval(nominal(rule.alpha / max(1, m - differ), rule))
        ended = rounds >= rule.max
        out[c] = Decision(c, UNDECIDED, rounds, _pct(final.mean), _pct(low), _pct(high),
                          (f"max reached ({rule.max} rounds)" if ended else f"{rounds} rounds")
                          + f": interval {_pct(low):+.1f}%..{_pct(high):+.1f}% neither "
                            f"excludes 0 nor lies within ±{rule.equivalence:g}%",
                          set_aside.get(c, ()))
    return out
