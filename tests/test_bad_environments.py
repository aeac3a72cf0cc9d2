"""Bad environments are one line and exit 1 (docs/reliability.md, "Bad environments"):
scripts/install on a Python older than orch needs stops before it builds a venv, and
`orch devices --probe` of a device it cannot reach (here: the real sshd with an empty
known_hosts, an unknown host key) names the device once, on stderr, and exits 1."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from cli_helpers import ssh_device
from click.testing import CliRunner

from orchestrator.cli import main

ROOT = Path(__file__).resolve().parents[1]


def test_install_on_an_old_python_is_one_line_before_any_venv(tmp_path: Path) -> None:
    """A python3 on PATH that is 3.9: one line naming it, exit 1, no .venv made."""
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "install", tmp_path / "scripts" / "install")
    fake = tmp_path / "bin" / "python3"
    fake.parent.mkdir()
    # answers what the script asks (its version), and would build a venv if asked to
    fake.write_text('#!/bin/sh\ncase "$1" in -c) echo 3.9 ;; -m) mkdir -p .venv/bin ;; esac\n')
    fake.chmod(0o755)
    env = {"PATH": f"{fake.parent}:/usr/bin:/bin", "HOME": str(tmp_path)}
    result = subprocess.run(["bash", str(tmp_path / "scripts" / "install")], env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1, result.stderr
    assert result.stderr == f"orch needs Python 3.11 or newer; this is 3.9 at {fake}\n"
    assert result.stdout == "" and not (tmp_path / ".venv").exists()


def test_install_refuses_a_venv_an_older_python_left(tmp_path: Path) -> None:
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "install", tmp_path / "scripts" / "install")
    old = tmp_path / ".venv" / "bin" / "python"
    old.parent.mkdir(parents=True)
    old.write_text("#!/bin/sh\necho 3.10\n")
    old.chmod(0o755)
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}
    result = subprocess.run(["bash", str(tmp_path / "scripts" / "install")], env=env,
                            capture_output=True, text=True, timeout=60)
    assert (result.returncode, result.stderr) == (
        1, "orch needs Python 3.11 or newer; this is 3.10 at .venv/bin/python\n")


def test_a_failed_probe_is_one_line_and_exit_1(sshd, tmp_path: Path) -> None:
    """The real sshd, a known_hosts without its key: `orch devices --probe` says so once."""
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    inventory = tmp_path / "devices.yaml"
    inventory.write_text("devices:\n" + ssh_device("box", sshd, tmp_path / "wd", empty))
    result = CliRunner().invoke(main, ["devices", "--probe", "-d", "box", "-i", str(inventory),
                                       "--db", str(tmp_path / "orch.db")])
    assert result.exit_code == 1, result.output
    lines = result.stderr.splitlines()
    # named once at its start (the advice names it again: `orch devices trust box`)
    assert len(lines) == 1 and lines[0].startswith("box: ") and "box: box" not in lines[0]
    assert "host key" in lines[0] and "Traceback" not in result.output
