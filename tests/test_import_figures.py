"""An import stores each run's figures (db/figures.py) computed from its token rows as they
were stored (ingest/figures.py TokenColumns), without reading them back: to the bit what the
same function computes from the stored rows, on every fixture folder; and a run whose rows
were not all seen, in order, as numbers, is computed from the stored rows instead."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from orchestrator.db import figures as figures_module
from orchestrator.db.runs import Runs
from orchestrator.db.store import Store
from orchestrator.db.writes import write_batch
from orchestrator.ingest.figures import TokenColumns
from orchestrator.ingest.importer import import_dir

FIX = Path(__file__).resolve().parent / "fixtures" / "bigmoe"
FOLDERS = sorted(p.name for p in FIX.iterdir() if p.is_dir())


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[list[int]]:
    """The run ids each read of stored token rows was for."""
    calls: list[list[int]] = []
    original = figures_module.read_tokens

    def spy(conn: Any, ids: Any) -> Any:
        calls.append(list(ids))
        return original(conn, ids)

    monkeypatch.setattr(figures_module, "read_tokens", spy)
    return calls


@pytest.mark.parametrize("folder", FOLDERS)
def test_stored_figures_are_the_stored_rows_figures(tmp_path, reads, folder):
    store = Store.open(str(tmp_path / "orch.db"))
    import_dir(store, FIX / folder)
    runs = Runs(store).current()
    assert runs and all(r.stored_figures is not None for r in runs)
    during = [rid for ids in reads for rid in ids]
    for run in runs:
        with store.reading() as conn:
            read = figures_module.compute_rows(conn, [run])[run.id]
        assert repr(run.stored_figures) == repr(read), run.config
    # the rows were watched, not read back, for every run that has token rows
    with_rows = {r.id for r in runs if Runs(store).token_count(r.id)}
    assert with_rows and not with_rows & set(during)


def _run(store: Store) -> int:
    return store.create_run(uid="u", session_id=store.create_session(name="s", kind="import"),
                            device_id=store.upsert_device("d", "local"), cell_key="c",
                            model="m", config="c", flags=None, repeat_index=0, order_index=0,
                            status="running", engine="bmoe", superseded=False)


def _row(run_id: int, seq: int, wall: Any, stall: Any = 1.25, read: Any = 4096,
         hit: Any = 50.0, majflt: Any = 0.5) -> tuple[Any, ...]:
    # TOKEN_KEYS: run_id, seq, step, wall_ms, io_ms, compute_ms, stall_ms, mgmt_ms,
    # read_bytes, cache_hit_pct, majflt, cpu_ms, turn, extra
    return (run_id, seq, seq + 1, wall, 1.0, 2.0, stall, 0.5, read, hit, majflt, 3.0, None, None)


def _watched(store: Store, batches: list[list[tuple[Any, ...]]]) -> TokenColumns:
    run_id = batches[0][0][0]
    columns = TokenColumns(run_id)
    for i, batch in enumerate(batches):
        write_batch(store, run_id, batch, [], [], i + 1)
        columns.add(batch)
    return columns


def test_watched_rows_are_the_stored_rows_nulls_and_ints_included(tmp_path):
    store = Store.open(str(tmp_path / "orch.db"))
    run_id = _run(store)
    rows = [_row(run_id, i, 100.0 + (i * 37 % 11) / 7, stall=(i % 3) * 0.1) for i in range(60)]
    rows[3] = _row(run_id, 3, None, stall=None, read=None, majflt=None)
    rows[9] = _row(run_id, 9, 120, stall=2, majflt=1)           # ints into REAL columns
    rows[11] = _row(run_id, 11, 0.0)                             # no tok/s from it
    rows[-1] = _row(run_id, 59, 101.5, hit=None)                 # the last hit: NULL
    columns = _watched(store, [rows[:25], rows[25:]])
    assert columns.usable(Runs(store).token_count(run_id))
    with store.engine.connect() as conn:
        stored = figures_module.read_tokens(conn, [run_id])
    watched = columns.tokens()
    assert list(watched.columns) == list(stored.columns)
    assert repr(watched.to_dict("list")) == repr(stored.to_dict("list"))


def test_a_value_that_is_no_number_is_read_from_the_rows(tmp_path):
    store = Store.open(str(tmp_path / "orch.db"))
    run_id = _run(store)
    rows = [_row(run_id, i, 100.0 + i) for i in range(30)]
    rows[-1] = _row(run_id, 29, 110.0, stall="fast")
    columns = _watched(store, [rows])
    assert not columns.usable(Runs(store).token_count(run_id))


def test_rows_it_did_not_see_make_it_unusable(tmp_path):
    store = Store.open(str(tmp_path / "orch.db"))
    run_id = _run(store)
    rows = [_row(run_id, i, 100.0 + i) for i in range(30)]
    columns = TokenColumns(run_id)
    write_batch(store, run_id, rows, [], [], 1)
    columns.add(rows[:20])                     # ten stored rows never given to it
    assert columns.regular and columns.rows == 20
    assert not columns.usable(Runs(store).token_count(run_id))


def test_a_batch_that_is_not_the_next_rows_makes_it_unusable(tmp_path):
    store = Store.open(str(tmp_path / "orch.db"))
    run_id = _run(store)
    rows = [_row(run_id, i, 100.0 + i) for i in range(30)]
    columns = TokenColumns(run_id)
    write_batch(store, run_id, rows, [], [], 1)
    columns.add(rows[10:])                     # not from seq 0
    assert not columns.regular
    assert not columns.usable(Runs(store).token_count(run_id))
