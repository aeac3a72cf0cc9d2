"""`orch tokens RUN`: a run's chosen tokens as recorded (results/tokens.py)."""
from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from cli_helpers import orch

from orchestrator.db.runs import Runs
from orchestrator.db.store import Store
from orchestrator.results.tokens import chosen_positions, parse_steps

FOLDER = Path(__file__).parent / "fixtures" / "bigmoe" / "2026-07-21-pinned-dense-ab"
ANON = "bmoe-20260721-103724.csv"


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> tuple[str, int, list[dict]]:
    db = str(tmp_path_factory.mktemp("tokens") / "orch.db")
    code, out = orch("import", str(FOLDER), "--db", db)
    assert code == 0, out
    rid = next(r.id for r in Runs(Store.open(db)).current() if r.source_file.endswith(ANON))
    with open(FOLDER / ANON, newline="") as f:
        rows = list(csv.DictReader(line for line in f if not line.startswith("#")))
    return db, rid, rows


def test_default_steps_markdown(run) -> None:
    db, rid, _ = run
    code, out = orch("tokens", str(rid), "--db", db)
    assert code == 0, out
    lines = [line for line in out.splitlines() if line.startswith("| ") and "---" not in line]
    assert lines[0].startswith("| token | step | wall ms | compute ms | I/O ms | stall ms")
    tokens = [int(line.split("|")[1]) for line in lines[1:]]
    assert tokens == [*range(1, 11), 50, 100, 1354]
    assert "| 811.6 |" in lines[1]


def test_json_and_csv_carry_the_csv_values(run) -> None:
    db, rid, rows = run
    code, out = orch("tokens", str(rid), "--steps", "2-3,-1", "--format", "json", "--db", db)
    assert code == 0, out
    got = json.loads(out)
    assert [r["token"] for r in got] == [2, 3, 1354]
    for r in got:
        src = rows[r["token"] - 1]
        assert r["wall_ms"] == float(src["wall_ms"]) and r["io_ms"] == float(src["io_ms"])
        assert r["compute_ms"] == float(src["compute_ms"])
        assert r["stall_ms"] == float(src["stall_ms"])
        assert r["cache_hit_pct"] == float(src["cache_hit_pct"])
        assert r["read_mib"] == pytest.approx(int(src["read_bytes"]) / 2**20)
        assert r["step"] == int(src["step"]) and r["run_id"] == rid
    code, out = orch("tokens", str(rid), "--steps", "1", "--format", "csv", "--db", db)
    assert code == 0
    table = list(csv.DictReader(io.StringIO(out)))
    assert len(table) == 1 and float(table[0]["wall_ms"]) == 811.605


def test_errors_are_one_line_exit_2_or_3(run) -> None:
    db, rid, _ = run
    for args, exit_code in ((["999"], 3),     # not found (orchestrator/errors.py NotFound)
                            ([str(rid), "--steps", "x"], 2), ([str(rid), "--steps", "5-2"], 2),
                            ([str(rid), "--steps", "0"], 2), ([str(rid), "--steps", "1,,2"], 2)):
        code, out = orch("tokens", *args, "--db", db)
        assert code == exit_code, (args, out)
        assert len(out.strip().splitlines()) == 1 and out.startswith("error:"), out


def test_steps_parsing() -> None:
    assert parse_steps("1-10,50,100,-1") == [(1, 10), (50, 50), (100, 100), (-1, -1)]
    assert chosen_positions(parse_steps("1-3,100,-1"), 5) == [0, 1, 2, 4]
    assert chosen_positions(parse_steps("4--1"), 6) == [3, 4, 5]
    assert chosen_positions(parse_steps("-1,1"), 1) == [0]
