"""The result model (stats/): RunFigures stored and read back, ConfigFigures' rules, the one
ConfigKey comparability rule, Status; and that a store written before the figures existed
gets them once, by the same function."""
from __future__ import annotations

import json
import math

import pytest

from orchestrator.stats.config_figures import REPETITIONS, RunResult, combine
from orchestrator.stats.config_key import ConfigKey, Settings, base_name, build_label
from orchestrator.stats.figures import FIELDS, FIGURES_VERSION, RunFigures, rate
from orchestrator.stats.status import Status


def test_figures_round_trip_through_json_with_their_version() -> None:
    f = RunFigures(n=3, mean=2.5, min=1.0, settled=False, repetitions=(1.0, 2.0),
                   energy_note="not measured: charging", steady_from_token=6,
                   p95=float("nan"), max=float("inf"))
    stored = json.loads(json.dumps(f.stored(), allow_nan=False))
    assert stored["version"] == FIGURES_VERSION
    back = RunFigures.from_stored(stored)
    assert back == f.replace(p95=None, max=None)
    assert isinstance(back.n, int) and isinstance(back.steady_from_token, int)
    assert back.repetitions == (1.0, 2.0)


def test_other_versions_and_garbage_are_not_figures() -> None:
    assert RunFigures.from_stored(None) is None
    assert RunFigures.from_stored({"version": FIGURES_VERSION + 1, "n": 3}) is None
    assert RunFigures.from_stored("x") is None


def test_figures_read_like_a_mapping_for_the_views() -> None:
    f = RunFigures(n=4, mean=1.5)
    assert f.get("mean") == 1.5 and f.get("p5") is None and f.get("nope", 7) == 7
    assert f["n"] == 4 and list(f.as_dict()) == list(FIELDS)
    with pytest.raises(KeyError):
        f["nope"]


def test_rate_is_tokens_over_decode_seconds() -> None:
    assert rate(10, 2000.0) == 5.0
    assert rate(10, 0.0) is None and rate(10, None) is None


def _run(rid: int, status: str = "ok", **figures) -> RunResult:
    return RunResult(rid, status, RunFigures(**figures))


def test_a_config_is_its_ok_runs_mean_of_means_with_the_worst_pressure() -> None:
    runs = [_run(1, mean=10.0, n=100, min=5.0, peak_rss_gib=2.0, mem_floor_gib=1.0,
                 cache_hit_pct=50.0),
            _run(2, mean=12.0, n=100, min=4.0, peak_rss_gib=3.0, mem_floor_gib=0.5,
                 cache_hit_pct=70.0),
            _run(3, "timeout", mean=1.0, n=10, min=0.1, peak_rss_gib=9.0)]
    c = combine(runs)
    assert c.ok == (1, 2) and c.not_ok == (3,)
    assert c.statuses == {"ok": 2, "timeout": 1}
    assert c.get("mean") == 11.0 and c.mean.mean == 11.0 and c.mean.n == 2
    assert c.mean.low < 11.0 < c.mean.high
    assert (c.get("mean_ci_low"), c.get("mean_ci_high")) == (c.mean.low, c.mean.high)
    assert c.get("n") == 200 and c.get("cache_hit_pct") == 60.0
    assert (c.get("min"), c.get("peak_rss_gib"), c.get("mem_floor_gib")) == (4.0, 3.0, 0.5)
    assert c.spread.n == 2 and c.spread.stdev == pytest.approx(math.sqrt(2))


def test_not_measured_stays_none_and_nothing_ok_is_nothing() -> None:
    c = combine([_run(1, mean=10.0), _run(2, mean=12.0)])
    assert c.get("stall_ms_per_token") is None and c.values["stall_ms_per_token"] is None
    failed = combine([_run(1, "oom", mean=3.0)])
    assert failed.ok == () and failed.mean.mean is None and failed.get("mean") is None


def test_one_run_with_repetitions_shows_their_spread_and_history_tests_them() -> None:
    c = combine([_run(1, mean=10.0, repetitions=(9.0, 10.0, 11.0))])
    assert c.spread.unit == REPETITIONS and c.spread.n == 3
    assert c.mean.n == 1 and c.mean.low is None        # A/B: one run, no interval
    assert c.samples("mean") == ([9.0, 10.0, 11.0], REPETITIONS)
    assert c.samples("p5") == ([], "run")
    two = combine([_run(1, mean=10.0, repetitions=(9.0, 11.0)), _run(2, mean=12.0)])
    assert two.samples("mean") == ([10.0, 12.0], "runs") and two.spread.unit == "runs"


def test_an_unsettled_run_says_so_for_its_config() -> None:
    c = combine([_run(1, mean=1.0, settle_note="not settled (+12% first → last quarter)"),
                 _run(2, mean=1.0)])
    assert c.get("settle_note").startswith("not settled")


def test_a_config_overlap_is_its_runs_common_one() -> None:
    assert combine([_run(1, overlapped=True), _run(2, overlapped=True)]).overlapped is True
    assert combine([_run(1, overlapped=True), _run(2, overlapped=False)]).overlapped is None


def test_the_comparability_rule() -> None:
    a = ConfigKey.of("qwen", "c1", "-t  4 --x", "abc")
    assert a.comparable(ConfigKey.of("qwen", "c1", "-t 4 --x", "abc", build="0.3.36"))
    assert a.comparable(ConfigKey.of("qwen", "c1", "-t 4 --x", None))   # unknown model file
    assert not a.comparable(ConfigKey.of("qwen", "c1", "-t 8 --x", "abc"))   # edited
    assert not a.comparable(ConfigKey.of("qwen", "c1", "-t 4 --x", "def"))   # another quant
    assert not a.comparable(ConfigKey.of("gemma", "c1", "-t 4 --x", "abc"))
    labelled = ConfigKey.of("qwen", "c1", "-t 4 --x", "abc", label="four threads")
    assert labelled == ConfigKey.of("qwen", "c1", "-t 4 --x", "abc")      # labels decide nothing
    assert Settings.of(" -t  4 ", None) == Settings("-t 4", "")


def test_builds_are_part_of_the_key_and_not_of_the_name() -> None:
    key = ConfigKey.of("m", "t1@0.3.30", build="0.3.30")
    assert key.name == "t1" and key.build == "0.3.30" and key.cell(2) == "m|t1@0.3.30|2"
    assert ConfigKey.of(None, "c").cell(0) == "-|c|0"
    assert base_name("t1@0.3.30", "0.3.36") == "t1@0.3.30"
    assert build_label("/root/.cache/orch/llama.cpp/0.3.36/bin/llama-cli", "abc") == "0.3.36"
    assert build_label("/data/local/tmp/bmoe-cli", "3cb7ffb (10453)") == "3cb7ffb (10453)"


def test_status_is_the_stored_string() -> None:
    assert Status.OK == "ok" and f"{Status.TIMEOUT}" == "timeout"
    assert Status.of("oom") is Status.OOM and Status.of("from-the-future") is None
    assert Status.OK.counts and not Status.KILLED.counts and not Status.RUNNING.ended
