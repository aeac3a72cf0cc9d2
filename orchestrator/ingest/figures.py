"""An imported run's token columns gathered as the recorder stores its rows, so that its
figures (db/figures.py, stats/statistics.py compute) need not read 2M rows back (3 s of a
2M-row import).

The rows are taken batch by batch as the recorder hands them to the store (write_batch): the
values given to the insert, NULL (None) as NaN. They are used only when every stored row of
the run was seen, in order (the recorder numbers a run's rows 0, 1, ... as it appends them,
and a count over the primary key confirms the store holds exactly those); otherwise, or when
a value is not a number, the figures are computed from the stored rows instead.
"""
from __future__ import annotations

from collections.abc import Sequence
from operator import itemgetter
from typing import Any

import numpy as np

from orchestrator.db.figures import TOKEN_COLUMNS
from orchestrator.db.writes import TOKEN_KEYS
from orchestrator.run.recorder import RunRecorder

_AT = {name: TOKEN_KEYS.index(name) for name in ("run_id", "seq")}
_VALUES = [c for c in TOKEN_COLUMNS if c not in ("run_id", "seq")]
_GET = {c: itemgetter(TOKEN_KEYS.index(c)) for c in _VALUES}


class TokenColumns:
    """The token columns of one run's stored rows the figures read (db/figures.py
    TOKEN_COLUMNS), accumulated batch by batch (add) as float arrays."""

    def __init__(self, run_id: int) -> None:
        self.run_id = run_id
        self.rows = 0
        self.regular = True                # False: compute from the stored rows instead
        self._chunks: dict[str, list[np.ndarray]] = {c: [] for c in _VALUES}

    def add(self, batch: Sequence[tuple[Any, ...]]) -> None:
        """Rows in TOKEN_KEYS order, as they were inserted (after the previous batch)."""
        if not self.regular or not batch:
            return
        n, first, last = len(batch), batch[0], batch[-1]
        # the store took the batch, so its seqs are distinct (the primary key): a batch from
        # the next seq to n - 1 after it is the run's next n rows, in order (checked at the
        # ends only; `figures` counts the stored rows)
        if (first[_AT["run_id"]], last[_AT["run_id"]]) != (self.run_id, self.run_id) or \
                (first[_AT["seq"]], last[_AT["seq"]]) != (self.rows, self.rows + n - 1):
            self.regular = False
            return
        try:
            for column, get in _GET.items():
                self._chunks[column].append(np.fromiter(map(get, batch), dtype=float,
                                                        count=n))
        except (TypeError, ValueError):     # not a number: what the store keeps may differ
            self.regular = False
            return
        self.rows += n

    def tokens(self) -> Any:
        """The accumulated rows as db/figures.py read_tokens gives them."""
        import pandas as pd

        data: dict[str, Any] = {"run_id": np.full(self.rows, self.run_id, dtype=np.int64),
                                "seq": np.arange(self.rows, dtype=np.int64)}
        for column, chunks in self._chunks.items():
            data[column] = np.concatenate(chunks) if chunks else np.empty(0)
        return pd.DataFrame(data)

    def usable(self, stored_rows: int) -> bool:
        """Whether the accumulated rows are the run's stored rows (`stored_rows`: a count over
        the primary key, ~0.1 s of 2M rows against the 3 s of reading them)."""
        return self.regular and self.rows > 0 and stored_rows == self.rows


def watch(recorder: RunRecorder) -> TokenColumns:
    """A TokenColumns given every batch of token rows the recorder stores from now on
    (RunRecorder.on_stored: the tuples write_batch inserted, as they were), whatever
    RunRecorder subclass the importer is given (tests/test_import_atomic.py gives failing and
    slow ones)."""
    columns = TokenColumns(recorder.run_id)
    if recorder.stored_lines or recorder.token_seq:   # rows stored before are not seen here
        columns.regular = False
    recorder.on_stored = columns.add
    return columns
