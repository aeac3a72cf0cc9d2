"""The code base's shape, checked: the layer contract and no import cycles (import-linter,
pyproject.toml's [tool.importlinter]; docs/architecture.md, "Layers"), and every built-in
engine and device kind registered the way a plugin would be."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from importlib.metadata import entry_points

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
    assert "2 kept, 0 broken" in done.stdout


def test_builtins_are_entry_points_of_orch():
    for group, expected in ((plugins.ENGINES, BUILTIN_ENGINES),
                            (plugins.TRANSPORTS, BUILTIN_KINDS)):
        ours = {p.name for p in entry_points(group=group) if p.dist and p.dist.name == "orch"}
        assert ours == expected, group
        assert expected <= set(plugins.names(group))
