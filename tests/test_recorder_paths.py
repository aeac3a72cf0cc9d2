"""The recorder's C-line paths store the same rows (and the importer's loop over them,
handle_csv_lines, the same as line by line): the tuple path (no token callback:
BmoeCsvParser.feed_values, the importer's and `bench/ingest`'s) and the row path (a callback
wants each TokenRow: a live run's progress board), on the fixtures' real bmoe CSVs, their
odd rows included (turns, extra columns, impossible values, a header again mid-file)."""
from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select

from orchestrator.db import schema
from orchestrator.db.store import Store
from orchestrator.engines.bmoe import BmoeRunParser
from orchestrator.run.recorder import RunRecorder

FIXTURES = Path(__file__).parent / "fixtures" / "bigmoe"
CSVS = sorted(p for p in FIXTURES.rglob("*.csv") if p.stat().st_size < 2_000_000)[:40]


def _record(store: Store, text: str, callback: bool,
            at_once: bool = False) -> tuple[list[tuple], list[str], int, int]:
    device = store.upsert_device("d", "local")
    session = store.create_session(kind="run", matrix_name="m")
    run_id = store.create_run(uid=f"u{callback}{at_once}", session_id=session, device_id=device,
                              cell_key="c", status="running")
    seen: list[int] = []
    parser = BmoeRunParser()
    # at once: the importer's loop (handle_csv_lines), with small batches so that it flushes
    recorder = RunRecorder(store, run_id, parser, flush_rows=100 if at_once else 5000,
                           on_token=(lambda row, seq: seen.append(seq)) if callback else None)
    if at_once:
        recorder.handle_csv_lines(text.splitlines())
    else:
        for line in text.splitlines():
            recorder.handle_csv(line)
    recorder.flush()
    tok = schema.token
    rows = store.fetch(select(*(c for c in tok.c if c.name != "run_id"))
                       .where(tok.c.run_id == run_id).order_by(tok.c.seq))
    assert not callback or seen == list(range(1, len(rows) + 1))
    return [tuple(r) for r in rows], parser.csv.errors, parser.csv.n_rows, recorder.lines


@pytest.mark.parametrize("path", CSVS, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_both_paths_store_the_same_rows(store: Store, path: Path) -> None:
    text = path.read_text(errors="replace")
    plain = _record(store, text, callback=False)
    with_rows = _record(store, text, callback=True)
    assert plain == with_rows == _record(store, text, callback=False, at_once=True)
    assert plain[0] or plain[1]       # a CSV gives rows, or says why it gave none


def test_the_paths_agree_on_rows_that_take_the_careful_way(store: Store) -> None:
    header = "step,wall_ms,io_ms,compute_ms,read_bytes,cache_hit_pct,stall_ms,turn,rss_mib"
    text = "\n".join([header, "1,10.5,1,2,100,50,0.5,0,900", "2,-1,1,2,100,50,0.5,0,900",
                      "3,10,1,2,100,150,0.5,0,900", "3,10,1,2,100,50,0.5,0,900",
                      "1,11,1,2,100,50,,1,901", "2,nan,1,2,100,50,1,1,901",
                      "4,1e3,1,2,99999999999999999999,50,1,1,901", header,
                      "1,9,1,2,100,50,0.5,2,902", "x,1,2"])
    assert _record(store, text, False) == _record(store, text, True) \
        == _record(store, text, False, at_once=True)
