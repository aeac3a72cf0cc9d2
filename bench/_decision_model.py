"""bench/decision's two designs replayed on the simulated phone without orch: the pure model.

The phone's physics are bench/_phone_physics.py's, the decisions stats/decision.py's and the
fixed design's claims stats/uncertainty.py's, the very functions the real path uses; what
the model leaves out is orch itself (agent, sampler, store) and the real-time jitter of the
threaded zone. bench/decision runs both on the same seeds and prints how closely they agree
(seed by seed: the same claims, device times within a few seconds), then uses the model for
what the real path cannot afford: hundreds of seeds, so that a figure near its goal is told
from the noise of eight (one seed moves a median of eight by several hundredths).

The designs, as bench/decision's matrices have them:
- fixed: `order: as-written` (each config's repeats in a row), a 45 s timer before every run
  but the first, `repeat: 5`; Welch's test on the logs against the baseline, Holm over the
  comparisons (orch's report on a fixed design);
- decided: a warm-up run of the baseline (orch's default, `warmup` tokens, not measured),
  then round k runs the baseline and every config still undecided after rounds 0..k-1, in
  the written order, each run after the thermal cooldown (until the target, at most the old
  timer), at most `max` rounds.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from _phone_physics import Thermal, run_factor, token_ms
from scipy import stats

from orchestrator.run.decisions import DEFAULT_WARMUP
from orchestrator.stats.decision import DIFFERS, UNDECIDED, Block, Rule, decide, set_aside
from orchestrator.stats.uncertainty import compare, correct


@dataclass
class Replay:
    device_s: float
    claims: dict[str, float | None]       # config -> reported Δ% when it claims a difference
    rounds: dict[str, int]                # config -> rounds its decision rests on
    states: dict[str, str]                # config -> differs | equivalent | undecided
    aside: tuple[tuple[str, int, float], ...] = ()   # runs set aside as outliers


class ModelPhone:
    """The phone of bench/_phone.py without its thread: runs and waits, in simulated time."""

    def __init__(self, model: Any) -> None:
        self.cfg: dict[str, Any] = asdict(model)
        self.thermal = Thermal(self.cfg)
        self.count = 0

    def run(self, effect: float, tokens: int) -> float:
        """One run's tok/s (tokens / their summed time, the engine's summary)."""
        factor = run_factor(self.cfg, self.count)
        self.count += 1
        total = 0.0
        for _ in range(tokens):
            ms = token_ms(self.cfg, effect, factor, self.thermal.temp_c)
            self.thermal.token(ms)
            total += ms
        return tokens * 1000.0 / total


def fixed_claims(tps: dict[str, list[float]], baseline: str,
                 configs: list[str]) -> dict[str, float | None]:
    """The fixed design's claims, as orch's report makes them: Welch's test of each config
    against the baseline, Holm over the comparisons; config -> Δ% of those found to differ."""
    tests = correct([compare(tps[baseline], tps[c], paired=False) for c in configs])
    return {c: t.delta_pct for c, t in zip(configs, tests) if t.significant}


def fixed(model: Any, effects: dict[str, float], tokens: int, timer_s: float,
          repeat: int = 5) -> Replay:
    phone = ModelPhone(model)
    tps: dict[str, list[float]] = {}
    for index, (config, effect) in enumerate({"base": 0.0, **effects}.items()):
        for r in range(repeat):
            if index or r:
                phone.thermal.advance(timer_s)
            tps.setdefault(config, []).append(phone.run(effect, tokens))
    claims = fixed_claims(tps, "base", list(effects))
    return Replay(phone.thermal.clock_s, claims, {c: repeat for c in effects},
                  {c: DIFFERS if c in claims else UNDECIDED for c in effects})


def decided(model: Any, effects: dict[str, float], tokens: int, target_c: float,
            max_wait_s: float, rule: Rule, warmup: int = DEFAULT_WARMUP) -> Replay:
    phone = ModelPhone(model)
    values: dict[str, dict[int, float]] = {c: {} for c in ("base", *effects)}
    first = True
    if warmup:
        phone.run(0.0, warmup)         # the baseline's warm-up, as orch runs it: not kept
        first = False
    for k in range(rule.max):
        state = decide([Block(values["base"], {c: values[c] for c in effects})], rule)
        open_configs = [c for c in effects if not state[c].decided]
        if not open_configs:
            break
        for config in ("base", *open_configs):
            if not first:
                phone.thermal.cool_until(target_c, max_wait_s)
            first = False
            values[config][k] = phone.run(effects.get(config, 0.0), tokens)
    state = decide([Block(values["base"], {c: values[c] for c in effects})], rule)
    return Replay(phone.thermal.clock_s,
                  {c: d.delta_pct for c, d in state.items() if d.state == DIFFERS},
                  {c: d.n for c, d in state.items()}, {c: d.state for c, d in state.items()},
                  set_aside(state))


def rate_interval(hits: int, total: int) -> tuple[float, float]:
    """The 95% interval of a fraction measured over seeds (Wilson's, scipy's)."""
    ci = stats.binomtest(hits, total).proportion_ci(0.95, method="wilson")
    return float(ci.low), float(ci.high)
