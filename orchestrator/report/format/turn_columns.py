"""The columns of the per-turn views of session runs (docs/sessions.md), declared once for
`orch table`, `orch show`, `orch export` and the report: one row per turn (TURNS, cells read
from a turn's stats/turns.py TurnFigures) and one row per run comparing its turn kinds
(TURN_COMPARISON, cells read from the run's RunFigures). Formatting only: every figure and
the verdict of a Δ are stats/turns.py's.
"""
from __future__ import annotations

from typing import Any

from orchestrator.report.format.columns import Column, TableSpec
from orchestrator.report.format.formatters import MINUS, STATS, number, yes_no
from orchestrator.report.format.within_cells import interval_cell
from orchestrator.stats.turns import interval_excludes_zero
from orchestrator.stats.values import DASH, is_missing

_TPS = STATS["mean"].fmt
_S = number("%.2f")
_COUNT = number("%d")


def _note(cancelled: Any, error: Any) -> str:
    """What happened to the turn besides its figures: cancelled at its deadline, or the
    engine's error message."""
    if not is_missing(error) and error:
        return f"error: {error}"
    return "cancelled" if cancelled else ""


def _idle(value: Any) -> str:
    return DASH if is_missing(value) or not value else "%.0f s" % value


def _signed(value: float) -> str:
    return ("%+.1f%%" % value).replace("-", MINUS)


def delta_cell(delta: Any, low: Any, high: Any) -> str:
    """A turn kind's decode rate against the warm turns': "−33.3% [−34.0, −32.6]", then
    whether the interval excludes no difference ("slower"/"faster") or not ("no clear
    difference"); the bare Δ where there were too few tokens for an interval."""
    if is_missing(delta):
        return DASH
    if is_missing(low) or is_missing(high):
        return f"{_signed(delta)} (no interval: too few tokens)"
    clear = interval_excludes_zero(low, high)
    word = ("slower" if delta < 0 else "faster") if clear else "no clear difference"
    return f"{_signed(delta)} [{_signed(low)}, {_signed(high)}] {word}"


TURNS = TableSpec((
    Column("turn", "turn", _COUNT, align="---:"),
    Column("kind", "kind", lambda v: DASH if is_missing(v) else str(v), align="---"),
    Column("idle_before_s", "idle before", _idle),
    Column("prompt_tokens", "prefilled tok", _COUNT, label="prompt tokens prefilled"),
    Column("context_tokens", "context after", _COUNT, label="context length after the turn"),
    Column("tokens", "tokens", _COUNT),
    Column("prefill_tps", "prefill tok/s", _TPS),
    Column("ttft_s", "TTFT (s)", _S),
    Column("mean", "decode tok/s", _TPS, headline=True),
    Column("tps_ci_low", "within-turn 95% CI", interval_cell, also=("tps_ci_high",)),
    Column("cache_hit_pct", "cache hit", STATS["cache_hit_pct"].fmt),
    Column("read_mib_per_token", "flash read/token", STATS["read_mib_per_token"].fmt),
    Column("clear_kv", "new chat", yes_no, align=":--:"),
    Column("cancelled", "note", _note, also=("error",), align="---"),
), "**Turns** (one row per generate() of a session run; kind: *first* pays the load and a "
   "cold cache, *after idle* follows an idle gap, *warm* follows another turn at once; "
   "prefilled tok = prompt tokens prefilled this turn (a continued chat prefills only its new "
   "message); decode tok/s over the turn's own tokens with its within-turn 95% interval "
   "(stationary block bootstrap)):", title="Turns")

TURN_COMPARISON = TableSpec((
    Column("first_turn_tps", "first turn tok/s", _TPS),
    Column("warm_turn_tps", "warm turns tok/s", _TPS),
    Column("after_idle_turn_tps", "after idle tok/s", _TPS),
    Column("after_idle_vs_warm_pct", "after idle vs warm", delta_cell,
           also=("after_idle_vs_warm_ci_low", "after_idle_vs_warm_ci_high")),
    Column("first_vs_warm_pct", "first vs warm", delta_cell,
           also=("first_vs_warm_ci_low", "first_vs_warm_ci_high")),
    Column("first_turn_ttft_s", "TTFT first (s)", _S),
    Column("warm_turn_ttft_s", "TTFT warm (s)", _S),
), "**Turn comparison** (decode rate over all tokens of each kind of turn; Δ against the warm "
   "turns with its 95% interval from stationary-bootstrap resamples of both; a config's row "
   "over several runs (run = all N): the mean of their Δ with its Student-t 95% interval "
   "over the runs; *no clear difference* where the interval includes 0):",
   title="Turn comparison")
