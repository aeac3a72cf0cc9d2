"""The one bounded wait of the test suite: poll a condition until it holds.

A test never sleeps to wait for an event (a file appears, a process ends, a row is stored):
it waits for the event itself, here, with a bound. The bound only ends a broken test; it is
never what a test checks, so a busy machine makes a test slower, not red.

    wait_for(pred, timeout, what=...)   pred()'s first truthy value, or AssertionError
    wait_until(pred, timeout)           True once pred() holds, else its last answer (False)

agent_helpers.wait_for, conftest_adb.wait_until, lab_helpers.wait_for and fuse_mount's wait are
this one, under the names and argument orders their tests already use.
"""
from __future__ import annotations

import os
import time
from typing import Callable, TypeVar

T = TypeVar("T")


def _poll(predicate: Callable[[], T], timeout: float, step: float) -> tuple[bool, T]:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return bool(value), value
        time.sleep(step)  # the poll interval of a bounded wait, not a wait for the event


def wait_for(predicate: Callable[[], T], timeout: float = 10.0, step: float = 0.05,
             what: str = "condition", on_fail: Callable[[], str] | None = None) -> T:
    """Poll predicate() every `step` s until it is truthy and return that value; after
    `timeout` s an AssertionError naming `what` (and on_fail()'s text, for the diagnosis)."""
    ok, value = _poll(predicate, timeout, step)
    if not ok:
        detail = f"\n{on_fail()}" if on_fail is not None else ""
        raise AssertionError(f"timed out after {timeout:g} s waiting for {what}{detail}")
    return value


def wait_until(predicate: Callable[[], object], timeout: float = 10.0, step: float = 0.05) -> bool:
    """Poll predicate() until it holds (True) or `timeout` s pass (False): for a test that
    asserts the outcome itself, `assert wait_until(...)`."""
    return _poll(predicate, timeout, step)[0]


def gated_lines(gate: str, lines: int, bound_s: int = 20) -> str:
    """A POSIX sh script (mksh + toybox too) that prints `line1` .. `lineN`, line i+1 only once
    the file `{gate}{i}` exists. A test that creates `{gate}{i}` when it has received line i
    can only see every line if the stream hands each one over as it comes (a stream that held
    lines back until the end would never release the next one), which is what "incremental"
    means, without a clock. A gate not created within bound_s s prints `stuck{i}` instead and
    ends the script, so such a stream fails the test rather than hanging it."""
    polls = bound_s * 20   # `sleep 0.05` each
    return (f"i=1; while [ $i -le {lines} ]; do echo line$i; [ $i -eq {lines} ] && break; n=0; "
            f"while [ ! -e '{gate}'$i ]; do n=$((n+1)); "
            f"[ $n -gt {polls} ] && {{ echo stuck$i; exit 9; }}; sleep 0.05; done; "
            "i=$((i+1)); done")


def release_gates(gate: str, data: bytes) -> None:
    """Create `{gate}{i}` for every complete line i of `data` (see gated_lines)."""
    for i in range(1, data.count(b"\n") + 1):
        path = f"{gate}{i}"
        if not os.path.exists(path):
            open(path, "wb").close()
