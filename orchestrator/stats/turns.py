"""A session run's per-turn figures (docs/sessions.md): `TurnFigures`, one per turn, and the
comparisons a session study asks for, computed once here and stored inside the run's figures
(stats/figures.py RunFigures.turns and its `*_turn_*` fields).

A turn's decode rate is n / Σ decode s over its own token rows (the run's headline rule,
docs/formats.md §6, applied to the turn's rows), else the engine's per-turn tok/s (a turn
record or a summary log without per-token rows). Its interval is the within-run one
(stats/within_run.py: stationary block bootstrap over the turn's own tokens).

Which turns are compared: turn 1 is the *first* turn (it pays the model load and a cold
cache); a later turn with an idle gap before it is an *after idle* turn (the OS may have
reclaimed the warm cache); any other later turn is *warm*. The run compares the after-idle
turns and the first turn with the warm turns, each as a Δ% of the decode rate with a 95%
interval from independent stationary-bootstrap resamples of the two groups' tokens: a
difference whose interval spans 0 is not called real.

TurnFigures is plain Python (stats/figures.py, which `orch show` reads in a fresh process,
imports it): numpy and the record model are imported where the figures are computed.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

    from orchestrator.record import Turn

FIRST, WARM, AFTER_IDLE = "first", "warm", "after idle"
LEVEL = 0.95


@dataclass(frozen=True, slots=True)
class TurnFigures:
    """One turn's figures; None is not measured."""

    turn: int
    kind: str                            # FIRST | WARM | AFTER_IDLE
    tokens: int | None = None            # token rows of the turn, else the engine's count
    mean: float | None = None            # decode tok/s
    tps_ci_low: float | None = None      # within-turn 95% interval of tok/s
    tps_ci_high: float | None = None
    prompt_tokens: int | None = None     # prefilled this turn (a continued chat: the suffix)
    context_tokens: int | None = None    # context length after the turn
    prefill_s: float | None = None
    prefill_tps: float | None = None
    ttft_s: float | None = None
    idle_before_s: float | None = None
    cache_hit_pct: float | None = None   # the engine's for the turn (-1, no cache: None)
    read_mib_per_token: float | None = None
    clear_kv: bool | None = None
    cancelled: bool | None = None
    error: str | None = None

    def get(self, key: str, default: Any = None) -> Any:
        return getattr(self, key, default) if key in TURN_FIELDS else default

    def stored(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def of(cls, values: Mapping[str, Any]) -> TurnFigures:
        kept: dict[str, Any] = {k: values[k] for k in TURN_FIELDS
                                if values.get(k) is not None}
        return cls(**kept)


TURN_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(TurnFigures))


@dataclass(frozen=True, slots=True)
class TurnComparison:
    """A turn group's decode rate against the warm turns': Δ% with its 95% interval."""

    delta_pct: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None


def turns_of(record_turns: Sequence[Turn], token_turns: Sequence[int]) -> list[Turn]:
    """The run's turns: its record's, else one per turn number its token rows carry (a
    session CSV imported without its BMOE_DONE lines); none for a one-shot run (turn 0)."""
    if record_turns:
        return list(record_turns)
    from orchestrator.record import Turn

    return [Turn(turn=int(t)) for t in sorted(set(token_turns)) if t >= 1]


def kind_of(turn: Turn) -> str:
    if turn.turn <= 1:
        return FIRST
    return AFTER_IDLE if (turn.idle_before_s or 0) > 0 else WARM


def turn_figures(turns: Sequence[Turn], tokens: Mapping[int, np.ndarray]) -> list[TurnFigures]:
    """Each turn's figures. `tokens`: turn number -> that turn's wall_ms in token order."""
    import numpy as np

    from orchestrator.stats.within_run import run_figures

    out = []
    for t in turns:
        w = tokens.get(t.turn)
        mean = lo = hi = None
        n = t.tokens
        if w is not None and len(w):
            n = int(len(w))
            total = float(np.nansum(w))
            mean = n / (total / 1000.0) if total > 0 else None
            within = run_figures(w)
            lo, hi = within["tps_ci_low"], within["tps_ci_high"]
        elif t.decode_tps is not None and t.decode_tps > 0:
            mean = t.decode_tps
        hit = t.cache_hit_pct if t.cache_hit_pct is not None and t.cache_hit_pct >= 0 else None
        read = t.read_mib / n if t.read_mib is not None and n else None
        out.append(TurnFigures(
            turn=t.turn, kind=kind_of(t), tokens=n, mean=mean, tps_ci_low=_f(lo),
            tps_ci_high=_f(hi), prompt_tokens=t.prompt_tokens, context_tokens=t.context_tokens,
            prefill_s=t.prefill_s, prefill_tps=t.prefill_tps, ttft_s=t.ttft_s,
            idle_before_s=t.idle_before_s, cache_hit_pct=hit, read_mib_per_token=read,
            clear_kv=t.clear_kv, cancelled=t.cancelled, error=t.error))
    return out


def _f(v: Any) -> float | None:
    return None if v is None else float(v)


def group_rate(figures: Sequence[TurnFigures], kind: str) -> float | None:
    """The decode rate over every turn of one kind: Σ tokens / Σ decode s (turns without a
    rate left out)."""
    n = s = 0.0
    for f in figures:
        if f.kind == kind and f.mean and f.tokens:
            n += f.tokens
            s += f.tokens / f.mean
    return n / s if s > 0 else None


def compare(a: np.ndarray, b: np.ndarray, seed: int = 0) -> TurnComparison:
    """Δ% of group b's decode rate against group a's (the base) (wall_ms arrays of their tokens), with a
    95% interval from independent stationary-bootstrap resamples of each group's mean ms."""
    import numpy as np

    from orchestrator.stats.within_run import CI_MIN_TOKENS, block_length, stationary_means

    a, b = a[~np.isnan(a)], b[~np.isnan(b)]
    if not len(a) or not len(b) or a.sum() <= 0 or b.sum() <= 0:
        return TurnComparison()
    delta = (a.mean() / b.mean() - 1.0) * 100.0       # rate ratio: ms ratio inverted
    if len(a) < CI_MIN_TOKENS or len(b) < CI_MIN_TOKENS:
        return TurnComparison(float(delta))
    ma = stationary_means(a, block_length(a), seed=seed)
    mb = stationary_means(b, block_length(b), seed=seed + 1)
    ds = (ma / mb - 1.0) * 100.0
    tail = (1 - LEVEL) / 2 * 100
    lo, hi = np.percentile(ds, [tail, 100 - tail])
    return TurnComparison(float(delta), float(lo), float(hi))


def run_turn_figures(turns: Sequence[Turn], tokens: Mapping[int, np.ndarray]
                     ) -> dict[str, Any]:
    """The run-level turn figures RunFigures stores: `turns` (the TurnFigures) and the
    comparisons with the warm turns. Empty for a one-shot run."""
    import numpy as np

    if not turns:
        return {}
    figs = turn_figures(turns, tokens)
    out: dict[str, Any] = {"turns": tuple(figs),
                           "first_turn_tps": group_rate(figs, FIRST),
                           "warm_turn_tps": group_rate(figs, WARM),
                           "after_idle_turn_tps": group_rate(figs, AFTER_IDLE)}
    first = [f for f in figs if f.kind == FIRST]
    warm = [f for f in figs if f.kind == WARM]
    if first and first[0].ttft_s is not None:
        out["first_turn_ttft_s"] = first[0].ttft_s
    ttfts = [f.ttft_s for f in warm if f.ttft_s is not None]
    if ttfts:
        out["warm_turn_ttft_s"] = float(np.mean(ttfts))

    def wall(kind: str) -> np.ndarray:
        parts = [tokens[f.turn] for f in figs if f.kind == kind and f.turn in tokens]
        return np.concatenate(parts) if parts else np.empty(0)

    base = wall(WARM)
    for kind, key in ((AFTER_IDLE, "after_idle_vs_warm"), (FIRST, "first_vs_warm")):
        c = compare(base, wall(kind))
        out[f"{key}_pct"], out[f"{key}_ci_low"], out[f"{key}_ci_high"] = (
            c.delta_pct, c.ci_low, c.ci_high)
    return out


def interval_excludes_zero(low: float, high: float) -> bool:
    """A Δ% interval that excludes no difference: the data support calling it real."""
    return (low > 0 and high > 0) or (low < 0 and high < 0)
