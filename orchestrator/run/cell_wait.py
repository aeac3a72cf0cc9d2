"""The wait before a cell: the matrix's cooldown, a thermal condition (polled on the device
by the agent: run/cooldown.py) or a fixed timer counted down in one-second steps, shown on
the board as it goes. `orch run`'s cell loop and the lab's tasks both wait through here
(run/session.py, run_or_collect)."""
from __future__ import annotations

from dataclasses import dataclass

from orchestrator.run.cooldown import Reading, wait_for_condition
from orchestrator.run.device_session import DeviceSession
from orchestrator.run.progress import Progress
from orchestrator.run.runner import DeviceRunner


@dataclass
class Settled:
    waited_s: float = 0.0
    met: bool | None = None          # None: a fixed wait, no condition
    temps: dict[str, int] | None = None


def settle(device: DeviceSession, first: bool) -> Settled:
    """The cooldown before a cell: the thermal condition before every cell (the first one
    too: it should start from the baseline as well), or the fixed timer between cells."""
    spec, progress = device.cooldown, device.progress
    if spec.is_condition:
        target_c = spec.threshold_mC(device.baseline) / 1000.0   # the board shows what it waits for

        def shown(reading: Reading) -> None:
            temp = reading.values.get("value_mC")
            progress.cooldown(spec.max, spec.max - reading.elapsed_ms / 1000.0,
                              None if temp is None else temp / 1000.0, target_c)

        result = wait_for_condition(device.client, spec, device.baseline, shown)
        if result.outcome == "max":
            progress.note(f"cooldown hit its max ({spec.max:g} s) before the condition was met")
        elif result.outcome == "nosensor":
            progress.note(f"cooldown: sensor {spec.sensor!r} is not readable on this device")
        last = result.readings[-1].values if result.readings else {}
        return Settled(result.waited_s, result.met if result.outcome != "nosensor" else None,
                       {k: v for k, v in last.items() if v is not None} or None)
    if first or not spec.seconds:
        return Settled()
    count_down(device.runner, progress, spec.seconds)
    return Settled(spec.seconds)


def count_down(runner: DeviceRunner, progress: Progress, seconds: float) -> None:
    """A fixed cooldown, in one-second steps so the board shows what is left."""
    progress.cooldown(seconds)
    left = seconds
    while left > 0:
        if runner.stop is not None and runner.stop.is_set():
            raise KeyboardInterrupt
        step = min(1.0, left)
        runner.sleep(step)
        left -= step
        progress.cooldown(seconds, left)
