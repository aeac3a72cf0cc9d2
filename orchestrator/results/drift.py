"""Comparability warnings: when the numbers of a session may not mean what they seem to.

A fixed cooldown does not reliably reach a thermal baseline, so over a long matrix tok/s can
start to track run order rather than the config under test (the phone study's own words).
These checks look at the stored runs of a session, per device, and say so.
"""
from __future__ import annotations

import itertools
import random
from dataclasses import dataclass
from typing import Any, Sequence

import pandas as pd

from orchestrator.db.store import Store
from orchestrator.results.query import runs_stats


@dataclass(frozen=True)
class Thresholds:
    start_temp_c: float = 5.0        # start temperatures of compared cells may differ this much
    free_ram_frac: float = 0.25      # (max - min) / max of free RAM at cell start
    rank_rho: float = 0.6            # |Spearman rho| of tok/s against run order ...
    rank_p: float = 0.05             # ... and its permutation p-value


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rank correlation (average ranks for ties)."""
    rx = pd.Series(list(x)).rank()
    ry = pd.Series(list(y)).rank()
    value = rx.corr(ry)
    return 0.0 if value != value else float(value)


def permutation_p(x: Sequence[float], y: Sequence[float], rho: float, rounds: int = 2000) -> float:
    """Two-sided p-value of rho by permuting y: exact for n <= 7, else `rounds` shuffles with a
    fixed seed, so the same data always gets the same verdict."""
    ys = list(y)
    if len(ys) <= 7:
        perms = list(itertools.permutations(ys))
    else:
        rng = random.Random(0)
        perms = []
        for _ in range(rounds):
            rng.shuffle(ys)
            perms.append(tuple(ys))
    hits = sum(1 for p in perms if abs(spearman(x, p)) >= abs(rho) - 1e-12)
    return hits / len(perms)


def order_drift(runs: pd.DataFrame, t: Thresholds = Thresholds()) -> str | None:
    """tok/s against run order, with each run's mean divided by its config's mean so that
    several configs pool into one test. Needs a config that ran at least twice."""
    counts = runs.groupby("config")["mean"].transform("count")
    pooled = runs[counts >= 2]
    if len(pooled) < 4:
        return None
    norm = pooled["mean"] / pooled.groupby("config")["mean"].transform("mean")
    rho = spearman(pooled["order_index"], norm)
    if abs(rho) < t.rank_rho:
        return None
    p = permutation_p(list(pooled["order_index"]), list(norm), rho)
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
                    f"({free['free_kb'].min() / 1048576:.2f}-{free['free_kb'].max() / 1048576:.2f} GB): "
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
