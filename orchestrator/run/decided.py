"""`repeat: {until: decided, equivalence: 2%, max: 10}`: rounds of the configs whose comparison
with their baseline is still undecided, until each is decided or `max` rounds have run
(the rule: stats/decision.py; docs/decision.md).

Round k runs, as one interleaved pass (plan_cells' round k), every config still undecided
after rounds 0..k-1 and, for each model with one, its baseline (the pairs need it); each cell
waits the matrix's cooldown as any other. The decisions are recomputed from the stored runs
before every round (the store is the truth): `--resume` replays the same rounds, completes
the cells of them that are not ok yet, and goes on from there.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from orchestrator.config.plan import Cell, plan_cells
from orchestrator.db.runs import Runs
from orchestrator.db.store import Store
from orchestrator.run.progress import Progress
from orchestrator.stats.decision import Block, Decision, Rule, decide
from orchestrator.stats.status import Status

DEFAULT_EQUIVALENCE = 2.0


def rule_of(matrix: Any) -> Rule:
    policy = matrix.repeat
    eq = DEFAULT_EQUIVALENCE if policy.equivalence is None else policy.equivalence
    return Rule(max=policy.max, equivalence=eq, first=policy.min)


def _name(model: str, config: str) -> str:
    return config if (model or "-") == "-" else f"{model}/{config}"


def decisions(store: Store, session_id: int, matrix: Any,
              before_round: int | None = None) -> dict[str, Decision]:
    """Each (model, config)'s decision against its model's baseline, from the session's ok
    runs of the rounds before `before_round` (all rounds: None), one block of rounds per
    model."""
    values: dict[tuple[str, str], dict[int, float]] = {}
    rows = [r for r in Runs(store).current(session=session_id)
            if r.status == Status.OK and (before_round is None or r.repeat_index < before_round)]
    figures = Runs(store).figures(rows)
    for r in rows:
        mean = figures[r.id].mean if figures.get(r.id) is not None else None
        if mean is not None and mean > 0:
            values.setdefault((r.model or "-", r.config), {})[r.repeat_index] = float(mean)
    blocks = []
    for model in list(matrix.models) or ["-"]:
        base = matrix.baseline_for(model)
        blocks.append(Block(values.get((model, base), {}),
                            {_name(model, c): values.get((model, c), {})
                             for c in _configs(matrix) if c != base}))
    return decide(blocks, rule_of(matrix))


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


def run_until_decided(store: Store, session_id: int, matrix: Any, seed: int | None,
                      run_cells: Callable[[list[Cell]], None], progress: Progress) -> str:
    """The session's rounds under the decision rule; returns why it stopped (the session's
    repeat_stop, the report's Method section)."""
    rule = rule_of(matrix)
    per_round = len(plan_cells(matrix, seed, range(0, 1)))
    k = 0
    while k < rule.max:
        state = decisions(store, session_id, matrix, before_round=k)
        cells = needed(plan_cells(matrix, seed, range(k, k + 1), first_order=k * per_round),
                       matrix, state)
        if not cells:
            break
        run_cells(cells)
        k += 1
        progress.note(f"decision after round {k}: " + "; ".join(
            f"{name} {d.shown(k + 1, rule)}"
            for name, d in decisions(store, session_id, matrix, before_round=k).items()))
    return stop_reason(decisions(store, session_id, matrix), rule, k)


def stop_reason(state: dict[str, Decision], rule: Rule, rounds: int) -> str:
    """One line: the rule, then per config its decision, the rounds it took and why."""
    head = (f"until decided (Pocock over looks {rule.first}..{rule.max}, Holm over "
            f"{len(state)}, equivalence ±{rule.equivalence:g}% by TOST, alpha "
            f"{rule.alpha:g}): {rounds} rounds")
    parts = []
    for name, d in state.items():
        figure = "" if d.delta_pct is None else (
            f" {d.delta_pct:+.1f}% [{d.low_pct:+.1f}%, {d.high_pct:+.1f}%]")
        parts.append(f"{name} {d.state}{figure}, {d.why}")
    return head + ("; " + "; ".join(parts) if parts else "")
