"""The code base's shape, checked: no import cycle among orch's modules, and every built-in
engine and device kind registered the way a plugin would be (issue 12)."""
from __future__ import annotations

import subprocess
import sys
from importlib.metadata import entry_points

from conftest import REPO

from orchestrator import plugins

BUILTIN_ENGINES = {"moe-probe", "bmoe", "llama-bench", "llama-cli", "llama-completion",
                   "llama-token", "generic"}
BUILTIN_KINDS = {"local", "ssh", "adb"}


def test_no_import_cycles():
    done = subprocess.run([sys.executable, "scripts/import-cycles"], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.rstrip().endswith("0 cycle(s)")


def test_builtins_are_entry_points_of_orch():
    for group, expected in ((plugins.ENGINES, BUILTIN_ENGINES),
                            (plugins.TRANSPORTS, BUILTIN_KINDS)):
        ours = {p.name for p in entry_points(group=group) if p.dist and p.dist.name == "orch"}
        assert ours == expected, group
        assert expected <= set(plugins.names(group))
