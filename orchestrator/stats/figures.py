"""`RunFigures`: every figure orch prints about one run, in one typed row.

The result model's per-run half (pyperf's `Benchmark` owns its statistics; asv stores them
beside the values). The figures are computed by ONE function, `stats/statistics.py
compute`, from the run's token rows, its agent samples and its engine record, when the run
ends and when it is imported, and stored with the run (`run.figures`, versioned by
FIGURES_VERSION; db/figures.py). Every view (`orch show`, `orch runs`, `orch table`, the
report, `orch export`, history, compare, A/B, adaptive repeats) prints the stored value, so
no two views can disagree about a figure. A view asking for other figures (`--trim N`, the
`lower` quantile method) gets them from the same function over the stored rows.

This module is plain Python (no numpy, no pydantic): `orch show` and `orch runs` read stored
figures in a fresh process that should not pay for those imports (bench/startup).

Units are in the names (`_ms`, `_s`, `_gib`, `_c` °C, `_pct`, `_mib`, `_j`, `_w`); None is
"not measured", never 0. To add a figure: docs/extending.md.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from orchestrator.stats.turns import TurnFigures

# Bump when a figure is added, removed or computed differently: stored figures of another
# version are recomputed by a migration (db/migrations: one per version) and, until then,
# computed when read.
FIGURES_VERSION = 4



@dataclass(frozen=True, slots=True)
class RunFigures:
    """One run's figures (docs/formats.md §6 for the published ones)."""

    # -- decode throughput: the headline mean over every token row (n / Σ decode s, never
    #    trimmed: the rate the study publishes), then the distribution of per-token tok/s
    #    (1000 / wall_ms, linear interpolation) over the rows after the trim
    n: int = 0                           # token rows (after the trim)
    mean: float | None = None            # tok/s over every token row, whatever the trim; a
                                         # run without token rows: the engine's own
    s_per_token: float | None = None     # decode s/token over the same tokens (Σ wall / n);
                                         # a run without token rows: the engine's own
    mean_after_trim: float | None = None  # tok/s over the rows after the trim (None at trim 0)
    min: float | None = None
    max: float | None = None
    median: float | None = None
    p5: float | None = None
    p95: float | None = None
    latency_p50_ms: float | None = None  # per-token latency percentiles, ms
    latency_p90_ms: float | None = None
    latency_p99_ms: float | None = None
    steady_from_token: int | None = None  # MSER-5's first steady token (1-based, every token)
    steady_mean: float | None = None     # tok/s from there on; None when the run had not settled
    # -- the engine's whole-run figures (never trimmed)
    tokens: int | None = None            # generated: every token row, else the engine's count
    summary_only: bool | None = None     # no token rows: the figures are the engine's summary
                                         # lines' (printed at its precision: formatters.py)
    prefill_tps: float | None = None
    ttft_s: float | None = None
    cache_hit_pct: float | None = None
    read_mib_per_token: float | None = None
    stall_ms_per_token: float | None = None   # None for a serial run: all its I/O is stall
    compute_s_per_token: float | None = None
    io_s_per_token: float | None = None
    majflt_per_token: float | None = None
    streaming: bool | None = None        # weights streamed from flash (else plain mmap)
    overlapped: bool | None = None       # flash I/O beside compute (bmoe --overlap)
    complete: bool | None = None
    cache_budget_mib: float | None = None
    cache_resident_mib: float | None = None
    cache_resizes: int | None = None
    spec_read_mib: float | None = None
    spec_read_mib_per_token: float | None = None
    spec_experts: int | None = None
    spec_useful: int | None = None
    spec_useful_pct: float | None = None
    spec_recall_pct: float | None = None
    spec_auto_off: bool | None = None
    repetitions: tuple[float, ...] | None = None   # an engine's own repeats (llama-bench -r)
    # -- device pressure over the run (agent samples, else an import's .metrics sidecar)
    peak_rss_gib: float | None = None
    mem_floor_gib: float | None = None
    cpu_temp_start_c: float | None = None
    cpu_temp_max_c: float | None = None
    batt_temp_max_c: float | None = None
    # -- energy over the decode phase (stats/energy.py)
    energy_j: float | None = None
    power_w: float | None = None
    j_per_token: float | None = None
    tokens_per_j: float | None = None
    net_j_per_token: float | None = None
    energy_note: str | None = None       # why not measured, or what to read with care
    # -- within the run (stats/within_run.py): its tokens' spread and its own interval
    mean_ms: float | None = None
    median_ms: float | None = None
    cv_pct: float | None = None
    mean_ms_ci_low: float | None = None
    mean_ms_ci_high: float | None = None
    tps_ci_low: float | None = None
    tps_ci_high: float | None = None
    ci_method: str | None = None
    first_token_ms: float | None = None
    first5_mean_ms: float | None = None
    settled: bool | None = None          # None: too short to tell
    trend_pct: float | None = None
    settle_note: str | None = None
    # -- a session run's turns (stats/turns.py; docs/sessions.md): each turn's figures, and
    #    the first and after-idle turns' decode rate against the warm turns' (Δ% with a 95%
    #    interval); None for a one-shot run
    turns: tuple[TurnFigures, ...] | None = None
    first_turn_tps: float | None = None
    warm_turn_tps: float | None = None
    after_idle_turn_tps: float | None = None
    first_turn_ttft_s: float | None = None
    warm_turn_ttft_s: float | None = None
    after_idle_vs_warm_pct: float | None = None
    after_idle_vs_warm_ci_low: float | None = None
    after_idle_vs_warm_ci_high: float | None = None
    first_vs_warm_pct: float | None = None
    first_vs_warm_ci_low: float | None = None
    first_vs_warm_ci_high: float | None = None

    # ---- reading ------------------------------------------------------------------------
    def get(self, key: str, default: Any = None) -> Any:
        """A figure by name, as a mapping gives it (the views' columns address figures by
        key): `default` for a name that is no figure."""
        return getattr(self, key, default) if key in FIELDS else default

    def __getitem__(self, key: str) -> Any:
        if key not in FIELDS:
            raise KeyError(key)
        return getattr(self, key)

    def as_dict(self) -> dict[str, Any]:
        """Every figure by name, plain values (None for not measured)."""
        return {name: getattr(self, name) for name in FIELDS}

    def replace(self, **values: Any) -> RunFigures:
        return dataclasses.replace(self, **values)

    # ---- storing ------------------------------------------------------------------------
    def stored(self) -> dict[str, Any]:
        """What `run.figures` holds: the figures with their version (JSON: no NaN, no inf)."""
        out: dict[str, Any] = {"version": FIGURES_VERSION}
        for name in FIELDS:
            value = getattr(self, name)
            if isinstance(value, float) and not math.isfinite(value):
                value = None
            elif name == "turns" and value is not None:
                value = [t.stored() for t in value]
            elif isinstance(value, tuple):
                value = list(value)
            out[name] = value
        return out

    @classmethod
    def from_stored(cls, data: Any) -> RunFigures | None:
        """Stored figures of this version; None for anything else (another version, none at
        all): the caller computes them then."""
        if not isinstance(data, Mapping) or data.get("version") != FIGURES_VERSION:
            return None
        return cls.of(data)

    @classmethod
    def of(cls, values: Mapping[str, Any]) -> RunFigures:
        """Figures from a mapping of plain values (missing names: not measured; NaN: None;
        names that are no figure: ignored)."""
        kept: dict[str, Any] = {}
        for name in FIELDS:
            value = values.get(name)
            if value is None:
                continue
            if isinstance(value, float) and math.isnan(value):
                continue
            kind = _KINDS[name]
            if name == "turns":
                value = tuple(t if isinstance(t, TurnFigures) else TurnFigures.of(t)
                              for t in value)
            elif kind is int and not isinstance(value, bool):
                value = int(value)
            elif kind is float and not isinstance(value, bool):
                value = float(value)
            elif kind is tuple:
                value = tuple(float(v) for v in value)
            kept[name] = value
        return cls(**kept)


FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(RunFigures))
# each figure's Python type, for `of` (int counts, float measures, bool flags, str notes)
_KINDS: dict[str, type] = {
    f.name: next(kind for word, kind in (("TurnFigures", object), ("tuple", tuple), ("bool", bool), ("int", int),
                                         ("float", float), ("str", str)) if word in str(f.type))
    for f in dataclasses.fields(RunFigures)}
# the figures a trim changes (the per-token ones); the rest describe the whole run, the
# headline mean and s/token included (the trimmed mean is `mean_after_trim`, beside them)
PER_TOKEN: tuple[str, ...] = ("n", "min", "max", "median", "p5", "p95",
                              "latency_p50_ms", "latency_p90_ms", "latency_p99_ms",
                              "steady_from_token", "steady_mean")
NOT_MEASURED = RunFigures()


def frame(figures: Mapping[Any, RunFigures]) -> Any:
    """Figures as a pandas frame indexed by run id (`run_id`), one column per figure (NaN
    for None in number columns): for views that lay many runs out as a table."""
    import pandas as pd

    out = pd.DataFrame.from_records([f.as_dict() for f in figures.values()],
                                    index=pd.Index(list(figures), name="run_id"),
                                    columns=list(FIELDS))
    return out


def rate(tokens: float, wall_ms: float | None) -> float | None:
    """Tokens per second over a span: tokens / Σ decode seconds (the tables' headline mean,
    docs/formats.md §6); None when no decode time was recorded. The one place this division
    is written for a single span (progress lines, an engine's own summary); the vectorised
    form is statistics.py's."""
    if wall_ms is None or not wall_ms > 0:
        return None
    return tokens / (wall_ms / 1000.0)
