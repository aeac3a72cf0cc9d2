"""The decision rule's state of a session (`repeat: {until: decided}`; the rule:
stats/decision.py, docs/decision.md): each config's decision from its ok runs, which cells a
round still needs, and why the session stopped. One owner for every reader: the session's
loop (run/decided.py) and every view of a decided session (results/ab.py) take their
decisions from here, so a document never gives a second answer.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from orchestrator.config.plan import Cell
from orchestrator.db.runs import Runs
from orchestrator.db.store import Store
from orchestrator.stats.decision import (OUTLIER_LEVEL, Block, Decision, Rule, decide,
                                         set_aside)
from orchestrator.stats.status import Status

DEFAULT_EQUIVALENCE = 2.0
DEFAULT_WARMUP = 16        # tokens: enough to bring a phone's zone up to its cooldown target


def rule_of(matrix: Any) -> Rule:
    policy = matrix.repeat
    eq = DEFAULT_EQUIVALENCE if policy.equivalence is None else policy.equivalence
    return Rule(max=policy.max, equivalence=eq, first=policy.min)


def warmup_tokens(matrix: Any) -> int:
    """Tokens of the warm-up run before round 0 (`repeat: {until: decided, warmup: N}`; 0:
    none). Why: every later run starts after the cooldown, at its target; the session's
    first would start from the idle device, colder (and with colder caches), and its
    round's pairs would carry that difference into every comparison."""
    tokens = matrix.repeat.warmup
    return DEFAULT_WARMUP if tokens is None else int(tokens)


def warmup_cells(cells: list[Cell], tokens: int) -> list[Cell]:
    """The warm-up cells: each model's first cell of the round, `tokens` long, repeat -1
    (stored with status `warmup`, which no figure counts). One per model: the device's
    temperature is shared, but each model's pages come cold from storage."""
    if tokens <= 0:
        return []
    firsts: dict[str, Cell] = {}
    for cell in cells:
        firsts.setdefault(cell.model, cell)
    return [replace(c, repeat=-1, order=-1, tokens=tokens) for c in firsts.values()]


def _name(model: str, config: str) -> str:
    return config if (model or "-") == "-" else f"{model}/{config}"


def decisions(store: Store, session_id: int, matrix: Any,
              before_round: int | None = None) -> dict[str, Decision]:
    """Each (model, config)'s decision against its model's baseline, from the session's ok
    runs of the rounds before `before_round` (all rounds: None)."""
    rows = [r for r in Runs(store).current(session=session_id)
            if r.status == Status.OK and (before_round is None or r.repeat_index < before_round)]
    return decisions_of(rows, Runs(store).figures(rows), matrix)


def decisions_of(rows: Iterable[Any], figures: Mapping[int, Any],
                 matrix: Any) -> dict[str, Decision]:
    """The decisions of these runs (RunRow-like: id, model, config, repeat_index, status;
    `figures`: run id -> its figures), one block of rounds per model: what the session ran on,
    and what every view of a decided session shows (results/ab.py), so the two never
    differ. Only ok runs with a positive mean take part."""
    values: dict[tuple[str, str], dict[int, float]] = {}
    for r in rows:
        found = figures.get(r.id)
        mean = found.mean if found is not None else None
        if r.status == Status.OK and mean is not None and mean > 0:
            values.setdefault((r.model or "-", r.config), {})[r.repeat_index] = float(mean)
    blocks = []
    for model in list(matrix.models) or ["-"]:
        base = matrix.baseline_for(model)
        blocks.append(Block(values.get((model, base), {}),
                            {_name(model, c): values.get((model, c), {})
                             for c in _configs(matrix) if c != base}))
    return decide(blocks, rule_of(matrix))


def is_decided(matrix: Any) -> bool:
    """Whether the matrix ran under the decision rule (`repeat: {until: decided}`)."""
    return matrix is not None and getattr(matrix.repeat, "until", None) == "decided"


def decision_name(model: str | None, config: str) -> str:
    """The name a decision goes by: "model/config" (a matrix without models: the config)."""
    return _name(model or "-", config)


def _configs(matrix: Any) -> list[str]:
    builds = list(matrix.build_binaries())
    names = matrix.config_names()
    return [f"{n}@{b}" for n in names for b in builds] if builds else names


def needed(cells: list[Cell], matrix: Any, decided: dict[str, Decision]) -> list[Cell]:
    """The round's cells still needed: undecided configs, and the baseline of each model
    that still has one."""
    open_models = {c.model for c in cells
                   if c.config != matrix.baseline_for(c.model)
                   and not decided[_name(c.model, c.config)].decided}
    return [c for c in cells if c.model in open_models and (
        c.config == matrix.baseline_for(c.model) or not decided[_name(c.model, c.config)].decided)]


def stop_reason(state: dict[str, Decision], rule: Rule, rounds: int, warmup: int = 0) -> str:
    """One line: the rule, then per config its decision, the rounds it took and why, and the
    runs set aside as outliers."""
    head = (f"until decided (Pocock over looks {rule.first}..{rule.max}, Holm over "
            f"{len(state)}, equivalence ±{rule.equivalence:g}% by TOST, alpha "
            f"{rule.alpha:g}, outlier runs set aside at {OUTLIER_LEVEL:g}"
            + (f", a {warmup}-token warm-up run of each model first" if warmup else "")
            + f"): {rounds} rounds")
    parts = []
    for name, d in state.items():
        figure = "" if d.delta_pct is None else (
            f" {d.delta_pct:+.1f}% [{d.low_pct:+.1f}%, {d.high_pct:+.1f}%]")
        parts.append(f"{name} {d.state}{figure}, {d.why}")
    aside = set_aside(state)
    if aside:
        parts.append("set aside as outliers: " + ", ".join(
            f"{series} round {k + 1} ({residual:+.1f}% from its fit)"
            for series, k, residual in aside))
    return head + ("; " + "; ".join(parts) if parts else "")
