"""Start-up stays lazy: the short commands import what they use, and nothing heavy.

`orch --help`, `orch runs`, `orch show N` (of a run that keeps its token figures: no numpy
nor pydantic either), `orch devices` (without --probe) and `orch lab status` are run as the
console script runs them (orchestrator.entry:main) in a subprocess on a small store; the
modules loaded by the end are checked, not the time (bench/startup measures that). The lazy
command table (orchestrator/cli/__init__.py COMMANDS) must name every command with its own
help. And the benches need no test runner: no bench imports pytest or a test
module that does (bench/run must work after the plain install).
"""
from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import click
import pytest
from cli_helpers import orch

from orchestrator.cli import COMMANDS, main

ROOT = Path(__file__).resolve().parents[1]
FOLDER = ROOT / "tests" / "fixtures" / "bigmoe" / "2026-07-21-pinned-dense-ab"

# packages no short command may import (their submodules included)
HEAVY = ("pandas", "scipy", "matplotlib", "celery", "kombu", "paramiko", "fabric", "arch",
         "statsmodels", "ruptures", "jinja2")
# Alembic's migration machinery: a store at the current revision is recognised without it
MIGRATIONS = ("alembic.command", "alembic.runtime", "alembic.script", "alembic.autogenerate",
              "orchestrator.db.migrations")

# sys.modules at exit, written as JSON to argv[1]; then orch's own entry point with argv[2:]
PROBE = """\
import atexit, json, sys
out = sys.argv[1]
atexit.register(lambda: open(out, "w").write(json.dumps(sorted(sys.modules))))
sys.argv = ["orch", *sys.argv[2:]]
from orchestrator.db.runs import Runs
from orchestrator.entry import main
main()
"""


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("startup") / "orch.db")
    code, out = orch("import", str(FOLDER), "--db", path)
    assert code == 0, out
    return path


def imported(db: str, tmp_path: Path, *argv: str) -> set[str]:
    """The modules `orch ARGV...` has loaded when it exits (it must exit 0)."""
    out = tmp_path / "modules.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ORCH_", "PYTHON"))}
    env.update(ORCH_DB=db, HOME=str(tmp_path), COLUMNS="200")
    done = subprocess.run([sys.executable, "-c", PROBE, str(out), *argv], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return set(json.loads(out.read_text()))


def offending(modules: set[str], banned: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == b or m.startswith(b + ".") for b in banned))


SHORT = [("--help",), ("runs",), ("show", "1"), ("devices",), ("lab", "status")]


@pytest.mark.parametrize("argv", SHORT, ids=[" ".join(a) for a in SHORT])
def test_short_commands_import_nothing_heavy(argv, db, tmp_path) -> None:
    modules = imported(db, tmp_path, *argv)
    banned = HEAVY + MIGRATIONS
    assert offending(modules, banned) == []


def test_runs_imports_no_pandas_nor_numpy(db, tmp_path) -> None:
    """The listing's n and mean tok/s are the runs' stored figures (stats/figures.py)."""
    modules = imported(db, tmp_path, "runs")
    assert offending(modules, ("pandas", "numpy", "scipy")) == []
    assert offending(imported(db, tmp_path, "runs", "--format", "json"), ("pandas",)) == []


# what `orch show` of a run with stored figures does without: numpy's vectorised statistics
# and pydantic's record models
SHOW_LIGHT = ("pandas", "numpy", "scipy", "pydantic", "pydantic_core", "orchestrator.record",
              "orchestrator.stats.statistics", "orchestrator.ingest")


@pytest.mark.parametrize("run", ["1", "8"])
def test_show_of_stored_figures_imports_no_numpy_nor_pydantic(run, db, tmp_path) -> None:
    """Run 1 is the study's longest, 8 another config; both have stored figures."""
    from orchestrator.db.runs import Runs
    from orchestrator.db.store import Store

    row = Runs(Store.open(db, create=False)).get(int(run))
    assert row.stored_figures is not None and row.stored_figures.n > 1000
    assert offending(imported(db, tmp_path, "show", run), SHOW_LIGHT) == []


def _top_level_commands() -> dict[str, click.Command]:
    """Every command object defined at the top of an orchestrator/cli module that is not a
    subcommand of a group, by the name it has."""
    import importlib
    import pkgutil

    import orchestrator.cli as package

    found: list[click.Command] = []
    for info in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(f"orchestrator.cli.{info.name}")
        found += [v for v in vars(module).values() if isinstance(v, click.Command)]
    subs = {id(c) for g in found if isinstance(g, click.Group) for c in g.commands.values()}
    return {c.name: c for c in found if id(c) not in subs and c is not main}


def test_the_lazy_table_names_every_command_with_its_help() -> None:
    commands = _top_level_commands()
    assert sorted(COMMANDS) == sorted(commands)
    ctx = click.Context(main)
    for name, command in commands.items():
        assert main.get_command(ctx, name) is command
        for limit in range(20, 120):
            assert main.listed_help(name, limit) == command.get_short_help_str(limit), name


def test_help_lists_every_command_and_each_command_has_help() -> None:
    code, out = orch("--help")
    assert code == 0
    listed = out.split("Commands:", 1)[1]
    for name in COMMANDS:
        assert f"\n  {name} " in listed, name
    for name in COMMANDS:
        code, out = orch(name, "--help")
        assert code == 0 and out.startswith("Usage: ") and f" {name} [OPTIONS]" in \
            out.splitlines()[0], out


# -- the benches need no test runner ---------------------------------------------------------
def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


def test_benches_import_no_test_runner() -> None:
    """A bench may reuse a tests/ helper module (bench/agent_overhead: agent_helpers), but
    none that imports pytest, directly or through another tests/ module."""
    tests = {p.stem: p for p in (ROOT / "tests").glob("*.py")}
    benches = [p for p in (ROOT / "bench").iterdir() if p.is_file()
               and (p.suffix == ".py" or p.read_text(errors="replace").startswith("#!"))]
    assert benches
    for bench in benches:
        seen: set[str] = set()
        todo = [(bench, bench.name)]
        while todo:
            path, via = todo.pop()
            for name in _imports(path):
                top = name.split(".")[0]
                assert top not in ("pytest", "_pytest", "tests"), f"{via} imports {name}"
                if top in tests and top not in seen and top != "conftest":
                    seen.add(top)
                    todo.append((tests[top], f"{via} -> tests/{top}.py"))
