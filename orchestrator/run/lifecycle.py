"""Engines on the device, one at a time and never unaccounted for.

Before a session starts a cell, the device is asked for live orch jobs of any session
(run/device_jobs.py). A plain `orch run` refuses to start beside one (DeviceBusy); `--resume`
collects the jobs of its own session first; `--force` starts anyway. SIGINT, SIGTERM and
SIGHUP stop orch cleanly: the engine is killed, its run marked interrupted with USER_STOP (so
--resume re-runs it), the session ended, exit 128 + the signal (130, 143, 129).
"""
from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from orchestrator.errors import Busy
from orchestrator.transports.base import TransportError

# The cause of a run stopped by Ctrl-C or SIGTERM: --resume re-runs it (its job was killed by
# us, so the X line it left says nothing about the engine).
USER_STOP = "stopped by the user"
# The run's engine stopped by orch because the store refused a write (runner._store_failed):
# like USER_STOP, a later --resume runs the cell again instead of collecting orch's own kill.
STORE_STOP = "stopped: the store could not be written"


class DeviceBusy(TransportError, Busy):
    """Another orch job runs on the device: starting a cell would run two engines at once.
    A device error (`device error: ...`) that exits 4 like the other Busy errors."""

    exit_code = Busy.exit_code


class Stopped(KeyboardInterrupt):
    """SIGINT or SIGTERM reached orch: the run stops cleanly (exit 128 + signal)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@dataclass
class _Stopping:
    """The signal that is stopping this orch (None while none): the runner names it in the
    interrupted run's cause, the CLI turns it into the exit code."""

    signum: int | None = None

    @property
    def name(self) -> str | None:
        return signal.Signals(self.signum).name if self.signum else None


STOPPING = _Stopping()


def stop_signals() -> list[int]:
    """SIGINT, SIGTERM and SIGHUP (the terminal or the ssh session closed: like SIGTERM, exit
    129), each unless the caller ignores it (`nohup orch run ...` goes on after a hang-up)."""
    sigs = [signal.SIGINT, signal.SIGTERM, signal.SIGHUP]
    return [sig for sig in sigs if signal.getsignal(sig) is not signal.SIG_IGN]


@contextmanager
def stop_on_signals() -> Iterator[None]:
    """In the main thread: SIGINT, SIGTERM and SIGHUP raise Stopped, once. A second signal
    during the cleanup (the engine being killed, the run marked) is remembered but not raised: a
    half-done cleanup would leave a `running` row and an engine behind."""
    def handler(signum: int, _frame: Any) -> None:
        if STOPPING.signum is not None:
            return
        STOPPING.signum = signum
        raise Stopped(signum)

    STOPPING.signum = None
    previous = {sig: signal.signal(sig, handler) for sig in stop_signals()}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
