"""`orch history`: synthetic stored histories with a known 15% step at a known session among
noisy points are found there; histories without a step report none (several seeds, each
point three runs of 2% run-to-run noise)."""
from __future__ import annotations

import datetime as dt
import json
import sys

import numpy as np
import pytest
from cli_helpers import orch, orch_ok

from orchestrator.db import schema
from orchestrator.db.runs import Runs
from orchestrator.db.store import Store
from orchestrator.record import RunRecord
from orchestrator.stats.changepoints import detect
from orchestrator.results.history import (
    build_label,
    build_matches,
    history,
    version_key,
)

SEEDS = range(8)
SESSIONS, STEP_AT, STEP = 16, 9, 0.85
T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def add_session(store: Store, k: int, values: dict[str, list[float]], build: str = "0.3.36",
                matrix: str = "hist", device: str = "d", status: str = "ok",
                flags: str = "", model_sha256: str | None = None) -> int:
    """A stored session `k` whose runs have constant per-token times: each run's mean tok/s is
    exactly the value given."""
    dev = store.upsert_device(device, "local")
    sid = store.create_session(kind="run", name=f"s{k}", matrix_name=matrix,
                               started_at=T0 + dt.timedelta(hours=k))
    for config, tps_list in values.items():
        for rep, tps in enumerate(tps_list):
            rid = store.create_run(
                uid=f"{matrix}-{device}-{k}-{config}-{rep}", session_id=sid, device_id=dev,
                cell_key=f"m|{config}|{rep}", model="m", config=config, repeat_index=rep,
                order_index=rep, status=status, engine="llama-bench", superseded=False,
                engine_build="abc1234 (1)", flags=flags, model_sha256=model_sha256,
                binary_path=f"/root/.cache/orch/llama.cpp/{build}/bin/llama-bench")
            with store.engine.begin() as conn:
                conn.execute(schema.token.insert(), [
                    {"run_id": rid, "seq": i, "step": i + 1, "wall_ms": 1000.0 / tps}
                    for i in range(4)])
    return sid


def noisy_history(store: Store, seed: int, step: bool) -> list[int]:
    rng = np.random.default_rng(seed)
    sids = []
    for k in range(SESSIONS):
        level = 20.0 * (STEP if step and k >= STEP_AT else 1.0)
        session_level = level * np.exp(rng.normal(0, 0.015))   # session-to-session drift
        runs = session_level * np.exp(rng.normal(0, 0.02, 3))
        build = "0.3.30" if k < STEP_AT else "0.3.36"
        sids.append(add_session(store, k, {"t1": [float(v) for v in runs]}, build))
    return sids


@pytest.mark.parametrize("seed", SEEDS)
def test_step_found_at_its_session(tmp_path, seed):
    db = str(tmp_path / "orch.db")
    sids = noisy_history(Store.open(db), seed, step=True)
    data = json.loads(orch_ok("history", "--db", db, "--matrix", "hist", "--format", "json"))
    assert len(data["points"]) == SESSIONS
    assert all(p["n"] == 3 and p["ci_low"] <= p["value"] <= p["ci_high"] for p in data["points"])
    [cp] = data["change_points"]
    assert cp["session"] == sids[STEP_AT]
    assert cp["delta_pct"] == pytest.approx(-15.0, abs=4.0)
    assert cp["after"] < cp["before"]
    assert (cp["build_before"], cp["build_after"]) == ("0.3.30", "0.3.36")


@pytest.mark.parametrize("seed", SEEDS)
def test_no_step_reports_none(tmp_path, seed):
    db = str(tmp_path / "orch.db")
    noisy_history(Store.open(db), seed, step=False)
    data = json.loads(orch_ok("history", "--db", db, "--matrix", "hist", "--format", "json"))
    assert len(data["points"]) == SESSIONS and data["change_points"] == []


def test_table_output_names_the_step_and_filters(tmp_path):
    db = str(tmp_path / "orch.db")
    store = Store.open(db)
    sids = noisy_history(store, 0, step=True)
    add_session(store, 99, {"t1": [5.0, 5.1]}, matrix="other")
    out = orch_ok("history", "--db", db, "--matrix", "hist", "--config", "t1", "-d", "d")
    assert f"change point at session {sids[STEP_AT]}" in out
    assert "builds 0.3.30 -> 0.3.36" in out
    code, out = orch("history", "--db", db, "--matrix", "hist", "--config", "nope")
    assert code == 3 and "no runs" in out


@pytest.mark.extra("plots")
def test_plot_is_a_png(tmp_path):
    db = str(tmp_path / "orch.db")
    noisy_history(Store.open(db), 0, step=True)
    plot = tmp_path / "history.png"
    orch_ok("history", "--db", db, "--matrix", "hist", "--plot", str(plot))
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_without_matplotlib_says_which_extra(tmp_path, monkeypatch):
    db = str(tmp_path / "orch.db")
    noisy_history(Store.open(db), 0, step=True)
    monkeypatch.setitem(sys.modules, "matplotlib", None)          # `import matplotlib` fails
    code, out = orch("history", "--db", db, "--matrix", "hist", "--plot", str(tmp_path / "h.png"))
    assert code == 1 and "orch[plots]" in out and not (tmp_path / "h.png").exists()


def test_order_by_build_and_failed_runs(tmp_path):
    db = str(tmp_path / "orch.db")
    store = Store.open(db)
    # sessions ran newest build first: by build, 0.3.9 < 0.3.30 < 0.3.36 (numerically)
    add_session(store, 0, {"t1": [10.0, 10.1]}, build="0.3.36")
    add_session(store, 1, {"t1": [10.0, 10.2]}, build="0.3.30")
    add_session(store, 2, {"t1": [10.0, 10.3]}, build="0.3.9")
    add_session(store, 3, {"t1": [1.0]}, build="0.3.9", status="failed")
    series = history(store, "hist", order="build")
    assert [p.build for p in series[0].points] == ["0.3.9", "0.3.9", "0.3.30", "0.3.36"]
    failed = [p for p in series[0].points if p.failed]
    assert len(failed) == 1 and failed[0].interval.n == 0
    assert version_key("0.3.30") == (0, 3, 30) and version_key("abc (1)") is None


def test_repetitions_give_a_single_run_its_interval(tmp_path):
    store = Store.open(str(tmp_path / "orch.db"))
    sid = add_session(store, 0, {"t1": [10.0]})
    run = Runs(store).current(sid)[0]
    record = RunRecord(extra={"repetitions": [9.8, 10.0, 10.2]})
    store.update_run(run.id, summary=record.stored())
    [s] = history(store, "hist")
    assert s.points[0].basis == "repetitions" and s.points[0].interval.n == 3


def test_build_names():
    class Row:
        binary_path = "/x/.cache/orch/llama.cpp/0.3.30/bin/llama-bench"
        engine_build = "e3a74b299 (0)"

    row = Row()
    assert build_label(row) == "0.3.30"
    assert build_matches(row, "0.3.30") and build_matches(row, "e3a74b2")
    assert not build_matches(row, "0.3.36")
    row.binary_path = "/usr/bin/llama-bench"
    assert build_label(row) == "e3a74b299 (0)" and build_matches(row, "e3a74b299 (0)")


def test_detect_edge_cases():
    assert detect([10.0, 10.0, 10.0]) == []                  # too short to hold two segments
    assert detect([10.0] * 6 + [8.0] * 6)[0].index == 6      # exact figures: floor noise
    assert detect([10.0] * 12) == []


def test_the_running_sum_cost_finds_ruptures_own_breakpoints():
    """detect's l2 cost (running sums, constant time per segment) against ruptures' CostL2
    on the same logs and penalty: the same breakpoints, steps or none, short or long."""
    import math

    import ruptures

    from orchestrator.stats import changepoints as cp

    rng = np.random.default_rng(7)
    for trial in range(80):
        n = 300 if trial == 0 else int(rng.integers(4, 120))
        levels = np.repeat(rng.choice([1.0, 0.85, 0.95, 1.1], size=4), math.ceil(n / 4))[:n]
        values = 20 * levels * np.exp(rng.normal(0, rng.choice([0.002, 0.01, 0.05]), n))
        if trial % 5 == 0:
            values = np.round(values, 1)            # ties, as printed figures have
        x = np.log(values)
        pen = cp.PENALTY * cp.noise(x) ** 2 * math.log(n)
        own = ruptures.Pelt(model="l2", min_size=cp.MIN_SIZE, jump=1).fit(x.reshape(-1, 1))
        ours = ruptures.Pelt(custom_cost=cp._cumulative_l2(x), min_size=cp.MIN_SIZE,
                             jump=1).fit(x.reshape(-1, 1))
        assert ours.predict(pen=pen) == own.predict(pen=pen), trial


def test_a_config_edited_under_its_name_is_another_series_not_a_step(tmp_path):
    """Comparisons key on what was measured: t1 run with -t 2, then edited to -t 4 (and a
    third variant on another model file) is three series, each flat, with no change point."""
    store = Store.open(str(tmp_path / "orch.db"))
    for k in range(6):
        add_session(store, k, {"t1": [20.0, 20.2, 19.8]}, flags="-t 2", model_sha256="a" * 64)
    for k in range(6, 12):
        add_session(store, k, {"t1": [15.0, 15.1, 14.9]}, flags="-t 4", model_sha256="a" * 64)
    for k in range(12, 15):
        add_session(store, k, {"t1": [9.0, 9.1, 8.9]}, flags="-t 4", model_sha256="b" * 64)
    series = {s.config: s for s in history(store, "hist")}
    assert set(series) == {"t1 (flags -t 2, model aaaaaaaa)", "t1 (flags -t 4, model aaaaaaaa)",
                           "t1 (flags -t 4, model bbbbbbbb)"}
    assert [len(s.points) for s in series.values()] == [6, 6, 3]
    assert all(not s.change_points for s in series.values())
    # the same flags and an unknown model file (never hashed) stay one series, by name
    other = Store.open(str(tmp_path / "same.db"))
    for k in range(4):
        add_session(other, k, {"t1": [20.0, 20.1, 19.9]}, flags="-t 2",
                    model_sha256=None if k % 2 else "a" * 64)
    assert [s.config for s in history(other, "hist")] == ["t1"]
