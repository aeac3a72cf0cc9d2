"""Within-run intervals and the not-settled rule (stats/within_run.py, stats/settle.py), held
to the 2026-07-21 pinned-dense study's own figures (tests/fixtures/bigmoe/, its findings.md)."""
from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import orch

from orchestrator.db.runs import Runs
from orchestrator.stats.figures import frame
from orchestrator.db.store import Store
from orchestrator.stats.settle import settling
from orchestrator.stats.within_run import block_length, run_figures, stationary_means

FOLDER = Path(__file__).parent / "fixtures" / "bigmoe" / "2026-07-21-pinned-dense-ab"
ANON, AHWB = "bmoe-20260721-103724.csv", "bmoe-20260721-101543.csv"


def wall_ms(name: str) -> np.ndarray:
    with open(FOLDER / name, newline="") as f:
        rows = csv.DictReader(line for line in f if not line.startswith("#"))
        return np.array([float(r["wall_ms"]) for r in rows])


def plain_bootstrap(w: np.ndarray, reps: int = 4000, seed: int = 1) -> tuple[float, float]:
    """The study's interval: percentile bootstrap of n / Σ wall over resampled tokens."""
    idx = np.random.default_rng(seed).integers(0, len(w), (reps, len(w)))
    lo, hi = np.percentile(len(w) / (w[idx].sum(axis=1) / 1000), [2.5, 97.5])
    return float(lo), float(hi)


@pytest.fixture(scope="module")
def stats(tmp_path_factory):
    db = str(tmp_path_factory.mktemp("within") / "orch.db")
    code, out = orch("import", str(FOLDER), "--db", db)
    assert code == 0, out
    store = Store.open(db)
    rows = Runs(store).current()
    table = frame(Runs(store).figures(rows))
    table["file"] = [Path(r.source_file).name for r in rows]
    return table.set_index("file")


def test_the_decisive_pair_as_the_study_printed_it(stats) -> None:
    # findings.md: anon 2.588 [2.497–2.687], ahwb 3.053 [2.928–3.176]
    for name, mean, (lo, hi) in ((ANON, "2.588", (2.497, 2.687)),
                                 (AHWB, "3.053", (2.928, 3.176))):
        row = stats.loc[name]
        assert f"{row['mean']:.3f}" == mean
        assert row.tps_ci_low < row["mean"] < row.tps_ci_high
        # the block bootstrap is at least as wide as the study's plain bootstrap, and as
        # the plain bootstrap computed here
        plain_lo, plain_hi = plain_bootstrap(wall_ms(name))
        assert plain_lo == pytest.approx(lo, abs=0.01) and plain_hi == pytest.approx(hi, abs=0.01)
        width = row.tps_ci_high - row.tps_ci_low
        assert width >= hi - lo and width >= plain_hi - plain_lo
        assert row.ci_method.startswith("stationary block bootstrap, block ")
        # the ms interval is the same resamples seen as ms/token
        assert row.mean_ms_ci_low < row.mean_ms < row.mean_ms_ci_high
        assert row.mean_ms == pytest.approx(1000 / row["mean"])


def test_short_pairs_coefficient_of_variation(stats) -> None:
    short = stats[stats.index.str.startswith("bmoe-20260721-09")]
    assert len(short) == 6
    cv = short["cv_pct"]
    # sample stdev (n-1): 33.1% (091910) to 72.0% (090539)
    assert cv.idxmin() == "bmoe-20260721-091910.csv" and round(cv.min()) == 33
    assert cv.idxmax() == "bmoe-20260721-090539.csv" and round(cv.max()) == 72
    # the study's "33–71%" is the population stdev (numpy's default ddof=0) of the same runs
    pop = {name: wall_ms(name).std() / wall_ms(name).mean() * 100 for name in short.index}
    assert round(min(pop.values())) == 33 and round(max(pop.values())) == 71
    assert min(pop, key=pop.get) == "bmoe-20260721-091910.csv"
    assert max(pop, key=pop.get) == "bmoe-20260721-090539.csv"


def test_first_tokens_whatever_the_trim(stats) -> None:
    w = wall_ms(ANON)
    row = stats.loc[ANON]
    assert row.first_token_ms == pytest.approx(w[0])
    assert row.first5_mean_ms == pytest.approx(w[:5].mean())
    trimmed = run_figures(w, trim=50)
    assert trimmed["first_token_ms"] == pytest.approx(w[0])
    assert trimmed["mean_ms"] == pytest.approx(w[50:].mean())


def test_block_sums_draw_what_arch_stationary_bootstrap_draws() -> None:
    from arch.bootstrap import StationaryBootstrap

    w = wall_ms(ANON)
    b = block_length(w)
    ours = np.percentile(stationary_means(w, b), [2.5, 97.5])
    theirs = StationaryBootstrap(b, w, seed=7).conf_int(np.mean, 2000, method="percentile")
    assert ours == pytest.approx(theirs.ravel(), rel=0.02)
    # reproducible: the same run gives the same interval every time
    assert run_figures(w)["tps_ci_low"] == run_figures(w)["tps_ci_low"]


def test_no_interval_under_ten_tokens() -> None:
    out = run_figures(np.array([200.0] * 9))
    assert out["tps_ci_low"] is None and out["mean_ms_ci_high"] is None
    assert "under 10" in out["ci_method"]
    assert run_figures(np.array([200.0] * 12), trim=3)["tps_ci_low"] is None


# ---- not settled -------------------------------------------------------------------------

def test_a_climbing_run_is_not_settled() -> None:
    # the desktop round: "steady from token 6, 4.86 tok/s", climbing 4.14 -> 6.32 tok/s
    rng = np.random.default_rng(3)
    rate = np.linspace(4.14, 6.32, 200) * rng.normal(1, 0.05, 200)
    s = settling(1000 / rate, tested_from=5)
    assert s.settled is False and s.trend_pct > 30   # quarter means of the ramp: +37%
    assert s.note.startswith("not settled (+") and s.note.endswith("% first → last quarter)")
    figures = run_figures(1000 / rate, steady_from=6)
    assert figures["settled"] is False and figures["settle_note"] == s.note


def test_a_flat_noisy_run_is_settled() -> None:
    rng = np.random.default_rng(4)
    w = 200 * rng.lognormal(0, 0.4, 300)
    s = settling(w)
    assert s.settled is True and s.note == "" and abs(s.trend_pct) < 10


def test_a_short_run_is_too_short_to_tell() -> None:
    s = settling(np.linspace(300, 100, 39))
    assert s.settled is None and s.note == "too short to tell"
    out = run_figures(np.linspace(300, 100, 60), trim=25)
    assert out["settled"] is None and out["settle_note"] == "too short to tell"


def test_not_settled_runs_claim_no_steady_state(stats) -> None:
    unsettled = stats[stats["settled"] == False]
    assert len(unsettled)
    assert unsettled["steady_mean"].isna().all()
    assert unsettled["settle_note"].str.startswith("not settled (").all()
