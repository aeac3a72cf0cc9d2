"""Numbers that parse but cannot be stored (1e309 is Inf, an integer beyond 64 bits, NaN in the
JSON `extra`) are impossible values: `orch import` refuses the file with its line, a live run
drops the row and records the error; the store never sees them. A route trace holding a value
its column cannot hold on every backend is refused with its line (db/storable.py)."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from cli_helpers import orch
from sqlalchemy import func, select

from orchestrator.db import schema
from orchestrator.db.runs import Runs
from orchestrator.db.store import Store
from orchestrator.engines.bmoe import BmoeRunParser
from orchestrator.engines.bmoe_format import BmoeCsvParser

FIX = Path(__file__).resolve().parent / "fixtures" / "bigmoe" / "2026-07-17"
SRC = FIX / "gemma_k6.csv"
ROW = 3           # the data row changed (0 = the first)
HUGE = "99999999999999999999999"

CASES = [("wall_ms", "1e309"), ("wall_ms", "inf"), ("cpu_ms", "1E400"),
         ("read_bytes", HUGE), ("rss_mib", HUGE), ("rss_mib", "1e309"), ("swap_mib", "nan")]


def _with_value(column: str, value: str) -> tuple[str, int]:
    """(the fixture's text with data row ROW's column set to value, that row's line number)."""
    lines = SRC.read_text().splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("step,"))
    cols = lines[header].split(",")
    fields = lines[header + 1 + ROW].split(",")
    fields[cols.index(column)] = value
    lines[header + 1 + ROW] = ",".join(fields)
    return "\n".join(lines) + "\n", header + 1 + ROW + 1


def _counts(db: str) -> tuple[int, int, int]:
    """(sessions, runs, runs left `running`) in the store."""
    store = Store.open(db)
    sessions = store.fetch(select(func.count()).select_from(schema.session))[0][0]
    runs = store.fetch(select(func.count()).select_from(schema.run))[0][0]
    running = store.fetch(select(func.count()).select_from(schema.run)
                          .where(schema.run.c.status == "running"))[0][0]
    return sessions, runs, running


@pytest.mark.parametrize(("column", "value"), CASES)
def test_import_refuses_the_file_with_its_line(tmp_path, column, value):
    folder = tmp_path / "study"
    folder.mkdir()
    text, lineno = _with_value(column, value)
    (folder / "gemma_k6.csv").write_text(text)
    db = str(tmp_path / "orch.db")
    code, out = orch("import", str(folder), "--db", db)
    assert code == 1, out
    assert f"gemma_k6.csv: not imported: impossible value at line {lineno}: {column}=" in out
    assert _counts(db) == (0, 0, 0)        # no session, no run, nothing left `running`


def test_the_other_files_still_import(tmp_path):
    folder = tmp_path / "study"
    folder.mkdir()
    (folder / "gemma_k6.csv").write_text(_with_value("read_bytes", HUGE)[0])
    shutil.copy(FIX / "gemma_kdef.csv", folder / "gemma_kdef.csv")
    db = str(tmp_path / "orch.db")
    code, out = orch("import", str(folder), "--db", db)
    assert code == 0, out
    assert "gemma_k6.csv: not imported: impossible value" in out
    assert _counts(db) == (1, 1, 0)
    (run,) = Runs(Store.open(db)).current()
    assert run.status == "ok" and run.source_file == "gemma_kdef.csv"


@pytest.mark.parametrize(("column", "value"), CASES)
def test_live_parser_drops_the_row_and_records_the_error(column, value):
    text, lineno = _with_value(column, value)
    parser = BmoeRunParser()
    rows = [r for line in text.splitlines() for r in parser.feed("C", line)]
    errors = parser.record().errors
    assert len(rows) == 255 and ROW + 1 not in [r.step for r in rows]
    assert any(e.startswith(f"line {lineno}: impossible value: {column}=") for e in errors)


# the fast path: a row with no '-' and no letter (the 9-column CSV of older engines)
HEADER = "step,steps,wall_ms,io_ms,compute_ms,read_bytes,cache_hit_pct,stall_ms,mgmt_ms"
GOOD = "{step},4,300.125,120.5,150.25,400000000,50.25,40.5,20.75"


@pytest.mark.parametrize(("row", "what"), [
    ("2,4,1e309,120.5,150.25,400000000,50.25,40.5,20.75", "wall_ms=inf"),
    ("2,4,300.125,120.5,150.25,400000000,50.25,1e309,20.75", "stall_ms=inf"),
    (f"2,4,300.125,120.5,150.25,{HUGE},50.25,40.5,20.75", f"read_bytes={HUGE}"),
    ("2,4,300.125,120.5,150.25,9223372036854775808,50.25,40.5,20.75",
     "read_bytes=9223372036854775808"),
    ("99999999999,4,300.125,120.5,150.25,400000000,50.25,40.5,20.75", "step=99999999999"),
])
def test_fast_path_catches_exponents_and_wide_integers(row, what):
    parser = BmoeCsvParser()
    lines = [HEADER, GOOD.format(step=1), row, GOOD.format(step=3)]
    kept = [r for r in (parser.feed(line) for line in lines) if r is not None]
    assert [r.step for r in kept] == [1, 3]
    assert parser.impossible and parser.impossible[0].startswith(f"line 3: {what}")
    assert any("impossible value" in e for e in parser.errors)


def test_largest_storable_values_are_kept():
    parser = BmoeCsvParser()
    big = "2,4,1e3,120.5,150.25,9223372036854775807,50.25,40.5,20.75"
    rows = [parser.feed(line) for line in (HEADER, GOOD.format(step=1), big)]
    assert rows[2] is not None and rows[2].read_bytes == 2 ** 63 - 1 and rows[2].wall_ms == 1000.0
    assert not parser.impossible


# ---- route traces -------------------------------------------------------------------------

TRACE = FIX.parent / "2026-07-15-route-trace" / "gemma.route.csv"
WIDE, HUGE_INT = 3_000_000_000, 2 ** 70   # beyond an Integer column; beyond 64 bits


@pytest.mark.parametrize(("column", "value"), [("turn", WIDE), ("step", WIDE),
                                               ("expert_bytes", HUGE_INT), ("weight", "inf")])
def test_a_route_trace_with_a_value_the_store_cannot_hold_is_refused(column, value):
    """The first (turn, phase, step, layer) cell's six rows get the value (a whole cell, so
    no other check of the trace sees it first): refused with its line, before any store."""
    from orchestrator.engines.route_trace import parse_route_trace

    lines = TRACE.read_text().splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("turn,"))
    at = lines[header].split(",").index(column)
    for i in range(header + 1, header + 7):
        fields = lines[i].split(",")
        fields[at] = str(value)
        lines[i] = ",".join(fields)
    with pytest.raises(ValueError) as error:
        parse_route_trace("\n".join(lines) + "\n")
    shown = float(value) if column == "weight" else value
    assert str(error.value) == f"line {header + 2}: {column} {shown} is beyond what the store holds"
