"""The agent's OOM evidence (issue 16's `oom` status): a kernel log line naming the engine's
pid counts only when it was logged after the job started. Pids are reused, and the suite's
own memory-cgroup test leaves real OOM lines in the host's log, so an older line naming a
reused pid once turned a plain SIGKILL into `oom`. A fake `dmesg` on PATH (under every agent
shell) prints a file the engine writes before killing itself."""
from __future__ import annotations

import pytest
from agent_helpers import SHELL_NAMES, make_shell, missing_tools, run_job
from ci import unavailable

BOOT = "[    0.100000] Linux version 6.1 (fake)"


@pytest.fixture(params=SHELL_NAMES)
def shell(request, tmp_path):
    missing = missing_tools(request.param)
    if missing:
        unavailable(f"{request.param}: missing {', '.join(missing)}")
    return make_shell(request.param, tmp_path)


@pytest.mark.parametrize("logged", ["after", "before"])
def test_oom_evidence_must_be_logged_after_the_job_started(shell, tmp_path, logged):
    log, fake = tmp_path / "kmsg", tmp_path / "fakebin"
    fake.mkdir()
    dmesg = fake / "dmesg"
    # before the engine writes the file, the log holds one boot line: the job's mark
    dmesg.write_text(f"#!{shell.interpreter}\ncat {log} 2>/dev/null || echo '{BOOT}'\n")
    dmesg.chmod(0o755)
    oom = "[  100.000000] Out of memory: Killed process $$ (sh) total-vm:1kB"
    lines = [f"echo '{BOOT}'", f'echo "{oom}"'] if logged == "after" \
        else [f'echo "{oom}"', f"echo '{BOOT}'"]
    engine = "{ " + "; ".join(lines) + f"; }} > {log}; kill -9 $$"
    path = f"{fake}:{shell.environ()['PATH']}"
    res = run_job(shell, tmp_path / "job", [shell.interpreter, "-c", engine],
                  extra_env={"PATH": path})
    assert res.x[1] == "9"
    found = [w for w in res.payloads("W") if w.startswith("oom: ")]
    if logged == "after":
        assert found and "Killed process" in found[0], res.payloads("W")
    else:
        assert not found, found
