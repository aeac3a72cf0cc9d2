"""The agent's OOM evidence (docs/agent-protocol.md, "OOM evidence"): a kernel log line naming
the engine's pid counts only when it was logged after the job started. Pids are reused, and an
older OOM line naming a reused pid once turned a plain SIGKILL into `oom`.

A fake `dmesg` on PATH (under every agent shell) prints START until the engine has written END,
then END; the engine writes END (with its own pid in the OOM lines) and SIGKILLs itself.
"""
from __future__ import annotations

from pathlib import Path

import pytest
from agent_helpers import Shell, run_job

pytestmark = pytest.mark.timeout(120)

BOOT = "[    0.100000] Linux version 6.1 (fake)"
OLD_OOM = "[   50.000000] Out of memory: Killed process $$ (sh) total-vm:1kB"   # an older process
NEW_OOM = "[  100.000000] Out of memory: Killed process $$ (sh) total-vm:2kB"   # the engine


def run_killed_engine(shell: Shell, tmp_path: Path, start: list[str], end: list[str]):
    """A job whose kernel log is START when it begins and END when its engine dies of SIGKILL;
    the job's result. In END, `$$` is the engine's pid (START is read before the engine runs,
    and the agent keeps only its last line, the mark)."""
    fake = tmp_path / "fakebin"
    fake.mkdir()
    start_log, end_log = tmp_path / "start.log", tmp_path / "end.log"
    start_log.write_text("".join(line + "\n" for line in start))
    dmesg = fake / "dmesg"
    dmesg.write_text(f"#!{shell.interpreter}\n"
                     f"if [ -e '{end_log}' ]; then cat '{end_log}'; else cat '{start_log}'; fi\n")
    dmesg.chmod(0o755)
    # The engine writes END: a line with $$ through echo (the engine's shell expands it), the
    # runs of other lines from files; renamed into place in one step, then it kills itself:
    # no one here sends the SIGKILL.
    parts: list[str] = []
    chunk: list[str] = []

    def flush() -> None:
        if chunk:
            path = tmp_path / f"chunk{len(parts)}"
            path.write_text("".join(line + "\n" for line in chunk))
            parts.append(f"cat '{path}'")
            chunk.clear()
    for line in end:
        if "$$" in line:
            flush()
            parts.append(f'echo "{line}"')
        else:
            chunk.append(line)
    flush()
    engine = ("{ " + "; ".join(parts) + f"; }} > '{end_log}.tmp' && "
              f"mv '{end_log}.tmp' '{end_log}' && kill -9 $$")
    path = f"{fake}:{shell.environ()['PATH']}"
    res = run_job(shell, tmp_path / "job", [shell.interpreter, "-c", engine],
                  extra_env={"PATH": path})
    assert res.x[:2] == ["137", "9"], res.lines
    return res


def oom_warnings(res) -> list[str]:
    return [w for w in res.payloads("W") if w.startswith("oom: ")]


def test_oom_logged_after_the_start_is_evidence(shell, tmp_path):
    res = run_killed_engine(shell, tmp_path, [BOOT], [BOOT, NEW_OOM])
    found = oom_warnings(res)
    assert len(found) == 1 and "total-vm:2kB" in found[0], res.payloads("W")
    assert res.x[3:] == ["cause=oom"]


def test_oom_line_from_before_the_start_is_no_evidence(shell, tmp_path):
    # the log names the engine's pid in an OOM line logged before the job began (a reused pid)
    res = run_killed_engine(shell, tmp_path, [BOOT], [OLD_OOM, BOOT])
    assert not oom_warnings(res), res.payloads("W")
    assert res.x[3:] == [], res.x


def test_log_that_wrapped_past_the_mark_is_all_new(shell, tmp_path):
    # the kernel's ring buffer overwrote everything the log held at the start
    start = [BOOT, "[    1.000000] mark line"]
    res = run_killed_engine(shell, tmp_path, start, ["[   99.000000] newer", NEW_OOM])
    found = oom_warnings(res)
    assert len(found) == 1 and "total-vm:2kB" in found[0], res.payloads("W")


def test_long_log_is_cut_by_grep_not_by_the_shell(shell, tmp_path):
    # 100k lines (~6 MB, a large kernel ring buffer): the old OOM line of a reused pid near the
    # top, the job's mark, then the engine's own OOM line; a shell pattern over this log took
    # minutes in mksh, this must end like any other job (the attach timeout bounds it)
    lines = [f"[{n // 1000:5d}.{n % 1000:06d}] some driver said something, line {n}"
             for n in range(100_000)]
    res = run_killed_engine(shell, tmp_path, lines, [OLD_OOM, *lines, NEW_OOM])
    found = oom_warnings(res)
    assert len(found) == 1 and "total-vm:2kB" in found[0], res.payloads("W")
