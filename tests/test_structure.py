"""The code base's shape, checked: the layer contract and no import cycles (import-linter,
pyproject.toml's [tool.importlinter]; docs/architecture.md, "Layers"), ruff (pyflakes and
complexity, [tool.ruff]) and mypy ([tool.mypy]) passing, and every built-in engine and device
kind registered the way a plugin would be."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path
from importlib.metadata import entry_points

from ci import unavailable
from conftest import REPO

from orchestrator import plugins

BUILTIN_ENGINES = {"moe-probe", "bmoe", "llama-bench", "llama-cli", "llama-completion",
                   "llama-token", "generic"}
BUILTIN_KINDS = {"local", "ssh", "adb"}


def test_layer_contract_and_no_cycles():
    lint = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run([str(lint), "--no-cache"], cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "4 kept, 0 broken" in done.stdout


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
    hands report/ its data objects."""
    report = REPO / "orchestrator" / "report"
    offenders = [str(p.relative_to(REPO)) for p in report.rglob("*.py")
                 if any(m == "orchestrator.db" or m.startswith("orchestrator.db.")
                        for m in _run_time_imports(ast.parse(p.read_text(encoding="utf-8"))))]
    assert offenders == []


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
