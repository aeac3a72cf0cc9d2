"""Comparability warnings: when the numbers of a session may not mean what they seem to.

A fixed cooldown does not reliably reach a thermal baseline, so over a long matrix tok/s can
start to track run order rather than the config under test (the phone study's own words).
These checks look at the stored runs of a session, per device, and say so.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy.stats import pearsonr, permutation_test, rankdata, spearmanr

from orchestrator.db.store import Store
from orchestrator.record import KIB_PER_GIB
from orchestrator.results.query import runs_stats


@dataclass(frozen=True)
class Thresholds:
    start_temp_c: float = 5.0        # start temperatures of compared cells may differ this much
    free_ram_frac: float = 0.25      # (max - min) / max of free RAM at cell start
    rank_rho: float = 0.6            # |Spearman rho| of tok/s against run order ...
    rank_p: float = 0.05             # ... and its permutation p-value


def _abs_rho(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
    """|Spearman rho| (Pearson's r of the ranks) along `axis`: vectorised, since
    permutation_test hands in thousands of resamples at once."""
    return np.abs(pearsonr(rankdata(x, axis=axis), rankdata(y, axis=axis), axis=axis).statistic)


def permutation_p(x: list[float], y: list[float], rounds: int = 5040) -> float:
    """Two-sided p-value of rho: the share of orders of y (x fixed) whose |rho| reaches the
    observed one. Every order while n! <= rounds (n <= 7), else `rounds` random ones with a
    fixed seed, so the same data always gets the same verdict."""
    xs = np.asarray(x, float)
    result = permutation_test((np.asarray(y, float),),
                              lambda ys, axis=-1: _abs_rho(xs, ys, axis),
                              permutation_type="pairings", vectorized=True,
                              n_resamples=rounds, alternative="greater", rng=0)
    return float(result.pvalue)


def order_drift(runs: pd.DataFrame, t: Thresholds = Thresholds()) -> str | None:
    """tok/s against run order, with each run's mean divided by its config's mean so that
    several configs pool into one test. Needs a config that ran at least twice."""
    counts = runs.groupby("config")["mean"].transform("count")
    pooled = runs[counts >= 2]
    if len(pooled) < 4:
        return None
    norm = pooled["mean"] / pooled.groupby("config")["mean"].transform("mean")
    if norm.nunique() < 2:          # every run at its config's mean: nothing to rank
        return None
    rho = float(spearmanr(pooled["order_index"], norm).statistic)
    if abs(rho) < t.rank_rho:
        return None
    p = permutation_p(list(pooled["order_index"]), list(norm))
    if p >= t.rank_p:
        return None
    trend = "falls" if rho < 0 else "rises"
    return (f"tok/s {trend} with run order across repeats (Spearman rho {rho:+.2f}, "
            f"p {p:.3f}, {len(pooled)} runs): the device drifted during the matrix, so "
            f"differences may track order rather than config; use a thermal cooldown "
            f"condition or interleaved order")


def session_warnings(store: Store, session_id: int, t: Thresholds = Thresholds()) -> list[str]:
    rows = [r for r in store.runs(session_id) if r.status == "ok"]
    if not rows:
        return []
    stats = runs_stats(store, rows)
    frame = pd.DataFrame([{
        "id": r.id, "device": r.device, "config": r.config, "order_index": r.order_index,
        "mean": stats.loc[r.id, "mean"], "cooldown_met": r.cooldown_met,
        "temp": _start_temp(r.temp_start), "free_kb": r.mem_avail_start_kb,
    } for r in rows])
    warnings: list[str] = []
    for device, runs in frame.groupby("device", sort=False):
        where = f"{device}: " if frame["device"].nunique() > 1 else ""
        temps = runs.dropna(subset=["temp"])
        if len(temps) >= 2 and temps["temp"].max() - temps["temp"].min() > t.start_temp_c:
            hot, cold = temps.loc[temps["temp"].idxmax()], temps.loc[temps["temp"].idxmin()]
            warnings.append(
                f"{where}start temperatures differ by {hot.temp - cold.temp:.1f} °C "
                f"({hot.config} {hot.temp:.1f} °C vs {cold.config} {cold.temp:.1f} °C; "
                f"threshold {t.start_temp_c:g} °C)")
        unmet = runs[runs["cooldown_met"] == False]  # noqa: E712 (None = no condition)
        if len(unmet):
            warnings.append(f"{where}cooldown reached its max before the condition was met "
                            f"for {', '.join(unmet['config'])} (runs {', '.join(map(str, unmet['id']))})")
        free = runs.dropna(subset=["free_kb"])
        if len(free) >= 2 and free["free_kb"].max() > 0:
            spread = (free["free_kb"].max() - free["free_kb"].min()) / free["free_kb"].max()
            if spread > t.free_ram_frac:
                warnings.append(
                    f"{where}free RAM at cell start varies by {spread:.0%} "
                    f"({free['free_kb'].min() / KIB_PER_GIB:.2f}-{free['free_kb'].max() / KIB_PER_GIB:.2f} GiB): "
                    f"cells did not start from the same memory state")
        drift = order_drift(runs.dropna(subset=["mean"]), t)
        if drift:
            warnings.append(where + drift)
    return warnings


def _start_temp(temps: Any) -> float | None:
    """CPU temperature at the start of a run, in °C, from the run's first sample."""
    if not temps:
        return None
    if "cpu_temp_mC" in temps:
        return temps["cpu_temp_mC"] / 1000.0
    zones = [v for k, v in temps.items() if k.endswith("_mC")]
    return max(zones) / 1000.0 if zones else None
