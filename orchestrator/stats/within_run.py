"""Within-run figures of each run: how its tokens vary, a 95% interval of its own tok/s, its
first tokens, and whether it had settled (stats/settle.py).

The interval is of one run's rate (n / Σ decode s) over its tokens, not of a config: a run's
tokens are not independent (a slow token is followed by slow ones while reclaim or a cache
refill lasts), so a plain bootstrap that resamples single tokens understates the spread. The
tokens are resampled in blocks instead: a stationary bootstrap (Politis & Romano 1994) with
its expected block length chosen from the data by Politis & White (2004, with the correction
of Patton, Politis & White 2009), `arch.bootstrap.optimal_block_length`; 95% percentile
interval over RESAMPLES resamples, from a fixed seed, so a run's interval is the same every
time and does not depend on the other runs in the table.

The resampling draws what `arch.bootstrap.StationaryBootstrap` draws (uniform block starts,
geometric block lengths of mean b, circular wrap) but sums whole blocks from a cumulative sum
instead of gathering every token of every resample: the same distribution at a few
milliseconds a run instead of a quarter of a second (tests/test_within_run.py holds the two
to each other).

These intervals describe a run, and must never feed a config-level test: A/B and `orch
compare` test configs on their runs' means (results/ab.py, results/comparison.py).
"""
from __future__ import annotations

import math
from collections.abc import Collection
from typing import Any

import numpy as np
import pandas as pd

RESAMPLES = 2000
SEED = 20260721               # fixed: the same run gives the same interval every time
CI_MIN_TOKENS = 10            # fewer: no interval (blocks of a few tokens of a few tokens)
LEVEL = 0.95
# A longer run is bootstrapped over the means of consecutive tokens, at most COARSE_POINTS of
# them: the resamples' arrays grow with the tokens (2000 x tokens / block), so a 2M-token run
# would need tens of GB. Blocks of that many tokens keep the autocorrelation a block
# bootstrap resamples; shorter runs are bootstrapped token by token, as always.
COARSE_ABOVE = 8192
COARSE_POINTS = 2048

WITHIN_RUN_COLUMNS: tuple[str, ...] = (
    "mean_ms", "median_ms", "cv_pct", "mean_ms_ci_low", "mean_ms_ci_high", "tps_ci_low",
    "tps_ci_high", "ci_method", "first_token_ms", "first5_mean_ms", "settled", "trend_pct",
    "settle_note",
)


def block_length(x: np.ndarray) -> float:
    """The stationary bootstrap's expected block length for x (Politis–White), at least 1
    (a series without autocorrelation: the plain bootstrap) and at most len(x)."""
    from arch.bootstrap import optimal_block_length

    if len(x) < 2 or np.ptp(x) == 0:
        return 1.0
    b = float(optimal_block_length(x)["stationary"].iloc[0])
    return 1.0 if not math.isfinite(b) else min(max(b, 1.0), float(len(x)))


def stationary_means(x: np.ndarray, block: float, reps: int = RESAMPLES,
                     seed: int = SEED) -> np.ndarray:
    """The means of `reps` stationary-bootstrap resamples of x (expected block length
    `block`): each resample is blocks of consecutive tokens (wrapping round the end) from
    uniform starts, of geometric lengths with mean `block`, cut at len(x)."""
    n = len(x)
    rng = np.random.default_rng(seed)
    p = 1.0 / block
    # blocks per resample: 1 + Binomial(n - 1, p) are needed; draw well above that, and
    # draw again for the (essentially never) resamples still short of n
    expected = n * p
    k = math.ceil(expected + 8.0 * math.sqrt(expected + 1.0) + 10)
    lengths = np.minimum(rng.geometric(p, (reps, k)), n)
    starts = rng.integers(0, n, (reps, k))
    ends = np.cumsum(lengths, axis=1)
    short = ends[:, -1] < n
    while short.any():
        more = np.minimum(rng.geometric(p, (int(short.sum()), k)), n)
        lengths = np.concatenate([lengths, np.zeros((reps, k), np.int64)], axis=1)
        starts = np.concatenate([starts, rng.integers(0, n, (reps, k))], axis=1)
        lengths[short, -k:] = more
        ends = np.cumsum(lengths, axis=1)
        short = ends[:, -1] < n
    # the last block is cut where the resample reaches n tokens
    taken = np.clip(n - (ends - lengths), 0, lengths)
    c = np.concatenate([[0.0], np.cumsum(np.concatenate([x, x]))])
    sums = (c[starts + taken] - c[starts]).sum(axis=1)
    return sums / n


NOT_COMPUTED = "not computed (not shown)"
_NO_INTERVAL = {"mean_ms_ci_low": None, "mean_ms_ci_high": None, "tps_ci_low": None,
                "tps_ci_high": None}


def _interval(w: np.ndarray) -> dict[str, object]:
    """The 95% intervals of mean ms/token and of tok/s of one run's tokens."""
    none = {"mean_ms_ci_low": None, "mean_ms_ci_high": None, "tps_ci_low": None,
            "tps_ci_high": None}
    if len(w) < CI_MIN_TOKENS:
        return {**none, "ci_method": f"no interval: {len(w)} token(s), under {CI_MIN_TOKENS}"}
    if w.sum() <= 0:
        return {**none, "ci_method": "no interval: no decode time"}
    size, note = 1, ""
    if len(w) > COARSE_ABOVE:      # means of `size` tokens; the last < size tokens left out
        size = -(-len(w) // COARSE_POINTS)
        groups = len(w) // size
        w = w[:groups * size].reshape(groups, size).mean(axis=1)
        note = f", over means of {size} consecutive tokens"
    b = block_length(w)
    means = stationary_means(w, b)
    tail = (1 - LEVEL) / 2 * 100
    lo, hi = np.percentile(means, [tail, 100 - tail])
    with np.errstate(divide="ignore"):
        tps_lo, tps_hi = np.percentile(1000.0 / means, [tail, 100 - tail])
    return {"mean_ms_ci_low": float(lo), "mean_ms_ci_high": float(hi),
            "tps_ci_low": float(tps_lo), "tps_ci_high": float(tps_hi),
            "ci_method": f"stationary block bootstrap, block {b:.0f} (Politis–White), "
                         f"{RESAMPLES} resamples{note}"}


def run_figures(wall_ms: np.ndarray, trim: int = 0, steady_from: float | None = None,
                interval: bool = True) -> dict[str, object]:
    """The within-run figures of one run from its wall_ms in token order (all its tokens):
    first_token_ms and first5_mean_ms from the first tokens whatever the trim, the rest over
    the tokens after the first `trim`. `steady_from`: MSER-5's first steady token (1-based,
    counted over all tokens; None/NaN when it found none), where the trend test starts.
    interval=False: no bootstrap (the interval columns None, ci_method NOT_COMPUTED), for a
    view that shows none of this run's intervals; every other figure is the same."""
    from orchestrator.stats.settle import settling   # scipy: only where a run is tested

    w_all = np.asarray(wall_ms, dtype=float)
    w_all = w_all[~np.isnan(w_all)]
    w = w_all[trim:]
    n = len(w)
    total = float(w.sum()) if n else 0.0
    pos = w[w > 0]
    mean = total / n if n and total > 0 else None
    out: dict[str, object] = {
        "mean_ms": mean,
        "median_ms": float(np.median(pos)) if len(pos) else None,
        # sample stdev (n - 1) of ms/token over its mean
        "cv_pct": float(w.std(ddof=1) / mean * 100) if mean and n > 1 else None,
        **(_interval(w) if interval else {**_NO_INTERVAL, "ci_method": NOT_COMPUTED}),
        "first_token_ms": float(w_all[0]) if len(w_all) else None,
        "first5_mean_ms": float(w_all[:5].mean()) if len(w_all) >= 5 else None,
    }
    cut = 0
    if steady_from is not None and not (isinstance(steady_from, float) and math.isnan(steady_from)):
        cut = max(int(steady_from) - 1 - trim, 0)
    s = settling(w, cut)
    out.update(settled=s.settled, trend_pct=None if math.isnan(s.trend_pct) else s.trend_pct,
               settle_note=s.note or None)
    return out


def within_run_table(tokens: pd.DataFrame, trim: int = 0,
                     steady_from: pd.Series | None = None,
                     intervals: Collection[Any] | None = None) -> pd.DataFrame:
    """WITHIN_RUN_COLUMNS per run_id of `tokens` (run_id, wall_ms; each run's rows in token
    order, `seq` when present), for runs_table. `steady_from`: run_id -> MSER-5's first steady
    token, counted over all tokens. `intervals`: the runs whose bootstrap intervals are
    wanted (None: every run); the others get none (run_figures' interval=False)."""
    steady = steady_from.to_dict() if steady_from is not None else {}
    rows = {}
    for rid, group in tokens.groupby("run_id", sort=False):
        if "seq" in group and not group["seq"].is_monotonic_increasing:
            group = group.sort_values("seq", kind="stable")
        rows[rid] = run_figures(group["wall_ms"].to_numpy(dtype=float, na_value=np.nan), trim,
                                steady.get(rid), interval=intervals is None or rid in intervals)
    frame = pd.DataFrame.from_dict(rows, orient="index", columns=list(WITHIN_RUN_COLUMNS))
    frame.index.name = "run_id"
    return frame


def with_within_run(stats: pd.DataFrame, tokens: pd.DataFrame, trim: int = 0,
                    intervals: Collection[Any] | None = None) -> pd.DataFrame:
    """runs_table's frame with WITHIN_RUN_COLUMNS added, and no steady state claimed for a run
    that had not settled (steady_mean and steady_from_token NaN, settle_note says why).
    `intervals`: the runs to bootstrap (None: all; within_run_table)."""
    extra = within_run_table(tokens, trim, stats["steady_from_token"],
                             intervals).reindex(stats.index)
    out = stats.copy()
    unsettled = (extra["settled"] == False).to_numpy()      # an object column: None too
    out.loc[unsettled, ["steady_mean", "steady_from_token"]] = np.nan
    return pd.concat([out, extra[list(WITHIN_RUN_COLUMNS)]], axis=1)
