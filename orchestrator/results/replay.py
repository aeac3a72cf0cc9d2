"""Offline expert-cache replay: what a cache of X MiB would give on a route trace.

Semantics are those of docs/routes.md §5 (the phone study's replay, validated against the
device): entries are (layer, expert) sized by the layer's expert_bytes; the access sequence is
one prefill batch per layer, then one decode batch per (step, layer); within a batch the first
occurrence of an entry is its one lookup (a hit if it was resident when the batch started) and
every occurrence refreshes its recency from a global counter; misses become resident at once;
eviction runs once after the batch and never takes an entry the batch touched.

The batch sequence is built once with numpy (`_Trace`); each (budget, policy) is then one pass
over plain Python lists, with a lazily invalidated heap of eviction candidates per cache.
"""
from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

MIB = 2 ** 20
GLOBAL_POLICIES = ("belady", "lru", "lfu")
PARTITIONED_POLICIES = {"layer": "lru", "layerlfu": "lfu"}   # per-layer cache -> its victim rule
POLICIES = (*GLOBAL_POLICIES, *PARTITIONED_POLICIES, "random")
_NEVER = math.inf     # next use of an entry no later batch contains


@dataclass(frozen=True)
class _Batch:
    layer: int
    decode: bool
    start: int                     # global counter value of the batch's first occurrence
    entries: list[int]             # distinct entries, in order of first occurrence
    recency: list[int]             # counter value of each entry's last occurrence in the batch
    next_use: list[float]          # index of the next batch holding the entry, or _NEVER


@dataclass(frozen=True)
class _Trace:
    batches: list[_Batch]
    entry_bytes: list[int]         # indexed by entry id = layer * n_expert + expert
    n_layer: int


def token_cycle_mib(layer_expert_bytes: dict[int, int], k: int) -> float:
    """T: the bytes one decoded token routes through (k experts in every layer), in MiB: the
    smallest budget that holds one token cycle. Global LRU's decode hit rate falls to exactly 0
    once the budget is about k experts under T (Gemma: T = 676.4, 0% at <= 654 MiB); just under
    T it evicts only some of a layer's previous entries before that layer comes round again."""
    return k * sum(layer_expert_bytes.values()) / MIB


def replay(rows: pd.DataFrame, layer_expert_bytes: dict[int, int], budgets_mib: Sequence[float],
           policies: Sequence[str], seed: int = 0) -> list[dict]:
    """Replay the trace `rows` (integer columns phase, step, layer, slot, expert) through every
    policy at every budget. One dict per (budget, policy), budgets outer: budget_mib, policy,
    hit_pct_cum (prefill lookups included; they always miss), hit_pct_decode, read_mib (all
    miss bytes, prefill included). Layers whose expert_bytes is 0 stream nothing: skipped.
    `layer_expert_bytes` holds every layer of the preamble: the partitioned policies give each
    of them floor(B / n_layer). `random` draws its victims from numpy's generator seeded `seed`."""
    unknown = [p for p in policies if p not in POLICIES]
    if unknown:
        raise ValueError(f"unknown cache policies {unknown}; known: {', '.join(POLICIES)}")
    trace = _build(rows, layer_expert_bytes)
    results = []
    for budget_mib in budgets_mib:
        budget = int(budget_mib * MIB)
        for policy in policies:
            hits, lookups, decode_hits, decode_lookups, read = _simulate(trace, policy, budget,
                                                                         seed)
            results.append({
                "budget_mib": budget_mib, "policy": policy,
                "hit_pct_cum": 100.0 * hits / lookups if lookups else math.nan,
                "hit_pct_decode": (100.0 * decode_hits / decode_lookups if decode_lookups
                                   else math.nan),
                "read_mib": read / MIB})
    return results


def _build(rows: pd.DataFrame, layer_expert_bytes: dict[int, int]) -> _Trace:
    streamed = sorted(layer for layer, size in layer_expert_bytes.items() if size > 0)
    cols = rows[["phase", "step", "layer", "slot", "expert"]].to_numpy(dtype=np.int64)
    cols = cols[np.isin(cols[:, 2], streamed)]
    phase, step, layer, slot, expert = cols.T
    n_expert = int(expert.max()) + 1 if len(expert) else 1
    pre, dec = phase == 0, phase == 1
    # prefill: (layer, step, slot); decode: (step, layer, slot). lexsort's last key is primary.
    pre_idx = np.flatnonzero(pre)[np.lexsort((slot[pre], step[pre], layer[pre]))]
    dec_idx = np.flatnonzero(dec)[np.lexsort((slot[dec], layer[dec], step[dec]))]
    order = np.concatenate([pre_idx, dec_idx])
    seq_entry = (layer * n_expert + expert)[order]
    seq_layer, seq_decode = layer[order], phase[order] == 1
    # a batch = a run of equal (phase, layer) in prefill, equal (step, layer) in decode
    key_step = np.where(seq_decode, step[order], -1)
    new = np.ones(len(order), dtype=bool)
    new[1:] = ((np.diff(seq_layer) != 0) | (np.diff(key_step) != 0)
               | (np.diff(seq_decode.astype(np.int8)) != 0))
    seq_batch = np.cumsum(new) - 1
    starts = np.flatnonzero(new)

    # one row per (batch, entry): first and last occurrence, then the next batch holding it
    n_entries = (max(layer_expert_bytes, default=0) + 1) * n_expert
    pair = seq_batch * n_entries + seq_entry
    _, first = np.unique(pair, return_index=True)
    _, last_rev = np.unique(pair[::-1], return_index=True)
    last = len(order) - 1 - last_rev
    p_batch, p_entry = seq_batch[first], seq_entry[first]
    by_entry = np.lexsort((p_batch, p_entry))
    next_use = np.full(len(first), _NEVER)
    same = p_entry[by_entry][1:] == p_entry[by_entry][:-1]
    next_use[by_entry[:-1][same]] = p_batch[by_entry][1:][same]
    by_first = np.argsort(first, kind="stable")        # batches in order, entries by first use

    entries, recency = p_entry[by_first].tolist(), last[by_first].tolist()
    nexts = next_use[by_first].tolist()
    bounds = np.searchsorted(p_batch[by_first], np.arange(len(starts) + 1)).tolist()
    batches = [_Batch(layer=int(seq_layer[s]), decode=bool(seq_decode[s]), start=int(s),
                      entries=entries[lo:hi], recency=recency[lo:hi], next_use=nexts[lo:hi])
               for s, lo, hi in zip(starts.tolist(), bounds[:-1], bounds[1:])]
    entry_bytes = [0] * n_entries
    for lay in streamed:
        entry_bytes[lay * n_expert:(lay + 1) * n_expert] = [layer_expert_bytes[lay]] * n_expert
    return _Trace(batches=batches, entry_bytes=entry_bytes, n_layer=len(layer_expert_bytes))


def _simulate(trace: _Trace, policy: str, budget: int,
              seed: int) -> tuple[int, int, int, int, int]:
    """One pass: (hits, lookups, decode hits, decode lookups, bytes read)."""
    if policy == "random":
        return _simulate_random(trace, budget, seed)
    partitioned = policy in PARTITIONED_POLICIES
    rule = PARTITIONED_POLICIES.get(policy, policy)
    cap = budget // trace.n_layer if partitioned else budget
    size = trace.entry_bytes
    resident = [False] * len(size)
    recency = [-1] * len(size)       # unique per update, so it also versions the heap items
    frequency = [0] * len(size)
    heaps: dict[int, list[tuple[float, int, int]]] = {}   # cache (a layer, or 0) -> candidates
    held: dict[int, int] = {}                                # cache -> resident bytes
    hits = lookups = decode_hits = decode_lookups = read = 0
    for batch in trace.batches:
        cache = batch.layer if partitioned else 0
        heap = heaps.setdefault(cache, [])
        held_bytes = held.get(cache, 0)
        for entry, rec, next_use in zip(batch.entries, batch.recency, batch.next_use):
            if resident[entry]:
                hits += 1
                decode_hits += batch.decode
            else:
                read += size[entry]
                held_bytes += size[entry]
                resident[entry] = True
            lookups += 1
            decode_lookups += batch.decode
            recency[entry] = rec
            frequency[entry] += 1
            # the victim is the smallest item: (rule's key, recency, entry)
            primary = (0 if rule == "lru" else frequency[entry] if rule == "lfu"
                       else -next_use)   # belady: furthest next use first, never used = -inf
            heapq.heappush(heap, (primary, rec, entry))
        protected = []
        while held_bytes > cap and heap:
            item = heapq.heappop(heap)
            _, rec, entry = item
            if not resident[entry] or recency[entry] != rec:
                continue                 # stale: the entry was evicted or touched since
            if rec >= batch.start:       # touched by this batch: never the victim
                protected.append(item)
                if rule == "lru":        # every remaining item is newer, so protected too
                    break
                continue
            resident[entry] = False
            held_bytes -= size[entry]
        for item in protected:
            heapq.heappush(heap, item)
        held[cache] = held_bytes
    return hits, lookups, decode_hits, decode_lookups, read


def _simulate_random(trace: _Trace, budget: int, seed: int) -> tuple[int, int, int, int, int]:
    """The baseline: a global cache whose victim is a uniformly random unprotected entry."""
    rng = np.random.default_rng(seed)
    size = trace.entry_bytes
    slot_of = [-1] * len(size)       # index in `pool` of a resident entry, else -1
    touched = [-1] * len(size)       # index of the last batch that touched the entry
    pool: list[int] = []
    hits = lookups = decode_hits = decode_lookups = read = held = 0
    for index, batch in enumerate(trace.batches):
        for entry in batch.entries:
            if slot_of[entry] >= 0:
                hits += 1
                decode_hits += batch.decode
            else:
                read += size[entry]
                held += size[entry]
                slot_of[entry] = len(pool)
                pool.append(entry)
            lookups += 1
            decode_lookups += batch.decode
            touched[entry] = index
        evictable = len(pool) - len(batch.entries)
        while held > budget and evictable > 0:
            at = int(rng.integers(len(pool)))
            victim = pool[at]
            if touched[victim] == index:
                continue                 # rejection keeps the draw uniform over the others
            last = pool.pop()            # swap-remove: move the last entry into the hole
            if last != victim:
                pool[at] = last
                slot_of[last] = at
            slot_of[victim] = -1
            held -= size[victim]
            evictable -= 1
    return hits, lookups, decode_hits, decode_lookups, read
