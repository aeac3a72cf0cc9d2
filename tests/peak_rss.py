"""The peak RSS of one command's own process, for the tests that bound it
(tests/test_long_lines.py, tests/test_big_runs.py).

A child forked from pytest starts with pytest's own high-water mark: Linux counts the
parent's pages in the child's copy of its memory at fork and keeps the larger of that and
the new program's in the process's rusage across exec, so after a few hundred tests the
ru_maxrss of any direct child is pytest's size (about 600 MB in a full CI run), whatever the
child did: a bound on it passes alone and fails in the suite. So the command runs under a
small launcher (below): a child of that starts from the launcher's few MB, and wait4 gives
its own ru_maxrss.
"""
from __future__ import annotations

import subprocess
import sys
from typing import Any

# Runs argv[1:] and prints its peak RSS (KiB) as stderr's last line; exits as it did.
_LAUNCHER = ("import os, subprocess, sys\n"
             "p = subprocess.Popen(sys.argv[1:])\n"
             "_, status, usage = os.wait4(p.pid, 0)\n"
             "print(usage.ru_maxrss, file=sys.stderr)\n"
             "sys.exit(os.waitstatus_to_exitcode(status))\n")


def run_measured(argv: list[str], **kwargs: Any) -> tuple[subprocess.CompletedProcess[str], float]:
    """Run ARGV (stdin closed, output captured as text): the finished process (its stderr
    without the measurement) and its peak RSS in MiB."""
    proc = subprocess.run([sys.executable, "-c", _LAUNCHER, *argv], capture_output=True,
                          text=True, stdin=subprocess.DEVNULL, **kwargs)
    lines = proc.stderr.rstrip("\n").split("\n")
    peak_mib = int(lines[-1]) / 1024
    proc.stderr = "\n".join(lines[:-1])
    return proc, peak_mib


def run_orch(argv: list[str], **kwargs: Any) -> tuple[subprocess.CompletedProcess[str], float]:
    """`orch ARGV...` under run_measured."""
    return run_measured([sys.executable, "-m", "orchestrator.entry", *argv], **kwargs)
