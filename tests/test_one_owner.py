"""One owner per concept, checked on the source (docs/architecture.md, "The result model"):
a run's and a config's figures are computed in stats/ and nowhere else, and a run's status is
named by `Status` everywhere, never by its string."""
from __future__ import annotations

import ast
from pathlib import Path

from conftest import REPO

from orchestrator.stats.status import Status

PACKAGE = REPO / "orchestrator"
STATS = PACKAGE / "stats"

# A reduction of numbers into a figure: numpy's, the statistics module's, pandas' methods.
NUMPY_REDUCTIONS = {"mean", "nanmean", "median", "nanmedian", "percentile", "nanpercentile",
                    "quantile", "nanquantile", "std", "nanstd", "var", "nanvar", "average"}
STATISTICS_FUNCTIONS = {"mean", "fmean", "geometric_mean", "harmonic_mean", "median",
                        "median_low", "median_high", "quantiles", "stdev", "pstdev", "variance",
                        "pvariance"}
METHOD_REDUCTIONS = {"mean", "median", "quantile", "std", "var"}

# Modules outside stats/ that reduce numbers, and why what they compute is no run's or
# config's figure. A run's or config's figure computed here would be a second owner.
NOT_RUN_FIGURES = {
    "orchestrator/results/routes.py": "a route trace's figures (experts per token, overlap "
                                      "between tokens): their one owner, not RunFigures'",
    "orchestrator/results/drift.py": "the drift caveat's rank tests over the runs' stored "
                                     "means (a caveat about the session, not a figure)",
    "orchestrator/run/cooldown.py": "a sensor's idle baseline (calibration), no run's figure",
    "orchestrator/run/probe_output.py": "the device's ceilings (the probe's passes)",
    "orchestrator/run/validity.py": "the machine's load and frequency while a run ran "
                                    "(a validity caveat, from the agent's samples)",
    "orchestrator/report/plots.py": "axis limits and a caption's sampling interval: drawing",
}


def _modules() -> dict[str, ast.Module]:
    return {str(p.relative_to(REPO)): ast.parse(p.read_text(encoding="utf-8"))
            for p in PACKAGE.rglob("*.py") if STATS not in p.parents}


def _reductions(tree: ast.Module) -> list[int]:
    """Lines that reduce numbers: np.mean(...), statistics.median(...), frame.mean(), a
    `from statistics import mean`, a scipy.stats import."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in ("statistics", "scipy.stats"):
            if node.module == "scipy.stats" or {a.name for a in node.names} & STATISTICS_FUNCTIONS:
                lines.append(node.lineno)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            name, owner = node.func.attr, node.func.value
            base = owner.id if isinstance(owner, ast.Name) else None
            if base in ("np", "numpy") and name in NUMPY_REDUCTIONS:
                lines.append(node.lineno)
            elif base == "statistics" and name in STATISTICS_FUNCTIONS:
                lines.append(node.lineno)
            elif base not in ("np", "numpy", "statistics") and name in METHOD_REDUCTIONS:
                lines.append(node.lineno)
    return lines


def test_no_module_outside_stats_computes_a_run_or_config_figure():
    found = {path: lines for path, tree in _modules().items() if (lines := _reductions(tree))}
    unexplained = {p: lines for p, lines in found.items() if p not in NOT_RUN_FIGURES}
    assert unexplained == {}, "a figure computed outside stats/ (stats/figures.py, " \
        f"config_figures.py own them): {unexplained}"
    assert set(NOT_RUN_FIGURES) <= set(found), "an allowance no longer needed: " \
        f"{set(NOT_RUN_FIGURES) - set(found)}"


STATUS_STRINGS = {s.value for s in Status}


def _named_status(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "status") or \
        (isinstance(node, ast.Name) and node.id == "status")


def _status_literals(tree: ast.Module) -> list[int]:
    """Lines where a status is written as its string: compared with `.status`, passed as
    `status=`, or stored under a "status" key."""
    def literal(node: ast.AST | None) -> bool:
        if isinstance(node, ast.Constant):
            return node.value in STATUS_STRINGS
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return any(literal(e) for e in node.elts)
        return False

    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(_named_status(o) for o in operands) and any(literal(o) for o in operands):
                lines.append(node.lineno)
        elif isinstance(node, ast.keyword) and node.arg == "status" and literal(node.value):
            lines.append(node.value.lineno)
        elif isinstance(node, ast.Dict):
            lines += [v.lineno for k, v in zip(node.keys, node.values)
                      if isinstance(k, ast.Constant) and k.value == "status" and literal(v)]
    return lines


def test_a_status_is_named_by_status_everywhere():
    """stats/status.py's Status is the one vocabulary: a "failed" typed somewhere else is a
    status the enum does not know about when it changes."""
    found = {path: lines for path, tree in _modules().items()
             if "migrations" not in path and (lines := _status_literals(tree))}
    assert found == {}


def test_the_checks_see_what_they_look_for():
    """The two checks above find what they forbid (so an empty result means something)."""
    sample = ast.parse("import numpy as np\nimport statistics\n"
                       "a = np.mean(x)\nb = statistics.fmean(x)\nc = frame['x'].median()\n"
                       "if row.status == 'ok': pass\nstore.update(status='failed')\n"
                       "d = {'status': 'timeout'}\ne = status in ('oom', 'killed')\n")
    assert _reductions(sample) == [3, 4, 5]
    assert sorted(_status_literals(sample)) == [6, 7, 8, 9]
