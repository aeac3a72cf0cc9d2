"""The CI gate: `orch compare --fail-on regression[:PCT]` exits 5 on a significant slowdown
(the table's Holm-corrected verdict) and 0 on an A/A store; `--summary` writes the markdown
verdict, `--junit` a JUnit XML file with a failure per regression."""
from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest
from cli_helpers import orch, orch_ok
from test_builds import OK3, add_session

from orchestrator.db.store import Store

SLOWER = [(8.5, "ok"), (8.6, "ok"), (8.4, "ok")]          # −15%
TEN_PCT = [(9.0, "ok"), (9.18, "ok"), (8.91, "ok")]        # −10%
SAME = [(10.1, "ok"), (9.9, "ok"), (10.05, "ok")]          # A/A: no real difference


def store_with(tmp_path, after: dict) -> str:
    db = str(tmp_path / "orch.db")
    store = Store.open(db)
    add_session(store, 0, {"t1": OK3, "t2": OK3, "t3": OK3}, "0.3.30")
    add_session(store, 1, after, "0.3.36")
    return db


def gate(db: str, *args: str) -> tuple[int, str]:
    return orch("compare", "--db", db, "--builds", "0.3.30", "0.3.36", *args)


@pytest.mark.extra("ci")
def test_slowdown_fails_with_summary_and_junit(tmp_path):
    db = store_with(tmp_path, {"t1": SLOWER, "t2": SAME, "t3": [(0, "failed")]})
    junit, summary = tmp_path / "out" / "junit.xml", tmp_path / "summary.md"
    code, out = gate(db, "--fail-on", "regression", "--junit", str(junit),
                     "--summary", str(summary))
    assert code == 5, out
    assert "regression: 1 of 3 comparisons slower" in out and "m t1 on build 0.3.36: −15" in out
    assert "verdict" in out            # the comparison table is still printed
    # JUnit XML: one testcase per compared config, a failure for the regression with its
    # Δ, interval and p; the failed runs an error
    root = ET.parse(junit).getroot()
    assert root.tag == "testsuites"
    [suite] = root.findall("testsuite")
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("3", "1", "1")
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    assert set(cases) == {"m / t1", "m / t2", "m / t3"}
    [failure] = cases["m / t1"].findall("failure")
    message = failure.get("message")
    assert failure.get("type") == "regression"
    assert "−15.3%" in message and "[−17.9%, −12.6%]" in message and "p(Holm) <0.001" in message
    assert cases["m / t1"].get("classname") == "build 0.3.36"
    assert not cases["m / t2"].findall("failure") and cases["m / t3"].findall("error")
    # the markdown summary: the verdict first, the regression listed, every config in a table
    text = summary.read_text()
    assert text.startswith("### ❌ orch: 1 regression\n")
    assert "- m t1 on build 0.3.36: −15.3% [−17.9%, −12.6%] vs build 0.3.30" in text
    assert "| ❌ | m | t1 | build 0.3.36 | −15.3% [−17.9%, −12.6%] | &lt;0.001 | slower |" \
        not in text                    # orch's own "<0.001" in a cell is not escaped away
    assert "| ❌ | m | t1 | build 0.3.36 | −15.3% [−17.9%, −12.6%] | <0.001 | slower |" in text
    assert "| ✅ | m | t2 | build 0.3.36 |" in text and "no significant difference" in text


def test_aa_store_passes(tmp_path):
    db = store_with(tmp_path, {"t1": SAME, "t2": SAME, "t3": SAME})
    code, out = gate(db, "--fail-on", "regression", "--summary", "-")
    assert code == 0, out
    assert out.startswith("### ✅ orch: no regression\n")
    assert "┃" not in out                # `--summary -`: stdout is the summary alone


def test_threshold(tmp_path):
    db = store_with(tmp_path, {"t1": TEN_PCT, "t2": SAME, "t3": SAME})
    code, out = gate(db, "--fail-on", "regression")
    assert code == 5 and "−10.0%" in out
    assert gate(db, "--fail-on", "regression:20")[0] == 0      # a 10% slowdown passes 20%
    assert gate(db, "--fail-on", "regression:9.5%")[0] == 5
    # without --fail-on the summary still judges, and the exit code stays 0
    text = orch_ok("compare", "--db", db, "--builds", "0.3.30", "0.3.36", "--summary", "-")
    assert text.startswith("### ❌ orch: 1 regression")
    for bad in ("regression:x", "slowdown", "regression:-3"):
        code, out = gate(db, "--fail-on", bad)
        assert code == 2 and "--fail-on" in out, out


def test_fail_on_spec_and_the_verdict_it_reads():
    from orchestrator.errors import ConfigError
    from orchestrator.results.gate import is_regression, parse_fail_on
    from orchestrator.stats.uncertainty import Comparison

    assert parse_fail_on("regression") == parse_fail_on("regression:") == 0
    assert parse_fail_on("regression:2.5%") == 2.5
    for bad in ("regression:nan", "regression:inf", "faster:3"):
        with pytest.raises(ConfigError, match="--fail-on"):
            parse_fail_on(bad)

    def c(ratio: float, p_adj: float | None, significant: bool) -> Comparison:
        return Comparison(ratio, ratio - 0.01, ratio + 0.01, p_adj, "welch", 3, 3,
                          p_adjusted=p_adj, significant=significant)

    assert is_regression(c(0.9, 0.01, True), 0)
    assert not is_regression(c(0.95, 0.01, True), 10)           # 5%: within the threshold
    assert is_regression(c(0.89, 0.01, True), 10)
    assert not is_regression(c(0.9, 0.2, False), 0)             # the table says: no difference
    assert not is_regression(c(1.2, 0.001, True), 0)            # faster
    assert not is_regression(c(0.5, None, False), 0)            # one run: no test
    assert not is_regression(None, 0)
