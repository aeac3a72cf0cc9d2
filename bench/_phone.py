"""A simulated phone to measure run designs on (bench/decision, tests/test_decision_run.py).

It runs through orch's real path on the `local` device: the agent, its sampler, the thermal
cooldown and the store. Its parts:
- a thermal zone (ORCH_THERMAL_DIR, type cpu-0-0) whose temperature a thread integrates:
  each token the engine makes adds `heat_c` °C, the excess over the ambient decays with time
  constant `tau_s`, and the ambient drifts by `drift_c_per_s` (the warming-room scenario);
- an engine (ENGINE below, bmoe's CSV and summary formats) whose speed per token is its
  config's true effect x a per-run noise (lognormal, `noise`; an outlier run `outlier_p` of
  the time, `outlier` slower) x the thermal factor of the zone's temperature then: 1% per °C
  above the ambient it was calibrated at (DVFS), 3% more per °C above `throttle_c`.
The physics (a run's noise, a token's time, the zone's heating and cooling) are
bench/_phone_physics.py's, shared with the pure model of bench/_decision_model.py.
Time is scaled: a simulated second is `scale` real seconds (0.01: a 45 s timer is 0.45 s).
The simulated clock advances by each token's own simulated time while the engine runs (the
engine writes it per token, so a busy machine that slows the engine process changes nothing),
and by real time / scale while the session waits a cooldown (the PhoneProgress hooks say when
a wait starts and ends); it stands still otherwise: orch's own per-cell work, a few hundred
ms of real time, would be tens of simulated seconds of free cooling. `Phone.clock_s` is then
the device's wall time (engine runs + cooldown waits), the figure bench/decision compares.
"""
from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from _phone_physics import Thermal

from orchestrator.run.progress import Progress

BENCH = Path(__file__).resolve().parent   # the engine imports _phone_physics from here

@dataclass(frozen=True)
class PhoneModel:
    seed: int = 0
    scale: float = 0.01          # real seconds per simulated second
    base_tps: float = 10.0       # tok/s of the baseline at the ambient temperature
    ambient_c: float = 30.0
    drift_c_per_s: float = 0.0   # ambient warming, °C per simulated second
    tau_s: float = 8.0           # thermal time constant, simulated seconds
    heat_c: float = 0.3          # °C per token
    throttle_c: float = 50.0
    noise: float = 0.01          # run-to-run lognormal sd
    outlier_p: float = 0.02      # a run is an outlier this often (a background task)
    outlier: float = 0.10        # and then this much slower


ENGINE_TEXT = r'''#!/usr/bin/env python3
"""The simulated phone's engine (bench/_phone.py): bmoe's CSV rows and summary lines."""
import json, os, sys, time
sys.path.insert(0, "@BENCH@")
from _phone_physics import run_factor, token_ms
args = sys.argv[1:]
def opt(name, default=None):
    return args[args.index(name) + 1] if name in args else default
n, csv = int(opt("-n", "8")), opt("--csv", os.devnull)
phone, effect = opt("--phone"), float(opt("--effect", "0"))
cfg = json.load(open(os.path.join(phone, "phone.json")))
count_file = os.path.join(phone, "runs")
count = int(open(count_file).read()) if os.path.exists(count_file) else 0
open(count_file, "w").write(str(count + 1))
factor = run_factor(cfg, count)
open(os.path.join(phone, "running"), "w").close()
heat = open(os.path.join(phone, "tokens"), "ab", buffering=0)
total = 0.0
with open(csv, "w") as out:
    out.write("step,steps,wall_ms,io_ms,compute_ms,read_bytes,cache_hit_pct,stall_ms,mgmt_ms\n")
    for i in range(1, n + 1):
        try:
            temp = int(open(os.path.join(phone, "thermal", "thermal_zone0", "temp")).read()) / 1000
        except (OSError, ValueError):
            temp = cfg["ambient_c"]
        ms = token_ms(cfg, effect, factor, temp)
        time.sleep(ms / 1000.0 * cfg["scale"])
        heat.write(f"{ms:.3f}\n".encode())
        total += ms
        out.write(f"{i},{n},{ms:.3f},0.000,{ms:.3f},0,-1.00,0.000,0.000\n")
        out.flush()
    out.write(f"# summary tokens={n} s/tok={total / n / 1000:.4f} tok/s={n * 1000 / total:.3f}\n")
os.unlink(os.path.join(phone, "running"))
print("the quick brown fox")
print(f"generation: {n} tokens, {total / n / 1000:.3f} s/token ({n * 1000 / total:.3f} tok/s)")
'''


class Phone:
    """The simulated phone's state in `root`: its zone, its engine, the thread that heats and
    cools it. Use as a context manager (the thread stops at the end)."""

    def __init__(self, root: Path, model: PhoneModel) -> None:
        self.root, self.model = root, model
        self.zone = root / "thermal" / "thermal_zone0"
        self.zone.mkdir(parents=True, exist_ok=True)
        (self.zone / "type").write_text("cpu-0-0\n")
        (root / "phone.json").write_text(json.dumps(asdict(model)))
        (root / "tokens").write_bytes(b"")
        self.engine = root / "phone_engine.py"
        self.engine.write_text(ENGINE_TEXT.replace("@BENCH@", str(BENCH)))
        self.engine.chmod(0o755)
        # the zone's temperature and the device's simulated clock (seconds of device time)
        self.thermal = Thermal(asdict(model))
        self.waiting = False            # a cooldown is under way (PhoneProgress)
        self.target_c: float | None = None   # ... to this temperature (None: a timer)
        self.wait_began: float | None = None
        self._write()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    @property
    def temp_c(self) -> float:
        return self.thermal.temp_c

    @property
    def clock_s(self) -> float:
        return self.thermal.clock_s

    @property
    def env(self) -> dict[str, str]:
        """The local device's env: orch's sampler and cooldown read this zone."""
        return {"ORCH_THERMAL_DIR": str(self.root / "thermal"),
                "ORCH_BATTERY_DIR": str(self.root / "nobattery")}

    def __enter__(self) -> "Phone":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()

    def _write(self) -> None:
        tmp = self.zone / "temp.tmp"             # by rename: the agent never reads half a value
        tmp.write_text(f"{int(round(self.temp_c * 1000))}\n")
        os.replace(tmp, self.zone / "temp")

    def _loop(self) -> None:
        m = self.model
        offset, last = 0, time.monotonic()
        with open(self.root / "tokens", "rb") as tokens:
            while not self._stop.wait(0.002):
                now = time.monotonic()
                real, last = now - last, now
                tokens.seek(offset)
                data = tokens.read()
                done = data[:data.rfind(b"\n") + 1]          # whole lines only
                offset += len(done)
                for line in done.split():
                    self.thermal.token(float(line))
                if (self.root / "running").exists():
                    self.waiting, self.wait_began = False, None
                elif self.waiting:
                    self._wait(real / m.scale)
                self._write()

    def _wait(self, dt: float) -> None:
        """A cooldown's dt simulated seconds. Under a thermal condition the wait ends at the
        first whole `POLL_S` after the zone reached the target, as a real agent polling at the
        default 1 s interval would see it (the agent here polls every 50 ms of real time, 5
        simulated seconds: its granularity is not the device's)."""
        if self.wait_began is None:
            self.wait_began = self.clock_s
        self.thermal.advance(dt)
        if self.target_c is not None and self.temp_c <= self.target_c:
            self.thermal.poll_end(self.wait_began)
            self.waiting, self.wait_began = False, None


class PhoneProgress(Progress):
    """Silent, but tells the phone when the session waits a cooldown (its clock runs then),
    and keeps the notes (the decision rule's progress lines)."""

    def __init__(self, phone: Phone) -> None:
        self.phone = phone
        self.notes: list[str] = []

    def cooldown(self, seconds: float, left: float | None = None, temp_c: float | None = None,
                 target_c: float | None = None) -> None:
        if target_c is not None:                             # the thermal condition: the
            self.phone.target_c = target_c                   # phone's own temperature says
            self.phone.waiting = self.phone.temp_c > target_c  # whether it still cools
        else:                                                # the fixed timer
            self.phone.target_c = None
            self.phone.waiting = left is None or left > 0

    def note(self, message: str) -> None:
        self.notes.append(message)


def target_c(model: PhoneModel, above_c: float = 2.0) -> float:
    """The condition cooldown's target as a calibrated phone would have it: its baseline (the
    ambient at the start) + `above_c`."""
    return model.ambient_c + above_c


def cooldown_target(model: PhoneModel, above_c: float = 2.0) -> str:
    """`target_c` as an absolute `until:` (no calibration period to wait)."""
    return f"{target_c(model, above_c):g}C"
