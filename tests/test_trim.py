"""`--trim N` and `trim:` (stats/trim.py, results/trim.py): per-token statistics over the
tokens after each run's first N, checked against the study's CSVs read here independently."""
from __future__ import annotations

import csv
import json
import statistics
from pathlib import Path

import pytest
from cli_helpers import orch

from orchestrator.config.design import Design

FOLDER = Path(__file__).parent / "fixtures" / "bigmoe" / "2026-07-21-pinned-dense-ab"
ANON = "bmoe-20260721-103724.csv"


def csv_wall(name: str) -> list[float]:
    with open(FOLDER / name, newline="") as f:
        return [float(r["wall_ms"]) for r in csv.DictReader(
            line for line in f if not line.startswith("#"))]


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("trim") / "orch.db")
    code, out = orch("import", str(FOLDER), "--db", path)
    assert code == 0, out
    return path


def latency_rows(db: str, *options: str) -> dict[str, dict]:
    code, out = orch("table", "--db", db, "-t", "latency", "--format", "json", *options)
    assert code == 0, out
    return {r["label"]: r for r in json.loads(out)}


def test_trim_50_against_the_csv(db: str) -> None:
    code, out = orch("table", "--db", db, "-t", "throughput,latency", "--format", "json",
                     "--trim", "50")
    assert code == 0, out
    rows = json.loads(out)
    assert rows and all(r["trim"] == 50 for r in rows)
    anon = next(r for r in rows if r["table"] == "latency" and r["mean_ms"]
                and len(csv_wall(ANON)) == 1354 and abs(r["first_token_ms"] - 811.605) < 1e-9)
    w = csv_wall(ANON)[50:]
    mean_tps = len(w) / (sum(w) / 1000)
    whole = csv_wall(ANON)
    # the headline mean stays the whole run's; the trimmed one is beside it
    assert anon["mean"] == pytest.approx(len(whole) / (sum(whole) / 1000), rel=1e-9)
    assert abs(1000 / anon["mean_after_trim"] - 1000 / mean_tps) < 0.1   # ms terms, to 0.1 ms
    assert anon["mean_after_trim"] == pytest.approx(mean_tps, rel=1e-9)
    assert abs(anon["median_ms"] - statistics.median(w)) < 0.1
    assert abs(anon["latency_p50_ms"] - statistics.median(w)) < 0.1
    through = next(r for r in rows if r["table"] == "throughput" and r["run_id"] == anon["run_id"])
    # median tok/s: the median of the per-token rates after the trim
    assert through["median"] == pytest.approx(statistics.median(1000 / x for x in w), rel=1e-9)
    assert through["mean_after_trim"] == pytest.approx(mean_tps, rel=1e-9)


def test_trim_0_is_every_token(db: str) -> None:
    rows = latency_rows(db)
    assert all(r["trim"] == 0 for r in rows.values())
    w = csv_wall(ANON)
    anon = next(r for r in rows.values() if r["first_token_ms"] == 811.605)
    assert f"{anon['mean']:.3f}" == "2.588"
    assert anon["mean"] == pytest.approx(len(w) / (sum(w) / 1000), rel=1e-12)


def test_a_run_trimmed_away_is_not_measured(db: str) -> None:
    rows = latency_rows(db, "--trim", "100")       # the short runs have 67-74 tokens
    short = [r for r in rows.values() if r["first_token_ms"] in (640.444, 624.246)]
    assert len(short) == 2
    for r in short:
        assert r["mean_after_trim"] is None and r["latency_p50_ms"] is None
        assert r["mean_ms"] is None and r["mean"] is not None     # the whole run's stays
        assert r["tps_ci_low"] is None
    code, out = orch("table", "--db", db, "-t", "throughput", "--trim", "100")
    assert code == 0 and "first 100 tokens left out" in out


def test_captions_state_the_trim(db: str) -> None:
    code, out = orch("table", "--db", db, "-t", "throughput,latency", "--trim", "50")
    assert code == 0, out
    captions = [line for line in out.splitlines() if line.startswith("**")]
    assert captions and all("first 50 tokens left out" in c for c in captions)
    assert "within-run" in out
    code, out = orch("report", "--db", db, "--no-plots", "--trim", "50")
    assert code == 0, out
    assert "**Throughput**" in out and "per-token figures: first 50 tokens left out" in out


def test_bad_trim_is_a_usage_error(db: str) -> None:
    code, out = orch("table", "--db", db, "--trim", "-1")
    assert code == 2 and "--trim" in out
    code, out = orch("table", "--help")
    assert "--trim" in out


def test_trim_from_the_design_file_and_the_option_wins(tmp_path: Path) -> None:
    design = tmp_path / "design.yaml"
    design.write_text("trim: 60\n")
    db = str(tmp_path / "orch.db")
    code, out = orch("import", str(FOLDER), "--db", db, "--design", str(design))
    assert code == 0, out
    assert all(r["trim"] == 60 for r in latency_rows(db).values())
    assert all(r["trim"] == 5 for r in latency_rows(db, "--trim", "5").values())
    assert all(r["trim"] == 0 for r in latency_rows(db, "--trim", "0").values())


def test_trim_key_is_checked() -> None:
    assert Design(trim=3).trim == 3 and Design().trim == 0
    from pydantic import ValidationError

    for bad in (-1, 1.5, "x", True):
        with pytest.raises(ValidationError):
            Design(trim=bad)
    from orchestrator.config.matrix import Matrix

    assert "trim" in Matrix.model_fields
