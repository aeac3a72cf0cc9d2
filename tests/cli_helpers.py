"""Running the `orch` CLI in-process from tests."""
from __future__ import annotations

import threading
import time
from collections.abc import Callable

from click.testing import CliRunner

from orchestrator.cli import main


def orch(*args: str, input: str | None = None) -> tuple[int, str]:
    """(exit code, stdout+stderr) of `orch ARGS...`."""
    result = CliRunner().invoke(main, list(args), input=input, catch_exceptions=False)
    return result.exit_code, result.output


def orch_ok(*args: str) -> str:
    """The output of `orch ARGS...`, which must exit 0."""
    code, output = orch(*args)
    assert code == 0, output
    return output


def fake_thermal_zone(root, celsius: float = 38.0):
    """A thermal zone directory (one `cpu-0-0` zone at `celsius`) for ORCH_THERMAL_DIR; the
    zone's own directory is returned, so a test can write new temperatures into it."""
    zone = root / "thermal" / "thermal_zone0"
    zone.mkdir(parents=True)
    (zone / "type").write_text("cpu-0-0\n")
    (zone / "temp").write_text(f"{round(celsius * 1000)}\n")
    return zone


# a zone heated to 60 °C, then cooling in 3 °C steps (what the cooldown tests put orch through)
HEAT_CURVE = (50000, 55000, 60000, *range(57000, 30000, -3000))


class Heater(threading.Thread):
    """A device that heats up, then cools in 3 °C steps down to the first value at or below
    `limit_mC`, which it keeps. It is paced by orch, not by a clock: the next value goes into
    the zone (`write(mC)`) only once orch's cooldown has reported a reading of the current one
    (`watch(monkeypatch)` taps the readings), so orch meets every value of the curve in order
    however busy the machine is. `seen`: the values orch read, in order; `hot`: set once the
    first value is in the zone; `crossed_at`: time.time() just before the last value went in;
    `stuck`: a value orch did not read within `timeout` s (the heater gave up there)."""

    def __init__(self, write: Callable[[int], None], limit_mC: int, timeout: float = 60.0) -> None:
        super().__init__(daemon=True)
        self.write, self.timeout = write, timeout
        cut = next(i for i, value in enumerate(HEAT_CURVE) if value <= limit_mC)
        self.curve = list(HEAT_CURVE[:cut + 1])
        self.seen: list[int | None] = []
        self.hot = threading.Event()
        self.crossed_at: float | None = None
        self.stuck: int | None = None
        self._read = threading.Condition()

    def watch(self, monkeypatch) -> None:
        """Tap the readings of orch's thermal cooldown (the in-process `orch run`)."""
        from orchestrator.run import cell_wait

        real = cell_wait.wait_for_condition

        def tapped(client, spec, baseline, on_reading=None):
            def reading(r):
                with self._read:
                    self.seen.append(r.values.get("value_mC"))
                    self._read.notify_all()
                if on_reading is not None:
                    on_reading(r)
            return real(client, spec, baseline, reading)
        monkeypatch.setattr(cell_wait, "wait_for_condition", tapped)

    def run(self) -> None:
        for index, value in enumerate(self.curve):
            with self._read:
                before = len(self.seen)
            last = index == len(self.curve) - 1
            if last:
                self.crossed_at = time.time()
            self.write(value)
            self.hot.set()
            if last:
                return   # kept: the zone stays at the first value within the tolerance
            with self._read:
                if not self._read.wait_for(lambda: value in self.seen[before:], self.timeout):
                    self.stuck = value
                    return

    def values_read(self) -> list[int | None]:
        """`seen` without repeats: orch read a value more than once while it stayed."""
        return [v for i, v in enumerate(self.seen) if i == 0 or v != self.seen[i - 1]]


def ssh_device(name: str, sshd, workdir, known_hosts=None) -> str:
    """A devices.yaml entry (indented under `devices:`) for the test sshd."""
    return (f"  {name}:\n    kind: ssh\n    host: {sshd.host}\n    port: {sshd.port}\n"
            f"    user: {sshd.user}\n    key: {sshd.key}\n"
            f"    known_hosts: {known_hosts or sshd.known_hosts}\n    workdir: {workdir}\n")


def adb_device(name: str, phone) -> str:
    """A devices.yaml entry (indented under `devices:`) for the emulated phone."""
    return (f"  {name}:\n    kind: adb\n    serial: \"{phone.serial}\"\n"
            f"    adb_port: {phone.adb_port}\n    workdir: {phone.data_dir}/orch\n")


# a two-config moe-probe matrix that runs on `local` in a second or two
SMALL_PROBE_MATRIX = """\
    name: probe-small
    engine: moe-probe
    prompt: hello experts
    tokens: 12
    cooldown: 0
    sample_interval: 0.2s
    configs:
      c0: --io pread --cache-mb 0 --layers 4 --experts 8 --expert-mb 0.0625 --top-k 2
      c1: --io mmap --cache-mb 1 --layers 4 --experts 8 --expert-mb 0.0625 --top-k 2
    """
