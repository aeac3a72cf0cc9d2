"""The code base's shape, checked: the layer contract and no import cycles (import-linter,
pyproject.toml's [tool.importlinter]; docs/architecture.md, "Layers"), ruff (pyflakes and
complexity, [tool.ruff]) and mypy ([tool.mypy]) passing, and every built-in engine and device
kind registered the way a plugin would be; and one owner per concept: a run's and a config's
figures are computed in stats/ only, a run's status is named by `Status` everywhere."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path
from importlib.metadata import entry_points

from ci import unavailable
from conftest import REPO

from orchestrator import plugins
from orchestrator.stats.status import Status

BUILTIN_ENGINES = {"moe-probe", "bmoe", "llama-bench", "llama-cli", "llama-completion",
                   "llama-token", "generic"}
BUILTIN_KINDS = {"local", "ssh", "adb"}


def test_layer_contract_and_no_cycles():
    lint = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run([str(lint), "--no-cache"], cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "5 kept, 0 broken" in done.stdout


def _run_time_imports(tree: ast.AST) -> list[str]:
    """The modules a source imports when it runs (not those under `if TYPE_CHECKING:`)."""
    out: list[str] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            out.extend(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.append(node.module)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return out


def test_views_read_no_store():
    """A view renders, it does not read the store: no module under report/ imports db/
    (also import-linter's "views read no store" contract); results/ reads and computes and
    hands report/ its data objects. Type-only imports count here too: a view names the rows
    results/ hands it by results/' names (results/listings.py re-exports RunRow, SessionRow)."""
    report = REPO / "orchestrator" / "report"
    offenders = [str(p.relative_to(REPO)) for p in report.rglob("*.py")
                 if any(m == "orchestrator.db" or m.startswith("orchestrator.db.")
                        for m in _all_imports(ast.parse(p.read_text(encoding="utf-8"))))]
    assert offenders == []


def _all_imports(tree: ast.AST) -> list[str]:
    """Every module a source imports, at run time or for type checking only."""
    return [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names] + [
        n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module]


def _tool(name: str) -> Path:
    """The venv's `name` (beside this Python); missing: skipped, or a failure under CI."""
    tool = Path(sys.executable).with_name(name)
    if not tool.exists():
        unavailable(f"needs {name} (pip install -e '.[test]')")
    return tool


def test_ruff_passes():
    done = subprocess.run([str(_tool("ruff")), "check", "--no-cache", "orchestrator", "tests"],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr


def test_mypy_passes():
    # .mypy_cache (gitignored) in the repository: a cold run takes a minute, a warm one seconds
    done = subprocess.run([str(_tool("mypy")), "--cache-dir", str(REPO / ".mypy_cache")],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr


def test_builtins_are_entry_points_of_orch():
    for group, expected in ((plugins.ENGINES, BUILTIN_ENGINES),
                            (plugins.TRANSPORTS, BUILTIN_KINDS)):
        ours = {p.name for p in entry_points(group=group) if p.dist and p.dist.name == "orch"}
        assert ours == expected, group
        assert expected <= set(plugins.names(group))


def _sources() -> dict[Path, str]:
    return {p: p.read_text(encoding="utf-8") for p in (REPO / "orchestrator").rglob("*.py")}


def test_only_the_store_reads_its_schema_and_takes_its_lock():
    """The read model (db/runs.py) and db/'s own modules are the only readers of the tables."""
    db = REPO / "orchestrator" / "db"
    offenders = [str(p.relative_to(REPO)) for p, text in _sources().items()
                 if db not in p.parents and any(s in text for s in (
                     "db import schema", "db.schema", "store.lock", "store.engine"))]
    assert offenders == []


def test_the_current_runs_rule_is_written_once():
    """Which runs count (not superseded) is db/runs.py's current_only, nowhere else."""
    found = [str(p.relative_to(REPO)) for p, text in _sources().items()
             for _ in range(text.count("superseded.is_(False)"))]
    assert found == ["orchestrator/db/runs.py"]


# Modules allowed to end the process, and why (docs/architecture.md, "Errors and exit codes")
EXITS = {
    "orchestrator/cli/handler.py": "the one error handler: an OrchError -> its exit code",
    "orchestrator/entry.py": "Ctrl-C while no command runs (importing, exiting): no handler yet",
    "orchestrator/lab/consumer.py": "`python -m orchestrator.lab.consumer`: its own process",
}


def test_only_the_error_handler_exits():
    """A failure is a raise of an OrchError (orchestrator/errors.py) that cli/handler.py maps
    to its exit code, never an exit of its own."""
    found = {str(p.relative_to(REPO)) for p, text in _sources().items()
             if any(s in text for s in ("sys.exit(", "SystemExit(", "ctx.exit(", "os._exit("))}
    # the lab consumer's heartbeat ends a consumer orphaned by its worker (os._exit: no
    # cleanup may run in a process whose parent is gone)
    assert found == set(EXITS), found


# ---- one owner per concept (docs/architecture.md, "The result model") ----------------------

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
    "orchestrator/report/document/plots.py": "axis limits and a caption's sampling interval: drawing",
    "orchestrator/report/document/trajectory_plot.py": "the y axis's top (a percentile of the "
                                                        "drawn rates): drawing",
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
