"""Expert-cache replay (results/replay.py) against docs/routes.md §5: the published Gemma curve
cell by cell, and small hand-worked traces for each rule of the semantics."""
from __future__ import annotations

import re
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import pandas as pd
import pytest

from orchestrator.results.replay import replay, token_cycle_mib

TRACE = Path(__file__).parent / "fixtures/bigmoe/2026-07-15-route-trace/gemma.route.csv"
MIB = 2 ** 20
POLICIES = ("belady", "lru", "lfu", "layer", "layerlfu")
# docs/routes.md §4, as published: budget MiB -> per policy (decode hit %, MiB read)
ORACLE = """
250  | 29.275 / 66992.5 | 0.000 / 92362.0 | 18.433 / 76378.5 | 36.024 / 61360.5 | 36.024 / 61360.5
500  | 48.220 / 50682.7 | 0.000 / 92362.0 | 30.525 / 66004.9 | 36.024 / 61360.5 | 36.024 / 61360.5
750  | 58.051 / 42189.4 | 35.438 / 61867.7 | 38.993 / 58640.1 | 37.539 / 60164.5 | 38.802 / 59167.3
1000 | 65.699 / 35567.3 | 36.076 / 61308.0 | 45.755 / 52780.8 | 42.951 / 55471.6 | 47.726 / 51305.9
1500 | 74.857 / 27627.1 | 51.081 / 48243.0 | 56.411 / 43583.3 | 54.983 / 45113.4 | 59.757 / 40863.3
2000 | 80.569 / 22670.1 | 62.157 / 38651.3 | 64.089 / 36947.1 | 63.950 / 37324.7 | 67.617 / 34052.6
2500 | 85.109 / 18733.4 | 67.821 / 33762.5 | 70.295 / 31552.6 | 69.896 / 32177.0 | 73.741 / 28793.5
3000 | 88.633 / 15672.2 | 73.099 / 29175.9 | 75.486 / 27069.3 | 74.800 / 27917.0 | 78.064 / 25042.3
4000 | 92.908 / 11967.9 | 81.910 / 21539.7 | 83.433 / 20239.0 | 82.161 / 21530.2 | 84.349 / 19581.9
6000 | 96.424 / 8897.3  | 93.273 / 11671.5 | 93.585 / 11398.6 | 92.309 / 12659.9 | 92.895 / 12124.2
8000 | 96.424 / 8897.3  | 96.233 / 9070.7  | 96.233 / 9070.7  | 95.521 / 9744.0  | 95.586 / 9679.9
"""


def published(value: float, places: int) -> str:
    """Half away from zero at the published precision (docs/routes.md §2)."""
    return str(Decimal(repr(value)).quantize(Decimal(1).scaleb(-places), ROUND_HALF_UP))


def oracle() -> dict[tuple[int, str], tuple[str, str]]:
    cells = {}
    for line in ORACLE.strip().splitlines():
        budget, *values = (part.strip() for part in line.split("|"))
        for policy, value in zip(POLICIES, values):
            hit, read = value.split(" / ")
            cells[int(budget), policy] = (hit, read)
    return cells


@pytest.fixture(scope="module")
def gemma() -> tuple[pd.DataFrame, dict[int, int]]:
    sizes = {int(m[1]): int(m[2]) for m in re.finditer(r"^# layer=(\d+) expert_bytes=(\d+)",
                                                        TRACE.read_text(), re.MULTILINE)}
    return pd.read_csv(TRACE, comment="#"), sizes


@pytest.mark.slow
def test_gemma_replay_reproduces_the_published_curve(gemma):
    rows, sizes = gemma
    expected = oracle()
    budgets = sorted({budget for budget, _ in expected})
    got = {(r["budget_mib"], r["policy"]): (published(r["hit_pct_decode"], 3),
                                            published(r["read_mib"], 1))
           for r in replay(rows, sizes, budgets, POLICIES)}
    wrong = {cell: (got[cell], want) for cell, want in expected.items() if got[cell] != want}
    assert not wrong, f"(budget, policy): (got, published) {wrong}"


def test_gemma_token_cycle_and_lru_collapse_below_it(gemma):
    rows, sizes = gemma
    cycle = token_cycle_mib(sizes, k=6)
    assert round(cycle) == 676
    # Exactly 0 needs B <= T - k x the largest expert (650.4 MiB): just under T, LRU only
    # evicts some of a layer's previous k entries before that layer comes round again
    below = cycle - 6 * max(sizes.values()) / MIB
    lru = replay(rows, sizes, [250, 500, below, cycle], ["lru"])
    assert [r["hit_pct_decode"] for r in lru[:3]] == [0.0, 0.0, 0.0]
    assert published(lru[3]["hit_pct_decode"], 3) == "35.438"   # T holds a cycle: as at 750
    # every lookup the prefill makes is a miss, so the cumulative rate is the lower one
    assert all(r["hit_pct_cum"] < r["hit_pct_decode"] for r in lru[3:])


def test_gemma_random_is_seeded_and_bounded_by_lru_when_all_fits(gemma):
    rows, sizes = gemma
    first = replay(rows, sizes, [1000, 8000], ["random"], seed=7)
    assert first == replay(rows, sizes, [1000, 8000], ["random"], seed=7)
    assert first != replay(rows, sizes, [1000, 8000], ["random"], seed=8)
    huge = replay(rows, sizes, [1e6], ["random", "lru", "belady"])   # nothing is ever evicted
    assert len({(r["hit_pct_decode"], r["read_mib"]) for r in huge}) == 1


def trace(prefill: list[int], decode: list[int], layer: int = 0) -> pd.DataFrame:
    """A one-layer trace with k = 1: prefill steps first, then decode steps."""
    experts = prefill + decode
    return pd.DataFrame({"phase": [0] * len(prefill) + [1] * len(decode),
                         "step": range(len(experts)), "layer": layer, "slot": 0,
                         "expert": experts})


def one(rows: pd.DataFrame, policy: str, budget_mib: float, sizes=None) -> dict:
    return replay(rows, sizes or {0: MIB}, [budget_mib], [policy])[0]


def test_belady_evicts_the_furthest_next_use_and_lru_thrashes():
    rows = trace([], [0, 1, 2, 0, 1, 2])
    # belady: after 2, evict 1 (next use 4, 0's is 3); after 1, evict 0 (never used again)
    assert one(rows, "belady", 2) == {"budget_mib": 2, "policy": "belady",
                                      "hit_pct_cum": pytest.approx(100 / 3),
                                      "hit_pct_decode": pytest.approx(100 / 3), "read_mib": 4.0}
    assert one(rows, "lru", 2)["hit_pct_decode"] == 0.0


def test_prefill_batch_stays_over_budget_and_repeats_refresh_recency():
    # the prefill batch [0, 1, 2, 0] is 3 lookups (the repeat is not one) and, all protected,
    # stays resident over a 2 MiB budget. Decode 1 hits; the LRU victim is then 2, not 0,
    # because 0's repeat refreshed it; so decode 0 hits and decode 2 misses.
    result = one(trace([0, 1, 2, 0], [1, 0, 2]), "lru", 2)
    assert result["hit_pct_decode"] == pytest.approx(200 / 3)
    assert result["hit_pct_cum"] == pytest.approx(200 / 6)
    assert result["read_mib"] == 4.0


def test_lfu_keeps_the_frequent_entry_where_lru_drops_the_oldest():
    # 0 is looked up in 2 batches; when 2 arrives LFU evicts 1 (frequency 1), LRU evicts 0
    rows = trace([], [0, 0, 1, 2, 0])
    assert one(rows, "lfu", 2)["hit_pct_decode"] == pytest.approx(40.0)    # batches 1 and 4
    assert one(rows, "lru", 2)["hit_pct_decode"] == pytest.approx(20.0)    # only batch 1


def test_partitioned_cache_caps_each_layer_and_skips_streamless_layers():
    sizes = {0: MIB, 1: MIB, 2: 0}          # layer 2 has no streamed experts
    rows = pd.concat([trace([], [0, 1, 0, 1], layer=0), trace([], [5, 5], layer=1),
                      trace([], [3, 4, 3, 4], layer=2)])
    # 3 layers in the preamble: each gets floor(6 MiB / 3) = 2 MiB; layer 0's 2 experts fit
    layer = one(rows, "layer", 6, sizes)
    assert layer["hit_pct_decode"] == pytest.approx(300 / 6)     # 0, 1 twice each, 5 twice
    assert layer["read_mib"] == 3.0
    # at 3 MiB each layer gets 1 MiB: layer 0 thrashes, layer 1 still hits
    assert one(rows, "layer", 3, sizes)["hit_pct_decode"] == pytest.approx(100 / 6)


def test_unknown_policy_is_an_error():
    with pytest.raises(ValueError, match="fifo"):
        replay(trace([], [0]), {0: MIB}, [1], ["fifo"])
