"""Comparability warnings: when the numbers of a session may not mean what they seem to.

A fixed cooldown does not reliably reach a thermal baseline, so over a long matrix tok/s can
start to track run order rather than the config under test (the phone study's own words).
These checks look at the ok runs of each (device, model) group — the unit a report's tables
compare — and return structured `Caveat`s: which runs and configs, what was seen, and advice
that fits how the matrix was run (interleaving is not advised to a matrix that interleaved).
Imported sessions are checked too: the importer stores their start temperatures and free RAM
from the `.metrics` sidecars.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy.stats import pearsonr, permutation_test, rankdata, spearmanr

from orchestrator.config.stored_matrix import stored_matrix_data
from orchestrator.db.rows import RunRow
from orchestrator.db.runs import Runs, Sessions
from orchestrator.db.store import Store
from orchestrator.record import KIB_PER_GIB, load_record
from orchestrator.run.validity import RunValidity, ghz
from orchestrator.stats.config_key import without_model_keys
from orchestrator.stats.status import Status


@dataclass(frozen=True)
class Thresholds:
    start_temp_c: float = 5.0        # start temperatures of compared cells may differ this much
    free_ram_frac: float = 0.25      # (max - min) / max of free RAM at cell start
    rank_rho: float = 0.6            # |Spearman rho| of tok/s against run order ...
    rank_p: float = 0.05             # ... and its permutation p-value


@dataclass(frozen=True)
class Caveat:
    """One warning about a group of runs: what was seen and what to do about it."""

    kind: str    # drift | start_temp | cooldown_max | load | throttling | free_ram | confound
    device: str
    model: str                       # "-" for runs without a model
    configs: tuple[str, ...]
    run_ids: tuple[int, ...]
    message: str
    advice: str

    def __str__(self) -> str:
        where = self.device if self.model == "-" else f"{self.model} on {self.device}"
        runs = ", ".join(map(str, self.run_ids))
        return f"{where}: {self.message}; {self.advice} (runs {runs})"


@dataclass(frozen=True)
class HowRun:
    """What the matrix did about fairness, for advice that fits it."""

    interleaved: bool = False        # interleaved or shuffled order, or A/B pairs
    thermal: bool = False            # a thermal cooldown condition (`until:`)
    imported: bool = False           # read from files: no matrix of orch's

    @classmethod
    def of(cls, matrix: Mapping[str, Any] | None) -> HowRun:
        if not matrix:
            return cls(imported=True)
        cooldown = matrix.get("cooldown")
        return cls(interleaved=matrix.get("order") in ("interleaved", "shuffled")
                   or bool(matrix.get("pairs")),
                   thermal=isinstance(cooldown, Mapping) and bool(cooldown.get("until")))


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


def drift_advice(how: HowRun) -> str:
    if how.interleaved:
        fix = ("raise the thermal cooldown's `max` or lower its `until`" if how.thermal else
               "wait for a thermal condition between cells (`cooldown: {until: baseline+2C}`)")
        return (f"the order was already interleaved, so every config saw the drift about "
                f"equally but each run's spread grew; {fix}, or add repeats")
    if how.thermal:
        return ("use `order: interleaved` so each config sees the drift equally, or raise the "
                "thermal cooldown's `max`")
    return ("use `order: interleaved` so each config sees the drift equally, or a thermal "
            "cooldown condition (`cooldown: {until: baseline+2C}`)")


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
            f"differences may track order rather than config")


def _start_temp(temps: Any) -> float | None:
    """CPU temperature at the start of a run, in °C (the cooldown's last reading or the
    run's first sample; for imports the sidecar's cpu_temp_before_mC)."""
    if not temps:
        return None
    if "cpu_temp_mC" in temps:
        return temps["cpu_temp_mC"] / 1000.0
    zones = [v for k, v in temps.items() if k.endswith("_mC") and v is not None]
    return max(zones) / 1000.0 if zones else None


def _frame(rows: Iterable[RunRow], means: Mapping[int, Any]) -> pd.DataFrame:
    return pd.DataFrame([{
        "id": r.id, "device": r.device, "model": r.model or "-", "config": r.config,
        "session_id": r.session_id, "order_index": r.order_index,
        "mean": means.get(r.id), "cooldown_met": r.cooldown_met,
        "temp": _start_temp(r.temp_start), "free_kb": r.mem_avail_start_kb,
        "validity": RunValidity.from_stored(load_record(r.summary).validity),
    } for r in rows if r.status == Status.OK],
        columns=["id", "device", "model", "config", "session_id", "order_index", "mean",
                 "cooldown_met", "temp", "free_kb", "validity"]).astype({"mean": float})


def _group(runs: pd.DataFrame, how: HowRun, t: Thresholds) -> list[Caveat]:
    device, model = runs["device"].iloc[0], runs["model"].iloc[0]

    def caveat(kind: str, part: pd.DataFrame, message: str, advice: str) -> Caveat:
        return Caveat(kind, device, model, tuple(dict.fromkeys(part["config"])),
                      tuple(int(i) for i in part["id"]), message, advice)

    out: list[Caveat] = []
    temps = runs.dropna(subset=["temp"])
    if len(temps) >= 2 and temps["temp"].max() - temps["temp"].min() > t.start_temp_c:
        hot, cold = temps.loc[temps["temp"].idxmax()], temps.loc[temps["temp"].idxmin()]
        advice = ("the cooldown condition let cells start at different temperatures: lower "
                  "its `until` or raise its `max`" if how.thermal else
                  "start every cell from the same temperature: a thermal cooldown "
                  "(`cooldown: {until: baseline+2C}`) instead of a fixed wait")
        out.append(caveat("start_temp", temps,
                          f"start temperatures differ by {hot.temp - cold.temp:.1f} °C "
                          f"({hot.config} {hot.temp:.1f} °C vs {cold.config} {cold.temp:.1f} °C; "
                          f"threshold {t.start_temp_c:g} °C)", advice))
    unmet = runs[runs["cooldown_met"].eq(False)]   # None: no condition
    if len(unmet):
        out.append(caveat("cooldown_max", unmet,
                          "cooldown reached its max before the condition was met, so these "
                          "cells started warmer than the others",
                          "raise the cooldown's `max` or relax its `until`"))
    free = runs.dropna(subset=["free_kb"])
    if len(free) >= 2 and free["free_kb"].max() > 0:
        spread = (free["free_kb"].max() - free["free_kb"].min()) / free["free_kb"].max()
        if spread > t.free_ram_frac:
            out.append(caveat(
                "free_ram", free,
                f"free RAM at cell start varies by {spread:.0%} "
                f"({free['free_kb'].min() / KIB_PER_GIB:.2f}–{free['free_kb'].max() / KIB_PER_GIB:.2f} GiB): "
                f"cells did not start from the same memory state",
                "close other apps and services before the matrix, and give the previous "
                "engine's memory time to return (a longer cooldown)"))
    drift = order_drift(runs.dropna(subset=["mean"]), t)
    if drift:
        out.append(caveat("drift", runs, drift, drift_advice(how)))
    valid = runs[runs["validity"].notna()]
    loaded = valid[[v.overloaded for v in valid["validity"]]]
    if len(loaded):
        worst = max(loaded["validity"], key=lambda v: v.load1_median)
        out.append(caveat(
            "load", loaded,
            f"load average beyond the engine's own threads while the engine ran (up to a "
            f"median {worst.load1_median:.2f} on {worst.cores} cores with "
            f"{worst.threads_median or 0:g} engine threads): something else was using the CPU",
            "re-run these cells with the device otherwise idle"))
    hot = valid[[v.throttled for v in valid["validity"]]]
    if len(hot):
        worst = min(hot["validity"], key=lambda v: v.cpu_khz_median)
        out.append(caveat(
            "throttling", hot,
            f"CPU frequency fell well below its maximum while the engine ran (median "
            f"{ghz(worst.cpu_khz_median)} of {ghz(worst.max_khz)}): the CPU was throttled",
            "let the device cool between cells (a thermal cooldown condition) and check "
            "the governor and power-saving mode in the device facts"))
    return out


def caveats(rows: Iterable[RunRow], means: Mapping[int, Any],
            matrices: Mapping[int, Mapping[str, Any]], t: Thresholds = Thresholds()) -> list[Caveat]:
    """Every warning about these runs (run rows joined with their device name), per (device,
    model) group in first-seen order. `means` maps run id -> mean tok/s; `matrices` maps
    session id -> the parsed matrix YAML ({} for an imported session)."""
    rows = list(rows)
    frame = _frame(rows, means)
    out: list[Caveat] = []
    for _, runs in frame.groupby(["device", "model"], sort=False):
        sessions = list(dict.fromkeys(runs["session_id"]))
        how = HowRun.of(matrices.get(sessions[0]) if len(sessions) == 1 else None)
        out += _group(runs, how, t)
    return out + confounds(rows)


def confounds(rows: Iterable[RunRow]) -> list[Caveat]:
    """A config whose runs disagree on a setting (the engine's resolved settings, and the
    cache budget it chose): its rows average over two setups, and a reader must see which.
    Its own name's setting cannot disagree (the runs were grouped by it)."""
    groups: dict[tuple[str, str, str], list[RunRow]] = {}
    for r in rows:
        if r.status == Status.OK:
            groups.setdefault((r.device, r.model or "-", r.config or ""), []).append(r)
    # (load_record, not RunRow.record: callers pass row-likes with a summary)
    out = []
    for (device, model, config), runs in groups.items():
        if len(runs) < 2:
            continue
        seen = []
        for r in runs:
            record = load_record(r.summary)
            # the settings that say how it ran, not which model file (config_key.py)
            got = {k: str(v) for k, v in without_model_keys(record.settings).items()}
            if record.cache_budget_mib is not None:
                got["cache budget"] = f"{record.cache_budget_mib:.0f} MiB"
            seen.append(got)
        keys = list(dict.fromkeys(k for got in seen for k in got))
        values = {k: [got.get(k, "not given") for got in seen] for k in keys}
        differ = {k: list(dict.fromkeys(vs)) for k, vs in values.items() if len(set(vs)) > 1}
        differ.update(_sittings_differ(runs))
        if differ:
            what = "; ".join(f"{k} {' vs '.join(vs)}" for k, vs in differ.items())
            out.append(Caveat("confound", device, model, (config,),
                              tuple(r.id for r in runs),
                              f"the runs of {config} were not all set up alike ({what}): "
                              f"its figures average over them",
                              "split the config by that setting (a design file's `configs`, "
                              "docs/import.md) or re-run it with one setting"))
    return out


def _sittings_differ(runs: list[RunRow]) -> dict[str, list[str]]:
    """What says a config's runs were not one sitting (ingest/grouping.py same_sitting): their
    generated tokens more than a factor 2 apart, their recorded starts on different days. A
    design may name such runs one config; the rows then say so."""
    out: dict[str, list[str]] = {}
    counts = [n for n in (load_record(r.summary).tokens for r in runs) if n]
    if counts and max(counts) > 2 * min(counts):
        out["tokens generated"] = [str(n) for n in dict.fromkeys(counts)]
    days = [f"{started:%Y-%m-%d}" for r in runs
            if (started := getattr(r, "started_at", None)) is not None
            and getattr(r, "clock", None) == "local"]
    if len(set(days)) > 1:
        out["day"] = list(dict.fromkeys(days))
    return out


def session_warnings(store: Store, session_id: int, t: Thresholds = Thresholds()) -> list[Caveat]:
    rows = [r for r in Runs(store).current(session_id) if r.status == Status.OK]
    if not rows:
        return []
    figures = Runs(store).figures(rows)
    session = Sessions(store).one(session_id)
    return caveats(rows, {rid: f.mean for rid, f in figures.items()}, {session_id: stored_matrix_data(session.matrix_text)}, t)
