"""THE computation of a run's figures (stats/figures.py RunFigures), exactly as
docs/formats.md §6 defines the published ones: `compute` is the one function that turns token
rows, agent samples and engine records into RunFigures, for one run when it ends or is
imported (db/figures.py stores them) and for many at once when a view asks for other
figures than the stored ones (`--trim N`, the `lower` quantile method) or a store is
migrated to a new FIGURES_VERSION.

Token-level numbers come from the token rows; scalar ones from the run's record (a RunRecord:
the engine's trailer, or its stdout summary lines when a run was killed before writing its
trailer), and then from the token rows where the record has nothing. Everything for many runs
is computed at once (`table`): per-run Python work is limited to reading each record's typed
fields and the within-run bootstrap (stats/within_run.py).

Beyond the published tables: per-token latency percentiles (ms, as serving benchmarks report
them), the warm-up truncation point with the steady-state mean (`_steady_state`, MSER-5), and
the within-run figures (a block-bootstrap interval of the run's own rate, whether it settled).

Over 400 lines on purpose: the token-level and the record-level figures are one computation
over the same arrays (many runs at once), and `compute` must stay the one function that makes
RunFigures.
"""
from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from operator import attrgetter
from typing import TYPE_CHECKING, Any

import numpy as np

from orchestrator.record import KIB_PER_GIB, PRESSURE_FIELDS, RunRecord
from orchestrator.stats.energy import ENERGY_FIELDS, energy_note
from orchestrator.stats.figures import FIELDS, RunFigures
from orchestrator.stats.trim import drop_first, trimmed
from orchestrator.stats.values import is_missing, plain

if TYPE_CHECKING:   # imported where a frame is made
    import pandas as pd

QUANTILE_METHODS = ("linear", "lower")

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
    """Per run_id: n, mean, min, max, median, p5, p95, stall mean, read bytes, last hit pct.

    Hand-vectorised on purpose: the same figures through pandas (`groupby().quantile(q,
    interpolation=...)`, min/max/size/sum/mean/last) took 45 ms against this code's 18 ms for
    1,000 runs x 256 tokens, which would put bench/analysis (goal <= 2x a bare groupby) at
    about 2.3x. tests/test_analysis_oracle.py checks these quantiles against pandas'."""
    import pandas as pd

    if q_method not in QUANTILE_METHODS:
        raise ValueError(f"quantile_method must be one of {QUANTILE_METHODS}")
    codes, uniques = pd.factorize(tokens["run_id"], sort=False)
    g = len(uniques)

    def col(name: str) -> np.ndarray | None:
        return tokens[name].to_numpy(dtype=float, na_value=np.nan) if name in tokens else None

    w = tokens["wall_ms"].to_numpy(dtype=float, na_value=np.nan)   # the one column required
    hit = col("cache_hit_pct")
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
        else:   # docs/formats.md §6: i = q*(len-1); v[lo] + (v[hi]-v[lo])*(i-lo)
            a, b = at(lo), at(np.ceil(i).astype(np.int64))
            out = a + (b - a) * (i - lo)
        return np.where(has, out, np.nan)

    def latency(q: float) -> np.ndarray:
        """The q-quantile of wall_ms over the same rows, linear: ascending wall is descending
        tps, so wall's j-th value is 1000 / tps[cnt-1-j] (no second sort)."""
        i = q * np.maximum(cnt - 1, 0)
        lo, hi = np.floor(i).astype(np.int64), np.ceil(i).astype(np.int64)
        last = np.maximum(cnt - 1, 0)
        with np.errstate(divide="ignore", invalid="ignore"):
            a, b = 1000.0 / at(last - lo), 1000.0 / at(last - hi)
        return np.where(has, a + (b - a) * (i - lo), np.nan)

    with np.errstate(divide="ignore", invalid="ignore"):
        mean = np.where(wall_sum > 0, n / (wall_sum / 1000.0), np.nan)
        s_per_token = np.where((n > 0) & (wall_sum > 0), wall_sum / 1000.0 / n, np.nan)
    steady_from, steady_mean = _steady_state(n, w)
    out = pd.DataFrame({
        "n": n, "mean": mean, "s_per_token": s_per_token,
        "min": np.where(has, at(np.zeros(g, np.int64)), np.nan),
        "max": np.where(has, at(np.maximum(cnt - 1, 0)), np.nan),
        # the median is always the true median (the published tables agree with it even where
        # their p95 was not interpolated, see tests/test_analysis_oracle.py)
        "median": quantile(0.5, "linear"),
        "p5": quantile(0.05, q_method), "p95": quantile(0.95, q_method),
        "latency_p50_ms": latency(0.50), "latency_p90_ms": latency(0.90),
        "latency_p99_ms": latency(0.99),
        "steady_from_token": steady_from, "steady_mean": steady_mean,
    }, index=pd.Index(uniques, name="run_id"))

    def mean_sum(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        ok = ~np.isnan(x)
        s = np.bincount(row_codes[ok], weights=x[ok], minlength=g)
        k = np.bincount(row_codes[ok], minlength=g)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(k > 0, s / k, np.nan), np.where(k > 0, s, np.nan)

    nan = np.full(g, np.nan)
    stall, rb = col("stall_ms"), col("read_bytes")    # order-free sums: original row order
    majflt = col("majflt")
    out["stall_ms_per_token"] = mean_sum(stall)[0] if stall is not None else nan
    out["_majflt"] = mean_sum(majflt)[0] if majflt is not None else nan
    out["_read_bytes"] = mean_sum(rb)[1] if rb is not None else nan
    if hit is not None and g:     # cumulative over the session: the run's last row is the total
        out["_last_hit"] = hit[np.cumsum(n) - 1]
    else:
        out["_last_hit"] = nan
    return out


# ---- warm-up and steady state ----------------------------------------------------------------

MSER_BATCH = 5           # MSER-5: batch means of 5 tokens
STEADY_MIN_TOKENS = 20   # fewer tokens: 3 batches or less, too few to tell warm-up from noise


def _steady_state(n: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(first steady-state token, 1-based; steady-state tok/s) per run, NaN for runs shorter
    than STEADY_MIN_TOKENS.

    The warm-up truncation rule is MSER-5 (White, "An effective truncation heuristic for bias
    reduction in simulation output", Simulation 69(6), 1997; White, Cobb & Spratt, WSC 2000),
    the standard one in simulation output analysis and the one Hoad, Robinson & Davies (2010)
    recommend for automation: wall_ms is averaged over batches of 5 tokens, b_1..b_k (an
    incomplete last batch is left out), and the truncation point is the d (in batches) that
    minimises MSER(d) = Σ_{j>d} (b_j - mean_d)² / (k - d)², the squared standard error of the
    mean of what remains. d is searched over the first half of the run only: beyond it the
    statistic rewards throwing data away (few, similar batches). A minimum on the last batch of
    that half means the statistic was still falling, i.e. the run had not settled within its
    first half, which MSER reads as "run too short": no steady state then (NaN), rather than a
    truncation point the data does not support. The steady-state mean is computed like the
    headline mean, n / Σ decode seconds, over every token from 5d + 1 on.

    `n` rows per run; `w` wall_ms of every run's rows, run after run, each in token order.
    """
    g = len(n)
    nan = np.full(g, np.nan)
    nb = n // MSER_BATCH
    total_b = int(nb.sum())
    if not total_b:
        return nan, nan.copy()
    # every run cut into segments of 5 rows (its last one may be shorter), summed in one
    # reduceat: each sum depends on its own rows only, so a run's figures do not change with
    # the other runs in the table
    nseg = -(-n // MSER_BATCH)
    srun = np.repeat(np.arange(g), nseg)
    sj = np.arange(len(srun)) - (np.cumsum(nseg) - nseg)[srun]      # segment index in its run
    seg_sum = np.add.reduceat(np.where(np.isnan(w), 0.0, w),
                              (np.cumsum(n) - n)[srun] + MSER_BATCH * sj)
    full = sj < nb[srun]
    b = seg_sum[full] / MSER_BATCH                        # the batch means, run after run
    boff = np.cumsum(nb) - nb
    brun = srun[full]
    j = sj[full]
    with np.errstate(divide="ignore", invalid="ignore"):
        # centred per run, so the suffix sums below do not cancel catastrophically
        y = b - (np.bincount(brun, weights=b, minlength=g) / nb)[brun]
    c1, c2 = np.cumsum(y), np.cumsum(y * y)
    last = (boff + nb - 1)[brun]
    s1 = c1[last] - (c1 - y)                              # Σ over batches j.. of the run
    s2 = c2[last] - (c2 - y * y)
    m = nb[brun] - j
    mser = (s2 - s1 * s1 / m) / (m * m)
    eligible = np.flatnonzero((n[brun] >= STEADY_MIN_TOKENS) & (j < nb[brun] // 2))
    d = np.full(g, -1, dtype=np.int64)
    if len(eligible):
        runs_e, vals = brun[eligible], mser[eligible]
        seg = np.flatnonzero(np.r_[True, runs_e[1:] != runs_e[:-1]])    # one segment per run
        lowest = np.minimum.reduceat(vals, seg)
        at_min = np.flatnonzero(vals <= np.repeat(lowest, np.diff(np.r_[seg, len(vals)])))
        first = at_min[np.unique(runs_e[at_min], return_index=True)[1]]   # smallest d on ties
        d[runs_e[first]] = j[eligible][first]
    found = (d >= 0) & (d < nb // 2 - 1)
    cut = np.where(found, d, 0) * MSER_BATCH
    rest = np.bincount(srun, weights=np.where(sj >= np.where(found, d, 0)[srun], seg_sum, 0.0),
                       minlength=g)
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = np.where(found & (rest > 0), (n - cut) / (rest / 1000.0), np.nan)
    return np.where(found, cut + 1, np.nan), mean


# ---- scalar (from the records) -------------------------------------------------------------

@dataclass(frozen=True)
class RunInput:
    """What compute needs of a run besides its token rows and samples."""

    record: RunRecord                 # the engine's report (any stored version, load_record)
    overlapped: bool | None = None    # stats/overlap.py: False (serial) leaves its stall out


# The record fields the tables read, fetched from every record in one pass.
_FIELDS = ("decode_tps", "s_per_token", "tokens", "prefill_tps", "ttft_s", "cache_hit_pct",
           "read_mib", "read_mib_per_token",
           "compute_s_per_token", "io_s_per_token", "stall_s_per_token", "majflt_per_token",
           "cache_budget_mib", "cache_resident_mib",
           "cache_resizes", "spec_read_mib", "spec_experts", "spec_useful", "spec_recall_pct",
           "spec_auto_off", "streaming", "complete")
_get_fields = attrgetter(*_FIELDS)


def _scalars(inputs: list[RunInput], pressures: list[Mapping[str, Any] | None],
             tok: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Vectorised over runs: the per-run columns that come from the records and pressure.
    tok: the token statistics' columns (a frame)."""
    records = [i.record for i in inputs]
    table = np.array([_get_fields(r) for r in records], dtype=object).reshape(
        len(records), len(_FIELDS))
    field = {name: table[:, i] for i, name in enumerate(_FIELDS)}

    def num(name: str) -> np.ndarray:
        return field[name].astype(float)        # None -> NaN

    rows = np.asarray(tok["_n_all"], dtype=float)   # the record's totals are over every token
    # a run without token rows (a summary-only import, llama-bench): the engine's own count
    summary = rows == 0
    n = np.where(summary, num("tokens"), rows)
    n = np.where(n > 0, n, np.nan)
    hit = num("cache_hit_pct")
    hit = np.where(np.isnan(hit), np.asarray(tok["_last_hit"], dtype=float), hit)
    rb = np.asarray(tok["_read_bytes"], dtype=float)
    read = num("read_mib")
    read = np.where(np.isnan(read), rb / 1048576, read)
    with np.errstate(divide="ignore", invalid="ignore"):
        # a run without token rows: the MiB/token its summary line printed (more digits than
        # its total over its count gives back: 15381.7 MiB / 24 is 640.90, printed 640.91)
        read_per_token = np.where(summary & ~np.isnan(num("read_mib_per_token")),
                                  num("read_mib_per_token"), read / n)
    # streaming: what the record says, else whether the rows read anything; plain mmap runs
    # have no meaningful compute/I/O split (docs/formats.md §1)
    streaming = field["streaming"].copy()
    unknown = np.array([v is None for v in streaming], dtype=bool) & ~np.isnan(rb)
    streaming[unknown] = rb[unknown] > 0
    is_stream = streaming == True  # noqa: E712  (object array with None)
    # a plain mmap run measures no flash reads and no stall (its columns are written as 0):
    # not measured, not zero; nor does a serial run measure an overlapped stall (overlap.py)
    mmap = streaming == False  # noqa: E712
    serial = np.array([i.overlapped is False for i in inputs], dtype=bool)
    stall = np.asarray(tok["stall_ms_per_token"], dtype=float)
    stall = np.where(np.isnan(stall), num("stall_s_per_token") * 1000.0, stall)
    majflt = num("majflt_per_token")
    majflt = np.where(np.isnan(majflt), np.asarray(tok["_majflt"], dtype=float), majflt)
    experts, useful = num("spec_experts"), num("spec_useful")
    recall = num("spec_recall_pct")
    recall[recall < 0] = np.nan                      # -1.0: no spec gate
    auto_off = np.where(np.isnan(recall), np.array(None),   # an object array: None or a bool
                        np.nan_to_num(num("spec_auto_off")) > 0)
    spec_mib = num("spec_read_mib")
    with np.errstate(divide="ignore", invalid="ignore"):
        out = {
            "prefill_tps": num("prefill_tps"), "ttft_s": num("ttft_s"),
            "cache_hit_pct": np.where(hit < 0, np.nan, hit),
            "read_mib_per_token": np.where(mmap, np.nan, read_per_token),
            "stall_ms_per_token": np.where(mmap | serial, np.nan, stall),
            "majflt_per_token": majflt,
            "compute_s_per_token": np.where(is_stream, num("compute_s_per_token"), np.nan),
            "io_s_per_token": np.where(is_stream, num("io_s_per_token"), np.nan),
            "streaming": streaming, "complete": field["complete"],
            "overlapped": np.array([i.overlapped for i in inputs], dtype=object),
            "_decode_tps": num("decode_tps"),
            "_s_per_token": np.where(np.isnan(num("s_per_token")),
                                     np.where(num("decode_tps") > 0, 1.0 / num("decode_tps"),
                                              np.nan), num("s_per_token")),
            "tokens": np.where(summary, num("tokens"), rows),
            # a summary-only import (engines/bmoe.py summary_record): no token rows, every
            # figure as the engine printed it
            "summary_only": np.array([bool(r.extra.get("summary_only")) and bool(s)
                                      for r, s in zip(records, summary)] + [None],
                                     dtype=object)[:-1],
            "cache_budget_mib": num("cache_budget_mib"),
            "cache_resident_mib": num("cache_resident_mib"),
            "cache_resizes": num("cache_resizes"),
            "spec_read_mib": spec_mib, "spec_read_mib_per_token": spec_mib / n,
            "spec_experts": experts, "spec_useful": useful,
            "spec_useful_pct": np.where(experts > 0, 100.0 * useful / experts, np.nan),
            "spec_recall_pct": recall, "spec_auto_off": auto_off.astype(object),
            "repetitions": np.array([_repetitions(r) for r in records] + [None],
                                    dtype=object)[:-1],
        }
    for key in PRESSURE_FIELDS:     # a key a run's pressure lacks, or None: NaN
        out[key] = np.array([(p or {}).get(key) for p in pressures], dtype=object).astype(float)
    # the CPU temperature at the start, where neither samples nor a sidecar had one: the
    # entry state the study's driver log recorded for the run (what `orch show` prints)
    entry = np.array([_entry_cpu_temp_c(r) for r in records], dtype=object).astype(float)
    out["cpu_temp_start_c"] = np.where(np.isnan(out["cpu_temp_start_c"]), entry,
                                       out["cpu_temp_start_c"])
    # energy over the decode phase (stats/energy.py): None (not measured) stays NaN, never 0
    energies = [r.energy or {} for r in records]
    for key in ENERGY_FIELDS:
        out[key] = np.array([e.get(key) for e in energies], dtype=object).astype(float)
    out["energy_note"] = np.array([energy_note(e) for e in energies], dtype=object)
    return out


def _own_tokens(records: list[RunRecord]) -> np.ndarray:
    """Each summary-only record's own generated-token count (an imported log section or turn
    records: `extra["summary_only"]`); NaN for every other record (llama-bench's `n` stays
    its token rows, 0)."""
    return np.array([r.tokens if (r.extra or {}).get("summary_only") else None
                     for r in records] + [None], dtype=object)[:-1].astype(float)


def _entry_cpu_temp_c(record: RunRecord) -> float | None:
    """The CPU temperature (°C) of an imported run's recorded entry state (its driver log's
    `ENTRY STATE: cpu=N mC`), None when it has none."""
    driver = (record.entry_state.driver or {}) if record.entry_state else {}
    value = driver.get("cpu_temp_mC")
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return value / 1000.0
    return None


def _repetitions(record: RunRecord) -> tuple[float, ...] | None:
    """An engine's own per-repetition tok/s (llama-bench -r N: its samples_ts), finite ones."""
    reps = (record.extra or {}).get("repetitions")
    if not isinstance(reps, list):
        return None
    kept = tuple(float(v) for v in reps
                 if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v))
    return kept or None


# ---- public --------------------------------------------------------------------------------

def table(tokens: pd.DataFrame, inputs: Mapping[Any, RunInput],
          samples: pd.DataFrame | None = None, quantile_method: str = "linear", trim: int = 0,
          within_run: bool = True) -> pd.DataFrame:
    """Every run's figures as a frame indexed by run id, columns RunFigures' fields (FIELDS).

    tokens: one row per token with run_id, wall_ms and optionally stall_ms, read_bytes,
    cache_hit_pct, majflt, seq; each run's rows in token order (runs may interleave).
    inputs: run_id -> RunInput (every run to compute; a run without token rows has n 0 and
    the engine's own tok/s). samples: the runs' agent samples (run_id, t_ms, hwm_kb, ...):
    their pressure (pressure_by_run); a run without samples takes its record's (an imported
    run's `.metrics` sidecar). quantile_method: "linear" (docs/formats.md §6, numpy's
    default) or "lower" (no interpolation). trim: the per-token figures over each run's
    tokens after its first `trim` (stats/trim.py); steady_from_token still counts every
    token. within_run: the within-run figures (stats/within_run.py, a bootstrap per run) and
    no steady state claimed for a run that had not settled; False only for bench/analysis,
    which times the vectorised part alone.
    """
    import pandas as pd

    tok = _token_stats(tokens, quantile_method)
    tok["_n_all"] = tok["n"]
    if trim:
        tok = trimmed(tok, _token_stats(drop_first(tokens, trim), quantile_method), trim)
    ids = list(inputs)
    tok = tok.reindex(ids)
    tok["_n_all"] = tok["_n_all"].fillna(0)
    runs = [inputs[rid] for rid in ids]
    # a summary-only run (an imported log section, turn records) has no token rows: it
    # generated the tokens its engine counted (the `generation:` line's N), not 0
    own = np.nan_to_num(_own_tokens([r.record for r in runs]))
    tok["n"] = np.where(tok["_n_all"].to_numpy() > 0, tok["n"].fillna(0), own).astype(int)
    measured = pressure_by_run(samples) if samples is not None else {}
    pressures: list[Mapping[str, Any] | None] = [measured.get(rid) or (i.record.pressure.__dict__ if i.record.pressure else None)
                 for rid, i in zip(ids, runs)]
    scal = pd.DataFrame(_scalars(runs, pressures, tok), index=tok.index)
    out = pd.concat([tok.drop(columns=["_read_bytes", "_last_hit", "_majflt",
                                       "stall_ms_per_token"]), scal], axis=1)
    # engines without per-token rows (llama-bench, llama-cli): the engine's own tok/s; a run
    # whose every token was trimmed away is not measured, not the engine's figure
    out["mean"] = out["mean"].where(out["_n_all"] > 0, scal["_decode_tps"])
    out["s_per_token"] = out["s_per_token"].where(out["_n_all"] > 0, scal["_s_per_token"])
    if within_run:
        from orchestrator.stats.within_run import with_within_run

        out = with_within_run(out, tokens, trim)
    out = _with_turns(out, tokens, inputs)
    return out.reindex(columns=list(FIELDS))


def _with_turns(out: pd.DataFrame, tokens: pd.DataFrame,
                inputs: Mapping[Any, RunInput]) -> pd.DataFrame:
    """The session runs' turn figures (stats/turns.py) over all their tokens (never trimmed):
    runs whose record has turns or whose token rows carry a turn number from 1."""
    from orchestrator.stats.turns import run_turn_figures, turns_of

    walls: dict[Any, dict[int, np.ndarray]] = {}
    if "turn" in tokens and len(tokens):
        turned = tokens[tokens["turn"].to_numpy(dtype=float, na_value=np.nan) >= 1]
        for (rid, turn), group in turned.groupby(["run_id", "turn"], sort=False):
            if "seq" in group and not group["seq"].is_monotonic_increasing:
                group = group.sort_values("seq", kind="stable")
            walls.setdefault(rid, {})[int(turn)] = group["wall_ms"].to_numpy(
                dtype=float, na_value=np.nan)
    values: dict[Any, dict[str, Any]] = {}
    for rid, run in inputs.items():
        turns = turns_of(run.record.turns, list(walls.get(rid, {})))
        if turns:
            values[rid] = run_turn_figures(turns, walls.get(rid, {}))
    if not values:
        return out
    out = out.copy()
    for key in {k for v in values.values() for k in v}:
        column = np.array([values.get(rid, {}).get(key) for rid in out.index] + [None],
                          dtype=object)[:-1]
        out[key] = column
    return out


def compute(tokens: pd.DataFrame, inputs: Mapping[Any, RunInput],
            samples: pd.DataFrame | None = None, quantile_method: str = "linear",
            trim: int = 0) -> dict[Any, RunFigures]:
    """Each run's RunFigures (the arguments as `table`'s): what the store keeps (trim 0,
    linear quantiles) and what a view asks for otherwise."""
    frame = table(tokens, inputs, samples, quantile_method, trim)
    return {rid: RunFigures.of({k: plain(v) for k, v in rec.items()})
            for rid, rec in zip(frame.index, frame.to_dict("records"))}


def rates(tokens: Any, wall_ms: Any) -> np.ndarray:
    """Tokens per second over spans, elementwise: tokens / Σ decode s (figures.rate's
    vectorised form, for curves over many spans); NaN where no decode time was recorded."""
    n, wall = np.asarray(tokens, dtype=float), np.asarray(wall_ms, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(wall > 0, n / (wall / 1000.0), np.nan)


def spread(values: Iterable[float | None]) -> dict[str, Any]:
    """Spread of repeated measurements (runs' means, an engine's repetitions): their mean,
    sample stdev (n-1, as llama-bench's stddev_ts), min, max and n; missing values skipped."""
    xs = [float(x) for x in values if not is_missing(x)]
    if not xs:
        return {"mean": None, "stdev": None, "min": None, "max": None, "n": 0}
    return {"mean": statistics.fmean(xs), "stdev": statistics.stdev(xs) if len(xs) > 1 else None,
            "min": min(xs), "max": max(xs), "n": len(xs)}


def delta_pct(a: float | None, b: float | None) -> float | None:
    """Relative change from a (the reference) to b, in percent; None when undefined."""
    if is_missing(a) or is_missing(b) or a == 0:
        return None
    return (b - a) / a * 100.0


def pressure_by_run(samples: pd.DataFrame) -> dict[int, dict[str, float | None]]:
    """Device pressure of every sampled run from its agent samples (t_ms, hwm_kb, rss_kb,
    mem_avail_kb, cpu_temp_mC, batt_temp_dC), in GiB and °C, in one groupby (per-run calls
    were half of a 1,000-run report's time).

    The agent omits unreadable keys, so missing values are NaN and skipped. Peak RSS is the max
    VmHWM (the kernel's own high-water mark, which catches peaks between samples); VmRSS only
    when no HWM was readable. "start" is the first sample in time with a reading.
    """
    import pandas as pd

    if samples is None or not len(samples):
        return {}
    s = samples.sort_values(["run_id", "t_ms"], kind="stable")
    g = s.groupby("run_id")

    def agg(column: str, how: str, scale: float) -> pd.Series:
        if column not in s:
            return pd.Series(dtype=float)
        values = pd.to_numeric(s[column], errors="coerce")
        grouped = values.groupby(s["run_id"])
        out = {"max": grouped.max, "min": grouped.min, "first": grouped.first}[how]()
        return out / scale

    peak = agg("hwm_kb", "max", KIB_PER_GIB)
    peak = peak.combine_first(agg("rss_kb", "max", KIB_PER_GIB))
    frame = pd.DataFrame({
        "peak_rss_gib": peak,
        "mem_floor_gib": agg("mem_avail_kb", "min", KIB_PER_GIB),
        "cpu_temp_start_c": agg("cpu_temp_mC", "first", 1000),
        "cpu_temp_max_c": agg("cpu_temp_mC", "max", 1000),
        "batt_temp_max_c": agg("batt_temp_dC", "max", 10),
    }).reindex(list(g.groups))
    return {int(rid): {k: plain(v) for k, v in rec.items()}
            for rid, rec in frame.to_dict("index").items()}
