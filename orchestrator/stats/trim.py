"""Leaving out each run's first N tokens (`--trim N`, a matrix's or design file's `trim:`).

A run's first tokens are slower for reasons the benchmark usually does not mean to measure
(the expert cache filling, page-cache and zram state from before the run), so per-token
statistics can be asked for over the tokens after them. The headline decode mean (n / Σ decode
s over every token, the rate a study publishes) and the engine's own summary figures (prefill,
TTFT, cache hit, flash read, stall) describe the whole run and are never trimmed; the mean
over the tokens after the trim is a figure of its own (`mean_after_trim`), shown beside it.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.stats.figures import PER_TOKEN

if TYPE_CHECKING:   # the functions take frames; trim_words (the terminal's captions) needs none
    import pandas as pd


def check_trim(trim: int) -> int:
    """`trim` as an int, refusing a negative or non-integral value (a caller's mistake)."""
    if isinstance(trim, bool) or int(trim) != trim or trim < 0:
        raise ValueError(f"trim must be a non-negative integer, not {trim!r}")
    return int(trim)


def drop_first(tokens: pd.DataFrame, trim: int) -> pd.DataFrame:
    """Each run's rows after its first `trim`, by token order: `seq` when the frame has it
    (the store's row order in the engine's CSV), else the frame's own row order. The rows
    kept stay in the frame's order, so a frame in token order stays in token order."""
    trim = check_trim(trim)
    if not trim or not len(tokens):
        return tokens
    by_run = tokens.groupby("run_id", sort=False)
    if "seq" in tokens:
        position = by_run["seq"].rank(method="first").to_numpy() - 1
    else:
        position = by_run.cumcount().to_numpy()
    return tokens[position >= trim]


def trim_words(trim: int) -> str:
    """How a caption states the trim: "first 50 tokens left out", or "all tokens"."""
    if not trim:
        return "all tokens"
    return f"first {trim} token{'s' if trim != 1 else ''} left out"


# the per-token figures a trim changes: stats/figures.py's PER_TOKEN


def trimmed(whole: pd.DataFrame, cut: pd.DataFrame, trim: int) -> pd.DataFrame:
    """`whole` (token statistics of every token) with its PER_TOKEN columns from `cut` (the
    same statistics of the tokens after the first `trim`); a run with no token left has them
    NaN and n 0, never the whole run's. steady_from_token keeps counting every token. The
    stall, flash read, fault and cache-hit figures stay the whole run's, as the engine's
    summary gives them."""
    cut = cut.reindex(whole.index)
    out = whole.copy()
    for key in PER_TOKEN:
        out[key] = cut[key]
    out["mean_after_trim"] = cut["mean"]     # beside the whole run's mean, never instead
    out["n"] = out["n"].fillna(0)
    out["steady_from_token"] = out["steady_from_token"] + trim
    return out
