"""One `orch run` target per device kind, for tests that must run a cell on each: the local
device, a real sshd on 127.0.0.1, and the emulated phone (mksh with a toybox-only PATH). A
test module makes it a fixture:

    @pytest.fixture(params=KINDS)
    def target(request, workspace): return device_target(request, workspace)
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from cli_helpers import adb_device, ssh_device

KINDS = ("local", "ssh", "adb")


@dataclass
class Target:
    device: str     # its name in the workspace's devices.yaml
    runs: Path      # the device's runs directory, as this machine sees it
    sh: str         # the device's sh, for an engine script's shebang


def device_target(request: pytest.FixtureRequest, workspace: Path) -> Target:
    """The device of kind request.param, added to the workspace's devices.yaml (the
    `workspace` fixture's, whose `local` device works under workspace/dev-local)."""
    kind = request.param
    if kind == "local":
        return Target("local", workspace / "dev-local" / "runs", "/bin/sh")
    inventory = workspace / "devices.yaml"
    if kind == "ssh":
        sshd = request.getfixturevalue("sshd")
        inventory.write_text(inventory.read_text()
                             + ssh_device("sshdev", sshd, f"{workspace}/remote"))
        return Target("sshdev", workspace / "remote" / "runs", "/bin/sh")
    phone = request.getfixturevalue("phone")
    inventory.write_text(inventory.read_text() + adb_device("phone", phone))
    return Target("phone", Path(phone.data_dir) / "orch" / "runs", phone.sh)
