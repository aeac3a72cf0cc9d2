"""Files that are not regular files (a FIFO, a link to /dev/zero, a directory) are refused
with one line naming them and exit 2, at once: never hashed, never read whole, never waited
on; and a prompt too long for one argv element is refused at load (docs/path-check.md).
Each orch call runs under an alarm (bounded_orch): a hang fails its test instead of the suite,
and the bound is never what a test checks."""
from __future__ import annotations

import os
import signal
import subprocess
import uuid
from pathlib import Path

import pytest
from cli_helpers import orch

from orchestrator.config.local_files import ARG_MAX_BYTES, MAX_PROMPT_BYTES
from orchestrator.transports.base import sha256_file
from orchestrator.transports.posix import HASH_TIMEOUT_MAX, hash_timeout

HEAD = """\
name: special
engine: moe-probe
tokens: 4
cooldown: 0
configs:
  a: --layers 2 --experts 4 --expert-mb 0.0625 --top-k 1
"""
BOUND_S = 60.0   # far above what a refusal takes; a hang fails the test instead of the suite


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ORCH_DB", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    return tmp_path


def special(root: Path, kind: str) -> Path:
    """A FIFO, a symlink to /dev/zero or a directory under `root`, uniquely named."""
    path = root / f"{kind}-{uuid.uuid4().hex[:12]}"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "zero":
        path.symlink_to("/dev/zero")
    else:
        path.mkdir()
    return path


class Hung(BaseException):
    """Raised by the alarm in a call that did not return in time (a BaseException, so orch's
    error handler does not turn it into an exit code)."""


def bounded_orch(*args: str) -> tuple[int, str]:
    """orch(*args) in-process (orch run wants the main thread for its signal handlers), with
    an alarm after BOUND_S: a hang (a blocked FIFO open or read) fails the test instead of
    the suite; (code, output)."""
    def ring(_signum: int, _frame: object) -> None:
        raise Hung(f"orch {' '.join(args)} still running after {BOUND_S:g} s")

    previous = signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, BOUND_S)
    try:
        code, output = orch(*args)
    except Hung as exc:
        pytest.fail(str(exc))
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    return code, output


def last_line(output: str) -> str:
    lines = [line for line in output.splitlines() if line.strip()]
    assert lines, output
    return lines[-1]


KINDS = {"fifo": "(a FIFO)", "zero": "(a character device)", "dir": "(a directory)"}


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("key", ["model", "prompt_file", "binary"])
def test_local_special_file_is_refused_at_load(here: Path, kind: str, key: str) -> None:
    path = special(here, kind)
    body = {"model": f"prompt: hi\nmodels:\n  m: {{local: {path.name}}}\n",
            "prompt_file": f"prompt_file: {path.name}\n",
            "binary": f"prompt: hi\nbinary: {{local: {path.name}}}\n"}[key]
    (here / "m.yaml").write_text(HEAD + body)
    code, output = bounded_orch("run", "m.yaml")
    line = last_line(output)
    assert code == 2, output
    assert line.startswith(("error: m.yaml:", "m.yaml:")), output
    assert f"{path.name} is not a regular file {KINDS[kind]}" in line, output
    where = {"model": "models.m.local", "prompt_file": "prompt_file", "binary": "binary.local"}
    assert f": {where[key]}: " in line, output
    assert "Traceback" not in output
    assert not (here / "orch.db").exists()   # refused before anything was opened


def test_inline_prompt_over_one_argument_is_refused(here: Path) -> None:
    (here / "m.yaml").write_text(HEAD + f"prompt: {'x' * 200 * 1024}\n")
    code, output = bounded_orch("run", "m.yaml")
    assert code == 2, output
    assert "prompt is 204800 bytes; one argument can hold at most 131072 on Linux" \
        in last_line(output), output


def test_prompt_just_within_the_bound_loads(here: Path) -> None:
    from orchestrator.config.matrix import load_matrix

    (here / "p.txt").write_bytes(b"y" * MAX_PROMPT_BYTES)
    (here / "m.yaml").write_text(HEAD + "prompt_file: p.txt\n")
    assert len(load_matrix(here / "m.yaml").prompt_text) == MAX_PROMPT_BYTES
    assert MAX_PROMPT_BYTES < ARG_MAX_BYTES


@pytest.mark.parametrize("size", [200 * 1024, 50 * 2**30])
def test_long_prompt_file_is_refused_from_its_size(here: Path, size: int) -> None:
    """A 50 GiB (sparse) prompt file is refused from its size, never read: the refusal names
    the exact size, which a read of 50 GiB into memory could not have come back with."""
    with open(here / "p.txt", "wb") as handle:
        handle.truncate(size)
    (here / "m.yaml").write_text(HEAD + "prompt_file: p.txt\n")
    code, output = bounded_orch("run", "m.yaml")
    assert code == 2, output
    assert f"prompt is {size} bytes; one argument can hold at most 131072" in last_line(output)


def test_local_hash_refuses_a_fifo_at_once(tmp_path: Path) -> None:
    fifo = special(tmp_path, "fifo")
    with pytest.raises(OSError, match="not a regular file"):
        sha256_file(fifo)


def test_hash_timeout_scales_with_size() -> None:
    assert hash_timeout(0) == 60
    assert hash_timeout(50 * 1048576 * 60) == 120
    assert hash_timeout(10**15) == HASH_TIMEOUT_MAX == 3600


def _left_running(unique: str) -> list[str]:
    found = subprocess.run(["pgrep", "-af", unique], check=False, capture_output=True, text=True)
    return [line for line in found.stdout.splitlines() if "pgrep" not in line]


@pytest.mark.parametrize("kind", ["fifo", "zero", "dir"])
def test_device_model_that_is_no_regular_file_is_not_hashed(here: Path, kind: str) -> None:
    """A device-path model (the local device) that is a FIFO, a link to /dev/zero or a
    directory: one line naming it, exit 2, and no sha256sum (or its shell) left behind."""
    path = special(here, kind)
    (here / "m.yaml").write_text(HEAD + f"prompt: hi\nmodels:\n  m: {path}\n")
    code, output = bounded_orch("run", "m.yaml")
    assert code == 2, output
    line = last_line(output)
    assert f"{path} is not a regular file" in line and "not hashed" in line, output
    assert "Traceback" not in output
    assert _left_running(path.name) == []


def test_a_timed_out_local_command_leaves_no_child(tmp_path: Path) -> None:
    """LocalTransport.run's timeout kills the command's whole group: a `sha256sum` (here a
    `sleep`) the shell started does not read on after the shell is gone."""
    from orchestrator.transports.base import CommandTimedOut
    from orchestrator.transports.local import LocalTransport

    from waiting import wait_until

    pids = tmp_path / "pids"
    transport = LocalTransport.__new__(LocalTransport)
    transport.name, transport.env = "local", {}
    with pytest.raises(CommandTimedOut):
        transport.run(["sh", "-c", f'sleep 300 & echo $! > "{pids}"; wait'], timeout=1)
    child = int(pids.read_text())

    def gone() -> bool:
        try:
            return Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
        except OSError:
            return True
    assert wait_until(gone, 10), "the shell's child outlived the timeout"
