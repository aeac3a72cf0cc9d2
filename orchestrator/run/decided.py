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
from orchestrator.db.store import Store
from orchestrator.run.decisions import (decision_name, decisions, needed, rule_of,
                                       stop_reason, warmup_cells, warmup_tokens)
from orchestrator.run.progress import Progress


def run_until_decided(store: Store, session_id: int, matrix: Any, seed: int | None,
                      run_cells: Callable[[list[Cell]], None], progress: Progress,
                      warm_up: Callable[[Cell], None]) -> str:
    """The session's rounds under the decision rule; returns why it stopped (the session's
    repeat_stop, the report's Method section). Before the first cell it runs (a --resume
    too: the device has idled since), the warm-up runs (run/decisions.py, warmup_cells)."""
    rule = rule_of(matrix)
    tokens = warmup_tokens(matrix)
    per_round = len(plan_cells(matrix, seed, range(0, 1)))
    k = 0
    while k < rule.max:
        state = decisions(store, session_id, matrix, before_round=k)
        cells = needed(plan_cells(matrix, seed, range(k, k + 1), first_order=k * per_round),
                       matrix, state)
        if not cells:
            break
        for cell in warmup_cells(cells, tokens) if k == 0 else []:
            name = decision_name(cell.model, cell.config)
            progress.note(f"warm-up: a {tokens}-token run of {name} before the first measured "
                          "cell (stored as `warmup`, never measured)")
            warm_up(cell)
        run_cells(cells)
        k += 1
        progress.note(f"decision after round {k}: " + "; ".join(
            f"{name} {d.shown(k + 1, rule)}"
            for name, d in decisions(store, session_id, matrix, before_round=k).items()))
    return stop_reason(decisions(store, session_id, matrix), rule, k, tokens)
