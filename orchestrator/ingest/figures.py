"""An imported run's kept token figures (RunRecord.token_stats) from its token rows as they are
stored, so write_run need not read 2M rows back (3 s of a 2M-row import) to compute them.

The rows are taken batch by batch as the recorder hands them to the store (write_batch), as
the values given to the insert, and turned into what the store gives back for them, the way
db/runs.py stat_tokens reads them: wall_ms in token order (NULL, i.e. None or NaN, as NaN),
the sequential float sums and counts of stall_ms and majflt over their non-NULL values (what
SQLite's SUM before 3.43 gives, and np.bincount's sum in token order otherwise), the exact
integer sum of read_bytes, and the last row's cache_hit_pct. statistics.token_figures is then
called with frames of stat_tokens' shape, so the statistics are the same code, not a copy.

Whatever the store could give back differently from the Python value is not modelled: a
REAL column's value other than a float, an int or None (a str, which SQLite may parse), -0.0
(SQLite keeps 0.0), ±inf; a read_bytes other than a non-negative int or None, or read_bytes
summing to 2^53 or more (stat_tokens sums them as floats then); a batch that is not the run's
next rows; stored rows of the run other than the rows seen. Then the figures are computed from
the stored rows as before (Runs.token_figures). tests/test_import_figures.py checks both
agree, on every fixture folder and on values chosen to differ.
"""
from __future__ import annotations

import array
from collections.abc import Sequence
from operator import itemgetter
from typing import Any

import numpy as np

from orchestrator.db.runs import Runs
from orchestrator.db.store import Store
from orchestrator.db.writes import TOKEN_KEYS
from orchestrator.run.recorder import RunRecorder

_AT = {name: TOKEN_KEYS.index(name) for name in
       ("run_id", "seq", "wall_ms", "stall_ms", "majflt", "read_bytes", "cache_hit_pct")}
_SUMMED = ("stall_ms", "majflt")           # stat_tokens' sequential per-run sums
_FLOAT_TYPES = frozenset((float, int, type(None)))    # REAL columns: an int reads back float
_EXACT = 2 ** 53                           # ints (and integer sums) exact as doubles below this


class TokenFigures:
    """The token columns of one run's stored rows the statistics read, accumulated batch by
    batch (add), in bounded memory: one float per row (wall_ms), the rest as running sums."""

    def __init__(self, run_id: int, capacity: int = 1 << 16) -> None:
        self.run_id = run_id
        self.rows = 0
        self.regular = True                # False: compute from the stored rows instead
        # grown by doubling (add): its pages never written are never resident
        self._wall = np.empty(max(capacity, 1))
        self._sum = dict.fromkeys(_SUMMED, 0.0)
        self._count = dict.fromkeys(_SUMMED, 0)
        self._bytes_sum, self._bytes_count = 0, 0
        self._last_hit = np.nan

    def add(self, batch: Sequence[tuple[Any, ...]]) -> None:
        """Rows in TOKEN_KEYS order, as they were inserted (after the previous batch)."""
        if not self.regular or not batch:
            return
        n, first, last = len(batch), batch[0], batch[-1]
        # the recorder numbers a run's rows 0, 1, ... in the order it appends them; the store
        # took the batch, so its seqs are distinct (the primary key): a batch from the next
        # seq to n - 1 after it is that run's next n rows, in order. Checked at the ends only:
        # a check of every row would cost ~0.15 s of a 2M-row import, a twentieth of the 3 s
        # this saves
        if (first[_AT["run_id"]], last[_AT["run_id"]]) != (self.run_id, self.run_id) or \
                (first[_AT["seq"]], last[_AT["seq"]]) != (self.rows, self.rows + n - 1):
            self.regular = False
            return
        wall = _floats(batch, _AT["wall_ms"])
        summed = [_floats(batch, _AT[c]) for c in _SUMMED]
        hit = _floats(batch[-1:], _AT["cache_hit_pct"])
        read = _int_sum(batch, _AT["read_bytes"])
        if wall is None or hit is None or read is None or any(s is None for s in summed):
            self.regular = False
            return
        if self.rows + n > len(self._wall):      # more rows than it holds: doubled
            grown = np.empty(max(2 * len(self._wall), self.rows + n))
            grown[:self.rows] = self._wall[:self.rows]
            self._wall = grown
        self._wall[self.rows:self.rows + n] = wall
        for name, values in zip(_SUMMED, summed):
            assert values is not None
            kept = values[~np.isnan(values)]        # NULL (None, NaN) is left out by SUM
            if len(kept):
                # one addition after the other from the running sum (np.add.accumulate, not
                # np.sum's pairwise sum): the order SQLite's SUM and np.bincount add in
                self._sum[name] = float(np.add.accumulate(
                    np.concatenate(([self._sum[name]], kept)))[-1])
                self._count[name] += len(kept)
        total, count = read
        self._bytes_sum += total
        self._bytes_count += count
        if self._bytes_sum >= _EXACT:
            self.regular = False
            return
        self._last_hit = float(hit[-1])
        self.rows += n

    def figures(self, store: Store) -> dict[str, Any]:
        """statistics.token_figures of the run: from what was accumulated when every stored
        row was seen and modelled, else from the stored rows (Runs.token_figures)."""
        runs = Runs(store)
        # the stored rows are the ones seen: seqs 0 .. rows - 1 were each stored before they
        # were seen, so another row of the run would make the count differ (a count over the
        # primary key, ~0.1 s of 2M rows against the 3 s of reading them)
        if not self.regular or not self.rows or runs.token_count(self.run_id) != self.rows:
            return runs.token_figures(self.run_id)
        import pandas as pd

        from orchestrator.stats.statistics import token_figures

        # the frames stat_tokens gives for one run when SQL summed stall_ms and majflt (and
        # read_bytes): the figures do not depend on which of its shapes it is
        tokens = pd.DataFrame({"run_id": np.full(self.rows, self.run_id, dtype=np.int64),
                               "wall_ms": self._wall[:self.rows]})
        totals = pd.DataFrame({"_last_hit": [self._last_hit]},
                              index=pd.Index([self.run_id], name="run_id"), dtype=float)
        totals["_read_bytes"] = [float(self._bytes_sum) if self._bytes_count else np.nan]
        for name in _SUMMED:
            totals[f"_{name}_count"] = [float(self._count[name])]
            totals[f"_{name}_sum"] = [self._sum[name] if self._count[name] else np.nan]
        return token_figures(tokens, totals)


def watch(recorder: RunRecorder) -> TokenFigures:
    """A TokenFigures given every batch of token rows the recorder stores from now on
    (RunRecorder.on_stored: the tuples write_batch inserted, as they were), whatever
    RunRecorder subclass the importer is given (tests/test_import_atomic.py gives failing and
    slow ones)."""
    figures = TokenFigures(recorder.run_id)
    if recorder.stored_lines or recorder.token_seq:   # rows stored before are not seen here
        figures.regular = False
    recorder.on_stored = figures.add
    return figures


def _floats(batch: Sequence[tuple[Any, ...]], at: int) -> np.ndarray | None:
    """A REAL column's values as the store reads them back (NULL, i.e. None or NaN, as NaN),
    or None when one could read back otherwise than modelled (see the module docstring)."""
    values = list(map(itemgetter(at), batch))   # a list first: array.array takes it faster
    try:
        # floats and ints only (array.array refuses None and str), as doubles: SQLite's REAL
        # affinity makes an int the double nearest to it, as Python does
        out = np.frombuffer(array.array("d", values))
    except TypeError:
        if values.count(None) == len(values):
            return np.full(len(values), np.nan)        # a column the CSV does not have
        if not set(map(type, values)) <= _FLOAT_TYPES:
            return None
        out = np.array(values, dtype=float)            # None -> NaN
    if np.isinf(out).any() or (np.signbit(out) & (out == 0)).any():
        return None
    return out


def _int_sum(batch: Sequence[tuple[Any, ...]], at: int) -> tuple[int, int] | None:
    """(the sum, the count) of an INTEGER column's non-NULL values, or None when one of them
    is not a non-negative int (a float, which SQLite may keep as REAL; a negative value,
    which makes stat_tokens sum them as floats)."""
    get = itemgetter(at)
    try:
        # an int only if every value is one (a float makes it a float); None or a str raise
        total, count = sum(map(get, batch)), len(batch)
        low = min(map(get, batch))
    except TypeError:
        values = [v for v in map(get, batch) if v is not None]
        if not values:
            return 0, 0
        try:
            total, count, low = sum(values), len(values), min(values)
        except TypeError:
            return None
    if type(total) is not int or low < 0:
        return None
    return total, count
