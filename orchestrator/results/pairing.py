"""Whether two configs of a group are tested paired, and which runs make each round
(results/ab.py; the test itself: stats/uncertainty.py `compare`).

Two configs are paired when they ran in the same rounds, each round's two runs seeing the
same device state, so that the round-to-round drift cancels:
- a live session: its matrix's `order: interleaved`, or the two are one of its `pairs:`
  (rounds: the repeat index);
- an import: its design file's `pairs:` names them (rounds: the repeat index), or its
  design's `order:` puts their runs in rounds, A/B then B/A or A/B again (rounds: the
  consecutive two-run blocks of their joint order). An import's order guessed from file
  names is no evidence of rounds: without `order:` it is not read so.
Otherwise Welch's test compares them unpaired.
"""
from __future__ import annotations

from collections.abc import Hashable, Sequence

from orchestrator.config.design import Design
from orchestrator.config.matrix import Matrix
from orchestrator.db.rows import RunRow

Rounds = dict[Hashable, RunRow]     # round -> the run of one config in that round


def by_repeat(runs: Sequence[RunRow]) -> Rounds:
    return {(r.session_id, r.repeat_index or 0): r for r in runs}


def alternating(base: Sequence[RunRow], cand: Sequence[RunRow]
                ) -> tuple[Rounds, Rounds] | None:
    """The rounds of two configs whose runs, in their joint order, come in blocks of two
    holding one of each (A B | B A | A B ...); None when they do not."""
    if len(base) < 2 or len(base) != len(cand):
        return None                 # one run each is no evidence of rounds
    ids = {r.id for r in base}
    joint = sorted([*base, *cand], key=lambda r: (r.session_id, r.order_index or 0, r.id))
    b_rounds: Rounds = {}
    c_rounds: Rounds = {}
    for i in range(0, len(joint), 2):
        first, second = joint[i], joint[i + 1]
        if (first.id in ids) == (second.id in ids):
            return None
        for run in (first, second):
            (b_rounds if run.id in ids else c_rounds)[i // 2] = run
    return b_rounds, c_rounds


def declared(a: str, b: str, matrix: Matrix | None, design: Design | None) -> bool:
    """Whether the matrix's or the design's `pairs:` names the two as one pair."""
    if matrix is not None:
        return any(a in p and b in p for p in matrix.pairs)
    return design is not None and design.paired(a, b)


def rounds(base: Sequence[RunRow], cand: Sequence[RunRow], base_config: str, config: str,
           matrix: Matrix | None, design: Design | None) -> tuple[Rounds, Rounds] | None:
    """(baseline's rounds, candidate's rounds) when the two are tested paired, else None.
    `base` / `cand`: every run of each (failed ones too: a failed run still took its place
    in the order; the test drops its round)."""
    if declared(base_config, config, matrix, design) or \
            (matrix is not None and matrix.order == "interleaved"):
        return by_repeat(base), by_repeat(cand)
    if design is not None and matrix is None and design.order:
        return alternating(base, cand)
    return None
