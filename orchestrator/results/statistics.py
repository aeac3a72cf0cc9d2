"""Per-run statistics exactly as bmoe-formats.md §6 (the published tables' method).

Token-level numbers come from the token rows; scalar ones from the engine's `# summary` trailer,
falling back to the stdout summary lines (and then to the token rows) when a run was killed
before writing its trailer. Everything for many runs is computed at once (`runs_table`):
per-run Python work is limited to reading each run's small summary dict.
"""
from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import pandas as pd

KB_PER_GB = 1048576          # the published tables' "GB" is GiB: kB / 1024²
QUANTILE_METHODS = ("linear", "lower")

STAT_COLUMNS: tuple[str, ...] = (
    "n", "mean", "min", "max", "median", "p5", "p95", "prefill_tps", "ttft_s",
    "cache_hit_pct", "read_mib_per_token", "stall_ms_per_token", "compute_s_per_token",
    "io_s_per_token", "streaming", "complete", "cache_budget_mib", "cache_resident_mib",
    "cache_resizes", "spec_read_mib", "spec_read_mib_per_token", "spec_experts", "spec_useful",
    "spec_useful_pct", "spec_recall_pct", "spec_auto_off",
    "peak_rss_gib", "mem_floor_gib", "cpu_temp_start_c", "cpu_temp_max_c", "batt_temp_max_c",
)
PRESSURE_KEYS = ("peak_rss_gib", "mem_floor_gib", "cpu_temp_start_c", "cpu_temp_max_c",
                 "batt_temp_max_c")


def _missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def _div(a: Any, b: Any) -> float | None:
    if _missing(a) or _missing(b) or b == 0:
        return None
    return a / b


# ---- pressure ------------------------------------------------------------------------------

# (stat, `.metrics` key, divisor): units by suffix, kB / milli-°C / deci-°C (§4, §6)
_PRESSURE_SRC = (
    ("peak_rss_gib", "peak_rss_kb", KB_PER_GB),
    ("mem_floor_gib", "mem_avail_floor_kb", KB_PER_GB),
    ("cpu_temp_start_c", "cpu_temp_before_mC", 1000),
    ("cpu_temp_max_c", "cpu_temp_max_mC", 1000),
    ("batt_temp_max_c", "batt_temp_max_dC", 10),
)


def pressure_from_metrics(m: Mapping[str, Any]) -> dict[str, float | None]:
    """A `.metrics` sidecar dict (kB, milli-°C, deci-°C; None = failed read) -> GB and °C."""
    return {key: _div(m.get(raw), scale) for key, raw, scale in _PRESSURE_SRC}


def pressure_from_samples(samples: pd.DataFrame) -> dict[str, float | None]:
    """Agent S samples (t_ms, hwm_kb, rss_kb, mem_avail_kb, cpu_temp_mC, batt_temp_dC).

    The agent omits unreadable keys, so missing values are NaN and skipped. Peak RSS is the max
    VmHWM (the kernel's own high-water mark, which catches peaks between samples); VmRSS only
    when no HWM was readable. "start" is the first sample in time with a reading.
    """
    if samples is None or len(samples) == 0:
        return dict.fromkeys(PRESSURE_KEYS)
    s = samples.sort_values("t_ms", kind="stable") if "t_ms" in samples else samples

    def col(name: str) -> pd.Series:
        return pd.to_numeric(s[name], errors="coerce") if name in s else pd.Series(dtype=float)

    def agg(name: str, how: str, scale: float) -> float | None:
        c = col(name).dropna()
        if c.empty:
            return None
        v = {"max": c.max(), "min": c.min(), "first": c.iloc[0]}[how]
        return float(v) / scale

    peak = agg("hwm_kb", "max", KB_PER_GB)
    if peak is None:
        peak = agg("rss_kb", "max", KB_PER_GB)
    return {
        "peak_rss_gib": peak,
        "mem_floor_gib": agg("mem_avail_kb", "min", KB_PER_GB),
        "cpu_temp_start_c": agg("cpu_temp_mC", "first", 1000),
        "cpu_temp_max_c": agg("cpu_temp_mC", "max", 1000),
        "batt_temp_max_c": agg("batt_temp_dC", "max", 10),
    }


# ---- token-level (vectorised) --------------------------------------------------------------

def _sorted_tps(codes: np.ndarray, n: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """tps = 1000/wall_ms sorted ascending within each run, invalid rows (wall <= 0 or NaN) as
    NaN after the valid ones. `codes` must be grouped (non-decreasing).
    Returns (values, start of each run's block in values)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        tps = np.where(w > 0, 1000.0 / w, np.nan)
    g, total = len(n), len(w)
    starts = np.cumsum(n) - n
    width = int(n.max()) if g else 0
    if g * width <= 4 * total + 4096:
        # one row per run padded with NaN, then one row-wise sort: much cheaper than a sort
        # keyed on (run, value), and the padding stays small unless one run is far longer
        grid = np.full((g, width), np.nan)
        grid[codes, np.arange(total) - starts[codes]] = tps
        grid.sort(axis=1)
        return grid.ravel(), np.arange(g) * width
    by_value = np.argsort(tps)                                    # NaN last
    order = by_value[np.argsort(codes[by_value], kind="stable")]  # regroup, keeping the order
    return tps[order], starts


def _token_stats(tokens: pd.DataFrame, q_method: str) -> pd.DataFrame:
    """Per run_id: n, mean, min, max, median, p5, p95, stall mean, read bytes, last hit pct."""
    if q_method not in QUANTILE_METHODS:
        raise ValueError(f"quantile_method must be one of {QUANTILE_METHODS}")
    codes, uniques = pd.factorize(tokens["run_id"], sort=False)
    g = len(uniques)

    def col(name: str) -> np.ndarray | None:
        return tokens[name].to_numpy(dtype=float, na_value=np.nan) if name in tokens else None

    w, hit = col("wall_ms"), col("cache_hit_pct")
    row_codes = codes                                   # codes in the frame's own row order
    if g and not (np.diff(codes) >= 0).all():
        # rows of runs interleaved: group them once (stable, so each run keeps its row order;
        # small integer keys get numpy's radix sort)
        order = np.argsort(codes.astype(np.uint16) if g < 2**16 else codes, kind="stable")
        codes, w = codes[order], w[order]
        hit = hit[order] if hit is not None else None
    n = np.bincount(codes, minlength=g)
    wall_sum = np.bincount(codes, weights=np.where(np.isnan(w), 0.0, w), minlength=g)
    # tps over rows with wall_ms > 0 (speculative groups put the cost on one row, the rest 0)
    v, start = _sorted_tps(codes, n, w)
    cnt = np.bincount(codes[w > 0], minlength=g)
    has = cnt > 0
    if not len(v):
        v = np.zeros(1)
    base = np.where(has, start, 0)

    def at(offset: np.ndarray) -> np.ndarray:
        return v[np.where(has, base + offset, 0)]

    def quantile(q: float, method: str) -> np.ndarray:
        i = q * np.maximum(cnt - 1, 0)
        lo = np.floor(i).astype(np.int64)
        if method == "lower":
            out = at(lo)
        else:   # §6: i = q*(len-1); v[lo] + (v[hi]-v[lo])*(i-lo)
            a, b = at(lo), at(np.ceil(i).astype(np.int64))
            out = a + (b - a) * (i - lo)
        return np.where(has, out, np.nan)

    with np.errstate(divide="ignore", invalid="ignore"):
        mean = np.where(wall_sum > 0, n / (wall_sum / 1000.0), np.nan)
    out = pd.DataFrame({
        "n": n, "mean": mean,
        "min": np.where(has, at(np.zeros(g, np.int64)), np.nan),
        "max": np.where(has, at(np.maximum(cnt - 1, 0)), np.nan),
        # the median is always the true median (the published tables agree with it even where
        # their p95 was not interpolated, see tests/test_analysis_oracle.py)
        "median": quantile(0.5, "linear"),
        "p5": quantile(0.05, q_method), "p95": quantile(0.95, q_method),
    }, index=pd.Index(uniques, name="run_id"))

    def mean_sum(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        ok = ~np.isnan(x)
        s = np.bincount(row_codes[ok], weights=x[ok], minlength=g)
        k = np.bincount(row_codes[ok], minlength=g)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(k > 0, s / k, np.nan), np.where(k > 0, s, np.nan)

    nan = np.full(g, np.nan)
    stall, rb = col("stall_ms"), col("read_bytes")    # order-free sums: original row order
    out["stall_ms_per_token"] = mean_sum(stall)[0] if stall is not None else nan
    out["_read_bytes"] = mean_sum(rb)[1] if rb is not None else nan
    if hit is not None and g:     # cumulative over the session: the run's last row is the total
        out["_last_hit"] = hit[np.cumsum(n) - 1]
    else:
        out["_last_hit"] = nan
    return out


# ---- scalar (from the summary) -------------------------------------------------------------

# Where a trailer key's value is printed on stdout, for runs whose trailer is missing (killed)
# or older than the key (the 2026-07-12 trailers have no spec_* keys; the .log lines do).
_FROM_LINES: dict[str, tuple[tuple[str, str], ...]] = {
    "prefill": (("prefill_tps", "tok_per_s"), ("load_s", "load_s"), ("prefill_s", "s"),
                ("_ttft_line", "ttft_s")),
    "moe_cache": (("cache_hit_pct", "hit_pct"), ("cache_budget_MiB", "budget_mib"),
                  ("cache_resident_MiB", "resident_mib"), ("cache_resizes", "resizes")),
    "moe_stream": (("read_MiB", "read_mib"), ("compute_s/tok", "compute_s_per_token"),
                   ("io_s/tok", "io_s_per_token")),
    "moe_prefetch": (("spec_read_MiB", "spec_mib"), ("spec_experts", "experts"),
                     ("spec_useful", "useful")),
    "moe_spec_gate": (("spec_recall_pct", "recall_pct"), ("spec_auto_off", "auto_disabled")),
}
_FLAT_KEYS = [k for pairs in _FROM_LINES.values() for k, _ in pairs] + [
    "io_s", "tok/s", "_stream_line", "_moe_stream", "_complete", "_trailer"]


def _parts(summary: Mapping[str, Any] | None) -> tuple[dict, dict, dict, bool | None]:
    """(trailer, lines, settings, complete) from a RunParser summary or a bare trailer dict."""
    if not summary:
        return {}, {}, {}, None
    if "trailer" in summary or "lines" in summary or "settings" in summary:
        tr = summary.get("trailer") or {}
        complete = summary.get("complete")
        return tr, summary.get("lines") or {}, summary.get("settings") or {}, (
            complete if complete is not None else bool(tr))
    return dict(summary), {}, {}, True


def _flat(summary: Mapping[str, Any] | None) -> dict[str, Any]:
    """One flat record per run: trailer keys, filled from the stdout lines where missing."""
    tr, lines, settings, complete = _parts(summary)
    flat: dict[str, Any] = {}
    for kind, sec in lines.items():
        for key, field in _FROM_LINES.get(kind, ()):
            flat[key] = sec.get(field)
    flat.update(tr)      # the trailer has more digits than the stdout lines
    flat["_stream_line"] = "moe_stream" in lines
    flat["_moe_stream"] = settings.get("moe_stream")
    flat["_complete"] = complete
    flat["_trailer"] = bool(tr)
    return flat


def _scalars(flats: list[dict[str, Any]], pressures: list[Any], tok: pd.DataFrame) -> dict:
    """Vectorised over runs: the per-run columns that come from summaries and sidecars."""
    S = pd.DataFrame.from_records(flats, columns=_FLAT_KEYS)
    P = pd.DataFrame.from_records([p or {} for p in pressures],
                                  columns=[c for t in _PRESSURE_SRC for c in t[:2]])

    def num(frame: pd.DataFrame, key: str) -> np.ndarray:
        # a writable copy: pandas 3 (copy-on-write) hands out read-only views
        return np.array(pd.to_numeric(frame[key], errors="coerce"), dtype=float)

    n = tok["n"].to_numpy(dtype=float)
    n = np.where(n == 0, np.nan, n)
    obj = lambda key: S[key].to_numpy(dtype=object)   # noqa: E731
    ttft = num(S, "load_s") + num(S, "prefill_s")
    ttft = np.where(np.isnan(ttft), num(S, "_ttft_line"), ttft)
    hit = num(S, "cache_hit_pct")
    hit = np.where(np.isnan(hit), tok["_last_hit"].to_numpy(dtype=float), hit)
    read = num(S, "read_MiB")
    read = np.where(np.isnan(read), tok["_read_bytes"].to_numpy(dtype=float) / 1048576, read)
    # streaming: the resolved setting, else a moe-stream line, else the trailer's reads, else
    # the rows' read_bytes; plain mmap runs have no meaningful compute/I/O split (§1)
    rb = tok["_read_bytes"].to_numpy(dtype=float)
    setting = num(S, "_moe_stream")
    moved = (np.nan_to_num(num(S, "read_MiB")) > 0) | (np.nan_to_num(num(S, "io_s")) > 0)
    streaming = np.full(len(S), None, dtype=object)
    for known, value in ((~np.isnan(rb), rb > 0), (obj("_trailer").astype(bool), moved),
                         (obj("_stream_line").astype(bool), True),
                         (~np.isnan(setting), setting != 0)):      # lowest priority first
        streaming[known] = value[known] if isinstance(value, np.ndarray) else value
    is_stream = streaming == True  # noqa: E712  (object array with None)
    experts, useful = num(S, "spec_experts"), num(S, "spec_useful")
    recall = num(S, "spec_recall_pct")
    recall[recall < 0] = np.nan                      # -1.0: no spec gate
    auto_off = np.where(np.isnan(recall), None, np.nan_to_num(num(S, "spec_auto_off")) > 0)
    spec_mib = num(S, "spec_read_MiB")
    with np.errstate(divide="ignore", invalid="ignore"):
        out = {
            "prefill_tps": num(S, "prefill_tps"), "ttft_s": ttft,
            "cache_hit_pct": np.where(hit < 0, np.nan, hit),
            "read_mib_per_token": read / n,
            "compute_s_per_token": np.where(is_stream, num(S, "compute_s/tok"), np.nan),
            "io_s_per_token": np.where(is_stream, num(S, "io_s/tok"), np.nan),
            "streaming": streaming, "complete": obj("_complete"),
            "_summary_tps": num(S, "tok/s"),
            "cache_budget_mib": num(S, "cache_budget_MiB"),
            "cache_resident_mib": num(S, "cache_resident_MiB"),
            "cache_resizes": num(S, "cache_resizes"),
            "spec_read_mib": spec_mib, "spec_read_mib_per_token": spec_mib / n,
            "spec_experts": experts, "spec_useful": useful,
            "spec_useful_pct": np.where(experts > 0, 100.0 * useful / experts, np.nan),
            "spec_recall_pct": recall, "spec_auto_off": auto_off.astype(object),
        }
    for key, raw, scale in _PRESSURE_SRC:      # a raw sidecar value wins over a converted one
        r = num(P, raw) / scale
        out[key] = np.where(np.isnan(r), num(P, key), r)
    return out


# ---- public --------------------------------------------------------------------------------

def runs_table(tokens: pd.DataFrame, summaries: Mapping[Any, Mapping[str, Any]] | None = None,
               pressure: Mapping[Any, Mapping[str, Any] | None] | None = None,
               quantile_method: str = "linear") -> pd.DataFrame:
    """Per-run stats (columns STAT_COLUMNS) for every run_id in tokens or summaries.

    tokens: one row per token with run_id, wall_ms and optionally stall_ms, read_bytes,
    cache_hit_pct. summaries: run_id -> RunParser.summary() dict (or a bare trailer dict).
    pressure: run_id -> `.metrics` sidecar dict or pressure_from_samples() result.
    quantile_method: "linear" (§6, numpy's default) or "lower" (no interpolation).
    """
    summaries = summaries or {}
    pressure = pressure or {}
    tok = _token_stats(tokens, quantile_method)
    ids = list(tok.index) + [r for r in summaries if r not in tok.index]
    tok = tok.reindex(ids)
    tok["n"] = tok["n"].fillna(0).astype(int)
    # per-run Python work is one small dict merge per run; the arithmetic is column-wise
    flats = [_flat(summaries.get(rid)) for rid in ids]
    scal = pd.DataFrame(_scalars(flats, [pressure.get(rid) for rid in ids], tok),
                        index=tok.index)
    out = pd.concat([tok.drop(columns=["_read_bytes", "_last_hit"]), scal], axis=1)
    # engines without per-token rows (llama-bench, llama-cli): the engine's own tok/s
    out["mean"] = out["mean"].where(out["n"] > 0, scal["_summary_tps"])
    return out[list(STAT_COLUMNS)]


def run_stats(tokens: pd.DataFrame, summary: Mapping[str, Any] | None,
              pressure: Mapping[str, Any] | None = None,
              quantile_method: str = "linear") -> dict[str, Any]:
    """The stats of one run (same code path as runs_table); NaN becomes None."""
    t = tokens.assign(run_id=0) if len(tokens) else pd.DataFrame(
        {"run_id": pd.Series([], dtype=int), "wall_ms": pd.Series([], dtype=float)})
    df = runs_table(t, {0: summary or {}}, {0: pressure}, quantile_method)
    rec = df.iloc[0].to_dict()
    return {k: _py(v) for k, v in rec.items()}


def _py(v: Any) -> Any:
    if isinstance(v, np.generic):
        v = v.item()
    return None if _missing(v) else v


def spread(means: Iterable[float | None]) -> dict[str, Any]:
    """Spread of repeated runs' means: mean of means, sample stdev (n-1), min, max, n."""
    xs = [float(x) for x in means if not _missing(x)]
    if not xs:
        return {"mean": None, "stdev": None, "min": None, "max": None, "n": 0}
    return {"mean": statistics.fmean(xs), "stdev": statistics.stdev(xs) if len(xs) > 1 else None,
            "min": min(xs), "max": max(xs), "n": len(xs)}


def delta_pct(a: float | None, b: float | None) -> float | None:
    """Relative change from a (the reference) to b, in percent; None when undefined."""
    if _missing(a) or _missing(b) or a == 0:
        return None
    return (b - a) / a * 100.0
