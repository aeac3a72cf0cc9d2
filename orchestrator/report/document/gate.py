"""The CI gate's documents (`orch compare --fail-on`, `--summary`, `--junit`): a markdown
summary fit for a pull-request comment or a job summary, and a JUnit XML file with one
testcase per compared config. The verdicts are results/gate.py's (the comparison table's own
Holm-corrected verdict); this module only writes them down.

JUnit XML is written with `junitparser` (PyPI; orch's `ci` extra): it writes the element and
attribute set CI systems read (Jenkins' junit-10 schema: testsuites > testsuite > testcase >
failure/error/skipped with message and type), escapes data in names and messages, and counts
tests/failures/errors on the suite, which hand-written xml.etree code would redo.
"""
from __future__ import annotations

from pathlib import Path

from orchestrator.errors import ConfigError
from orchestrator.report.format.ab_rows import delta_cell, p_cell
from orchestrator.report.format.cells import verdict_cell
from orchestrator.report.format.formatters import pct
from orchestrator.report.format.markdown import Table, md_code, md_escape, render
from orchestrator.results.comparison import SideComparison
from orchestrator.results.gate import GateCase, GateResult
from orchestrator.stats.values import DASH


def threshold_words(result: GateResult) -> str:
    return ("any significant slowdown" if result.threshold_pct == 0 else
            f"a significant slowdown of more than {result.threshold_pct:g}%")


def case_text(case: GateCase) -> str:
    """"m t1 on build B: −15.2% [−17.0%, −13.3%], p(Holm) <0.001": one line per case."""
    c = case.comparison
    if c is None:
        return f"{case.model} {case.config} on {case.other}: its runs there did not end ok"
    return (f"{case.model} {case.config} on {case.other}: {delta_cell(c)} "
            f"vs {case.reference}, p(Holm) {p_cell(c.p_adjusted)}")


def summary_markdown(comp: SideComparison, result: GateResult, command: str = "") -> str:
    """The gate's verdict, then the regressions, then every compared config, as GitHub
    flavoured markdown (a pull-request comment, $GITHUB_STEP_SUMMARY, a GitLab note)."""
    regressions = result.regressions
    head = (f"### ❌ orch: {len(regressions)} regression{'s' * (len(regressions) != 1)}"
            if regressions else "### ✅ orch: no regression")
    sides = ", ".join(md_escape(s.label) for s in comp.others)
    lines = [head, "",
             f"{len(result.cases)} comparison{'s' * (len(result.cases) != 1)} of "
             f"{sides} against **{md_escape(comp.reference.label)}**; the gate "
             f"fails on {threshold_words(result)} (Holm-corrected p < 0.05, the table's "
             f"verdict)."]
    if regressions:
        lines += ["", "Regressions:", ""]
        lines += [f"- {md_escape(case_text(c))}" for c in regressions]
    table = Table(["", "model", "config", "side", "Δ tok/s [95% CI]", "p (Holm)", "verdict"],
                  ["---", "---", "---", "---", "---:", "---:", "---"])
    for case in result.cases:
        c = case.comparison
        table.rows.append([
            "❌" if case.regression else ("⚠️" if c is None else "✅"),
            md_escape(case.model), md_escape(case.config), md_escape(case.other),
            delta_cell(c) if c is not None and c.ratio is not None else DASH,
            p_cell(c.p_adjusted) if c is not None else DASH,
            verdict_cell(c) if c is not None else "runs did not end ok"])
    lines += ["", render(table)]
    if comp.summary and comp.summary[0] is not None:
        for other, ratio, n in zip(comp.others, comp.summary, comp.summary_configs):
            if ratio is not None:
                lines += ["", f"Geometric mean of the ratios, {md_escape(other.label)}: "
                              f"{pct((ratio - 1) * 100)} over {n} config{'s' * (n != 1)} "
                              f"(a summary, not a test)."]
    if command:
        lines += ["", f"<sub>{md_code(command)}</sub>"]
    return "\n".join(lines) + "\n"


def write_junit(result: GateResult, out: Path, name: str = "orch compare") -> None:
    """One testsuite, one testcase per compared config and side (classname: the side, name:
    model/config); a <failure> per regression with its Δ, interval and p, an <error> where
    the other side's runs of the config failed."""
    try:
        from junitparser import Error, Failure, JUnitXml, Skipped, TestCase, TestSuite
    except ImportError:
        raise ConfigError("--junit needs junitparser (pip install 'orch[ci]')") from None
    suite = TestSuite(name)
    for case in result.cases:
        tc = TestCase(f"{case.model} / {case.config}", classname=case.other, time=0)
        c = case.comparison
        if case.regression:
            tc.result = [Failure(message=case_text(case), type_="regression")]
            tc.system_out = _detail(case)
        elif c is None:
            tc.result = [Error(message=case_text(case), type_="runs failed")]
        elif not case.tested:
            tc.result = [Skipped(message=f"{case_text(case)}: one run on a side, no test")]
        else:
            tc.system_out = _detail(case)
        suite.add_testcase(tc)
    suite.update_statistics()
    xml = JUnitXml()
    xml.add_testsuite(suite)
    out.parent.mkdir(parents=True, exist_ok=True)
    xml.write(str(out), pretty=True)


def _detail(case: GateCase) -> str:
    c = case.comparison
    assert c is not None
    return (f"ratio {c.ratio:.4f} (95% CI {_num(c.low)}-{_num(c.high)}), Welch p "
            f"{_num(c.p_value)}, Holm p {_num(c.p_adjusted)}, runs {c.n_base} vs {c.n_cand}; "
            f"verdict: {verdict_cell(c)}")


def _num(value: float | None) -> str:
    return DASH if value is None else f"{value:.4g}"
