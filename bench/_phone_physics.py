"""The simulated phone's physics, in one place (bench/_phone.py's docstring describes the
phone): a run's noise factor, a token's time at a temperature, and the zone's temperature as
tokens heat it and idle time cools it. Three users, one definition: the engine script the
real-path phone runs (it imports this file), the threaded zone of that phone, and the pure
model of bench/_decision_model.py, which replays a design without orch and so can run
hundreds of seeds.

Standard library only: the engine runs under any python3 on the device path.
"""
from __future__ import annotations

import math
import random
from typing import Any

POLL_S = 1.0     # the cooldown's default interval: when a real agent would see the target


def run_factor(cfg: dict[str, Any], count: int) -> float:
    """Run `count`'s speed factor on the phone of `cfg` (PhoneModel as a dict): lognormal
    noise, and an outlier run (a background task) `outlier_p` of the time."""
    rng = random.Random(f"{cfg['seed']}/{count}")
    factor = math.exp(rng.gauss(0.0, cfg["noise"]))
    if rng.random() < cfg["outlier_p"]:
        factor *= 1.0 - cfg["outlier"]
    return factor


def token_ms(cfg: dict[str, Any], effect: float, factor: float, temp_c: float) -> float:
    """One token's time at zone temperature `temp_c`: 1% slower per °C above the ambient
    the phone was calibrated at (DVFS), 3% more per °C above `throttle_c`."""
    thermal = 1.0 - 0.01 * max(0.0, temp_c - cfg["ambient_c"]) \
        - 0.03 * max(0.0, temp_c - cfg["throttle_c"])
    return 1000.0 / (cfg["base_tps"] * (1.0 + effect) * factor * max(0.2, thermal))


class Thermal:
    """The zone: `temp_c`, the drifting `ambient_c`, and `clock_s`, the device's simulated
    wall time (it advances only through `advance`)."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        self.cfg = cfg
        self.temp_c = self.ambient_c = float(cfg["ambient_c"])
        self.clock_s = 0.0

    def token(self, ms: float) -> None:
        """A token's heat, then its time."""
        self.temp_c += self.cfg["heat_c"]
        self.advance(ms / 1000.0)

    def advance(self, dt: float) -> None:
        """dt simulated seconds pass: the ambient drifts, the excess over it decays."""
        self.clock_s += dt
        self.ambient_c += self.cfg["drift_c_per_s"] * dt
        self.temp_c = self.ambient_c + (self.temp_c - self.ambient_c) * math.exp(
            -dt / self.cfg["tau_s"])

    def poll_end(self, began_s: float) -> None:
        """A thermal wait that began at `began_s` has just seen its target: it ends at the
        first whole POLL_S since it began, as an agent polling at the default 1 s interval
        would see it."""
        waited = self.clock_s - began_s
        self.advance(math.ceil(waited / POLL_S - 1e-9) * POLL_S - waited)

    def cool_until(self, target_c: float, max_s: float) -> None:
        """A condition cooldown, whole: wait until the zone is at or below `target_c` (seen
        at a poll), at most `max_s`."""
        began = self.clock_s
        while self.temp_c > target_c and self.clock_s - began < max_s:
            self.advance(POLL_S)
        if self.temp_c <= target_c:
            self.poll_end(began)
