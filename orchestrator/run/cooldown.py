"""Thermal cooldown and idle-baseline calibration, both run by the agent on the device.

A timer is the wrong instrument for cooldown: a fixed wait does not reliably reach a thermal
baseline, so a long matrix drifts. The agent's `cooldown` subcommand polls the sensor with
builtins and reports T lines (readings) and one R line (met | max | nosensor); the controller
only shows them and records the outcome with the run. A lost link restarts the agent's
cooldown on a new connection (run/link_retry.py) for what is left of `max`: waiting is safe
to repeat, and the time and readings before the loss count.
"""
from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from orchestrator.config.matrix import Cooldown
from orchestrator.run.agent_client import AgentClient
from orchestrator.run.link_retry import LinkRetry
from orchestrator.run.stream import LineSplitter
from orchestrator.transports.base import TransportError


@dataclass
class Reading:
    elapsed_ms: int
    values: dict[str, int]


@dataclass
class CooldownResult:
    outcome: str                     # met | max | nosensor
    waited_s: float
    value_mC: int | None
    readings: list[Reading] = field(default_factory=list)

    @property
    def met(self) -> bool:
        return self.outcome == "met"


def _ints(fields: list[str]) -> dict[str, int]:
    out = {}
    for part in fields:
        key, _, value = part.partition("=")
        if value.lstrip("-").isdigit():
            out[key] = int(value)
    return out


def run_agent_cooldown(client: AgentClient, sensor: str, until_mC: int, min_s: float,
                       max_s: float, interval_s: float,
                       on_reading: Callable[[Reading], None] | None = None) -> CooldownResult:
    """The agent's cooldown, streamed; across a lost link it starts again on the new
    connection with min and max shortened by the time already waited."""
    readings: list[Reading] = []
    began = time.monotonic()
    retry = LinkRetry(client.transport, "the cooldown")

    def attempt() -> CooldownResult:
        offset_ms = int((time.monotonic() - began) * 1000)
        left_min, left_max = max(0.0, min_s - offset_ms / 1000), max(0.0, max_s - offset_ms / 1000)
        result = _cooldown_once(client, sensor, until_mC, left_min, left_max, interval_s,
                                offset_ms, readings, on_reading, retry.alive)
        result.waited_s += offset_ms / 1000.0
        return result
    return retry.call(attempt)


def _cooldown_once(client: AgentClient, sensor: str, until_mC: int, min_s: float, max_s: float,
                   interval_s: float, offset_ms: int, readings: list[Reading],
                   on_reading: Callable[[Reading], None] | None,
                   alive: Callable[[], None]) -> CooldownResult:
    argv = [client.transport.shell, client.agent_path, "cooldown", sensor, str(int(until_mC)),
            str(int(min_s * 1000)), str(int(max_s * 1000)), str(max(50, int(interval_s * 1000)))]
    splitter = LineSplitter()
    for chunk in client.transport.stream(argv):
        alive()   # the link works: a later loss is a new outage
        for line in splitter.feed(chunk):
            parts = line.split("\t")
            if parts[0] == "T" and len(parts) >= 2 and parts[1].isdigit():
                reading = Reading(offset_ms + int(parts[1]), _ints(parts[2:]))
                readings.append(reading)
                if on_reading is not None:
                    on_reading(reading)
            elif parts[0] == "R" and len(parts) >= 3:
                value = int(parts[3]) if len(parts) > 3 and parts[3].lstrip("-").isdigit() else None
                return CooldownResult(parts[1], int(parts[2]) / 1000.0, value, list(readings))
    raise TransportError(f"{client.transport.name}: the agent's cooldown ended without a result")


def wait_for_condition(client: AgentClient, spec: Cooldown, baseline: dict[str, float] | None,
                       on_reading: Callable[[Reading], None] | None = None) -> CooldownResult:
    return run_agent_cooldown(client, spec.sensor, spec.threshold_mC(baseline), spec.min,
                              spec.max, spec.interval, on_reading)


def calibrate(client: AgentClient, seconds: float = 60.0, interval_s: float = 1.0,
              on_reading: Callable[[Reading], None] | None = None,
              facts: dict[str, str] | None = None) -> tuple[dict[str, float], list[str]]:
    """Idle baseline per sensor: the median of the last third of a quiet period's readings,
    and the idle power (`power_w`, W, over the whole period; stats/energy.py) where the
    device has a power source. Returns (baseline, notes); a note says when a sensor was still
    falling (not settled), or why idle power was not measured."""
    # An impossible condition (-274 °C) makes the agent report for the whole period; min =
    # the period too, so that a device without a temperature sensor still gives its power
    # readings for all of it (the agent ends a sensorless wait once min has passed).
    result = run_agent_cooldown(client, "cpu", -274000, seconds, seconds, interval_s, on_reading)
    series: dict[str, list[int]] = {}
    for reading in result.readings:
        for key, name in (("cpu_mC", "cpu"), ("batt_mC", "battery")):
            if key in reading.values:
                series.setdefault(name, []).append(reading.values[key])
    baseline: dict[str, float] = {}
    notes: list[str] = []
    for name, values in series.items():
        tail = values[-max(1, len(values) // 3):]
        baseline[name] = float(statistics.median(tail))
        head = values[: max(1, len(values) // 3)]
        if len(values) >= 6 and statistics.median(head) - baseline[name] > 1000:
            notes.append(f"{name} fell {(statistics.median(head) - baseline[name]) / 1000:.1f} °C "
                         f"during calibration: it may not have settled; calibrate longer")
    if not baseline:
        notes.append("no readable CPU or battery temperature sensor on this device")
    from orchestrator.stats.energy import idle_power_w

    idle, why = idle_power_w([{"t_ms": r.elapsed_ms, **r.values} for r in result.readings],
                             facts or {})
    if idle is not None:
        baseline["power_w"] = idle
    else:
        notes.append(f"idle power: {why}")
    return baseline, notes
