"""An import keeps each run's token figures (RunRecord.token_stats) computed from its rows as
they were stored (ingest/figures.py), without reading them back: to the bit what
Runs.token_figures computes from the stored rows, on every fixture folder; and whatever the
figures could not be modelled for falls back to reading the rows."""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from orchestrator.db.runs import Runs
from orchestrator.db.store import Store
from orchestrator.db.writes import write_batch
from orchestrator.ingest.figures import TokenFigures
from orchestrator.ingest.importer import import_dir
from orchestrator.record import load_record

FIX = Path(__file__).resolve().parent / "fixtures" / "bigmoe"
FOLDERS = sorted(p.name for p in FIX.iterdir() if p.is_dir())


def _same(kept: dict[str, Any], read: dict[str, Any]) -> bool:
    """Equal to the bit: the same keys, None where the other has None, floats of the same
    repr (which tells -0.0 from 0.0 and round-trips every double)."""
    return kept == read and json.dumps(kept, sort_keys=True) == json.dumps(read, sort_keys=True)


@pytest.fixture
def reread_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The run ids Runs.token_figures (the re-read) was called for."""
    calls: list[int] = []
    original = Runs.token_figures

    def spy(self: Runs, run_id: int) -> dict[str, Any]:
        calls.append(run_id)
        return original(self, run_id)

    monkeypatch.setattr(Runs, "token_figures", spy)
    return calls


@pytest.mark.parametrize("folder", FOLDERS)
def test_kept_figures_are_the_stored_rows_figures(tmp_path, reread_calls, folder):
    store = Store.open(str(tmp_path / "orch.db"))
    import_dir(store, FIX / folder)
    runs = store.runs()
    assert runs
    during = list(reread_calls)
    streamed = 0
    for run in runs:
        kept = load_record(run.summary).token_stats
        read = Runs(store).token_figures(run.id)
        assert _same(kept, read), (run.config, kept, read)
        if read["n"]:
            streamed += run.id not in during
    # the figures were streamed, not re-read, for the runs with token rows (only runs without
    # any are read: nothing to read)
    with_rows = sum(1 for r in runs if Runs(store).token_count(r.id))
    assert streamed == with_rows


def _run(store: Store) -> int:
    return store.create_run(uid="u", session_id=store.create_session(name="s", kind="import"),
                            device_id=store.upsert_device("d", "local"), cell_key="c",
                            model="m", config="c", flags=None, repeat_index=0, order_index=0,
                            status="running", engine="bmoe", superseded=False)


def _row(run_id: int, seq: int, wall: Any, stall: Any = 1.25, read: Any = 4096,
         hit: Any = 50.0, majflt: Any = 0.5) -> tuple[Any, ...]:
    # TOKEN_KEYS: run_id, seq, step, wall_ms, io_ms, compute_ms, stall_ms, mgmt_ms,
    # read_bytes, cache_hit_pct, majflt, cpu_ms, extra
    return (run_id, seq, seq + 1, wall, 1.0, 2.0, stall, 0.5, read, hit, majflt, 3.0, None)


def _stored_and_streamed(store: Store, batches: list[list[tuple[Any, ...]]]
                         ) -> tuple[TokenFigures, dict[str, Any], dict[str, Any]]:
    run_id = batches[0][0][0]
    figures = TokenFigures(run_id)
    for i, batch in enumerate(batches):
        write_batch(store, run_id, batch, [], [], i + 1)
        figures.add(batch)
    return figures, figures.figures(store), Runs(store).token_figures(run_id)


def test_nulls_nans_and_ints_are_modelled_as_the_store_reads_them(tmp_path):
    store = Store.open(str(tmp_path / "orch.db"))
    run_id = _run(store)
    rows = [_row(run_id, i, 100.0 + (i * 37 % 11) / 7, stall=(i % 3) * 0.1) for i in range(60)]
    rows[3] = _row(run_id, 3, None, stall=None, read=None, majflt=None)
    rows[7] = _row(run_id, 7, math.nan, stall=math.nan, majflt=math.nan)
    rows[9] = _row(run_id, 9, 120, stall=2, majflt=1)           # ints into REAL columns
    rows[11] = _row(run_id, 11, 0.0)                             # no tok/s from it
    rows[-1] = _row(run_id, 59, 101.5, hit=None)                 # the last hit: NULL
    figures, streamed, read = _stored_and_streamed(store, [rows[:25], rows[25:]])
    assert figures.regular
    assert _same(streamed, read), (streamed, read)


@pytest.mark.parametrize("odd", [
    {"wall": -0.0},                 # SQLite keeps 0.0
    pytest.param({"wall": math.inf},     # the statistics' own warnings about inf
                 marks=pytest.mark.filterwarnings("ignore::RuntimeWarning")),
    {"stall": "1.5"},               # another type: what the store makes of it is not modelled
    {"read": 1.5},                  # a float in the INTEGER column
    {"read": -4},
    {"read": 2 ** 53},              # its sum is no longer exact as a double
    {"hit": "50"},
])
def test_what_is_not_modelled_is_read_from_the_rows(tmp_path, odd):
    store = Store.open(str(tmp_path / "orch.db"))
    run_id = _run(store)
    rows = [_row(run_id, i, 100.0 + i) for i in range(30)]
    rows[-1] = _row(run_id, 29, **{"wall": 110.0, **odd})
    figures, streamed, read = _stored_and_streamed(store, [rows])
    assert not figures.regular
    assert _same(streamed, read)


def test_rows_the_figures_did_not_see_are_read(tmp_path):
    store = Store.open(str(tmp_path / "orch.db"))
    run_id = _run(store)
    rows = [_row(run_id, i, 100.0 + i) for i in range(30)]
    figures = TokenFigures(run_id)
    write_batch(store, run_id, rows, [], [], 1)
    figures.add(rows[:20])                     # ten stored rows never given to it
    assert figures.regular and figures.rows == 20
    assert _same(figures.figures(store), Runs(store).token_figures(run_id))
    assert figures.figures(store)["n"] == 30


def test_a_batch_that_is_not_the_next_rows_is_read(tmp_path):
    store = Store.open(str(tmp_path / "orch.db"))
    run_id = _run(store)
    rows = [_row(run_id, i, 100.0 + i) for i in range(30)]
    figures = TokenFigures(run_id)
    write_batch(store, run_id, rows, [], [], 1)
    figures.add(rows[10:])                     # not from seq 0
    assert not figures.regular
    assert _same(figures.figures(store), Runs(store).token_figures(run_id))
