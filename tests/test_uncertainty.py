"""Intervals, A/B comparisons and the Holm correction (stats/uncertainty.py), against
scipy's own tests and hand-computed values."""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from orchestrator.stats.uncertainty import compare, correct, holm, mean_interval


def test_mean_interval_is_the_t_interval():
    x = [10.0, 10.4, 9.8, 10.1, 9.9]
    iv = mean_interval(x)
    sem = np.std(x, ddof=1) / math.sqrt(5)
    t = stats.t.ppf(0.975, 4)
    assert iv.mean == pytest.approx(10.04)
    assert (iv.low, iv.high) == pytest.approx((10.04 - t * sem, 10.04 + t * sem))
    assert iv.half_width_pct == pytest.approx(t * sem / 10.04 * 100)


def test_mean_interval_needs_two_values():
    assert mean_interval([5.0, None, float("nan")]).low is None
    assert mean_interval([]).mean is None


def test_paired_compare_is_a_t_test_on_log_ratios():
    a = [10.0, 11.0, 9.5, 10.2]
    b = [12.1, 13.0, 11.6, 12.2]
    c = compare(a, b, paired=True)
    d = np.log(b) - np.log(a)
    assert c.method == "paired"
    assert c.ratio == pytest.approx(math.exp(d.mean()))
    assert c.p_value == pytest.approx(stats.ttest_rel(np.log(b), np.log(a)).pvalue)
    assert c.ci_low_pct < c.delta_pct < c.ci_high_pct
    assert c.ci_low_pct > 0


def test_unpaired_compare_is_welch():
    a, b = [10.0, 10.5, 9.7], [8.0, 8.9, 8.2, 8.4]
    c = compare(a, b)
    assert c.method == "welch"
    assert c.p_value == pytest.approx(stats.ttest_ind(np.log(b), np.log(a), equal_var=False).pvalue)
    assert c.ci_high_pct < 0 and c.ci_low_pct < c.delta_pct < c.ci_high_pct



def test_a_single_run_gives_a_ratio_but_no_verdict():
    c = compare([10.0], [12.0])
    assert c.ratio == pytest.approx(1.2) and c.p_value is None and c.low is None
    assert not correct([c])[0].significant


def test_holm_step_down():
    assert holm([0.01, 0.04, 0.03, None]) == pytest.approx([0.03, 0.06, 0.06, None])
    assert holm([]) == []


def test_a_a_control_is_not_significant_and_a_real_effect_is():
    rng = np.random.default_rng(7)
    base = rng.normal(20, 0.6, 5)
    same = rng.normal(20, 0.6, 5)
    faster = base * 1.3 + rng.normal(0, 0.3, 5)
    aa, ab = correct([compare(base, same, paired=True), compare(base, faster, paired=True)])
    assert not aa.significant
    assert ab.significant and ab.ci_low_pct > 0 and ab.ci_low_pct <= ab.delta_pct <= ab.ci_high_pct


def test_paired_falls_back_to_welch_when_rounds_are_missing():
    # one complete round only: the runs are compared unpaired
    c = compare([10.0, None, 10.2], [11.0, 11.5, None], paired=True)
    assert c.method == "welch" and c.n_base == 2 and c.n_cand == 2
