"""Energy per token (docs/energy.md): the agent's power sources under mksh + toybox, dash and
bash; orch's joules against the test's own integral on the emulated phone (both sign
conventions, µA and mA, a charging phase, a gauge that updates every 5 s) and on a fake RAPL
tree with a wrap-around (local device, the agent under dash); and "no power source" / "—"
where there is none, as on this machine.

Over 400 lines on purpose: every power source on every shell and device kind, with the shared
fake gauges and RAPL trees they need.
"""
from __future__ import annotations

import itertools
import json
import os
import shlex
import subprocess
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from agent_helpers import AGENT, Shell
from cli_helpers import adb_device, orch

from orchestrator.db.runs import Runs
from orchestrator.db.store import Store
from orchestrator.stats import energy

ENGINES = Path(__file__).resolve().parent / "engines"
TOKENS = 20


# ---- the pure functions ----------------------------------------------------------------------

def test_trapezoid_and_counter_wrap():
    assert energy.trapezoid([0, 1, 3], [2.0, 4.0, 4.0]) == pytest.approx(3 + 8)
    assert energy.counter_joules([900, 990, 30, 100], 1000) == (pytest.approx((90 + 40 + 70) / 1e6), 1)
    assert energy.counter_joules([900, 30], None) == (None, 1)   # a wrap of unknown range


def test_units_by_magnitude():
    assert energy.battery_units([-512_000], [3_900_000])[2:] == ("uA", "uV")
    assert energy.battery_units([512], [3_900])[2:] == ("mA", "mV")


def _samples(power_key: dict, n: int = 8, step_ms: int = 500, **extra) -> list[dict]:
    return [{"t_ms": i * step_ms, "rss_kb": 1, **power_key, **extra} for i in range(n)]


def test_charging_is_not_measured_never_zero():
    s = _samples({"batt_ua": -500_000, "batt_uv": 3_900_000}, batt_charging=1)
    out = energy.summarise(s, {}, 20)
    assert out["not_measured"].startswith("charging") and "Wi-Fi" in out["not_measured"]
    assert all(out[k] is None for k in energy.ENERGY_FIELDS)
    assert energy.energy_note(out) == "not measured: charging"


def test_no_power_source_gives_no_summary():
    assert energy.summarise(_samples({}), {}, 20) is None
    assert energy.idle_power_w([{"t_ms": 0}], {}) == (None, "no power source")


def test_net_energy_subtracts_idle_power():
    s = _samples({"batt_uw": 3_000_000}, n=5)        # 3 W for 2 s
    out = energy.summarise(s, {}, 10, idle_w=1.0)
    assert out["energy_j"] == pytest.approx(6.0)
    assert out["j_per_token"] == pytest.approx(0.6) and out["tokens_per_j"] == pytest.approx(10 / 6)
    assert out["net_j_per_token"] == pytest.approx((6.0 - 2.0) / 10)


def test_a_gauge_slower_than_sampling_is_flagged():
    values = [-400_000] * 10 + [-600_000] * 10 + [-500_000] * 10
    s = [{"t_ms": i * 500, "rss_kb": 1, "batt_ua": v, "batt_uv": 3_900_000}
         for i, v in enumerate(values)]
    out = energy.summarise(s, {}, 20, interval_s=0.5)
    assert out["gauge_every_s"] == pytest.approx(5.0)
    assert energy.energy_note(out).startswith("flagged: power source updates every 5 s")


def test_rapl_domains_sum_package_and_dram_not_core():
    facts = {"power.rapl.0.name": "package-0", "power.rapl.0.domain": "intel-rapl:0",
             "power.rapl.1.name": "core", "power.rapl.1.domain": "intel-rapl:0:0",
             "power.rapl.2.name": "dram", "power.rapl.2.domain": "intel-rapl:0:1"}
    s = [{"t_ms": i * 1000, "rss_kb": 1, "rapl0_uj": i * 2_000_000, "rapl1_uj": i * 1_000_000,
          "rapl2_uj": i * 500_000} for i in range(3)]
    out = energy.summarise(s, facts, 5)
    assert out["energy_j"] == pytest.approx(5.0) and out["power_w"] == pytest.approx(2.5)
    assert out["domains"] == {"package-0": 4.0, "dram": 1.0}
    # intel-rapl-mmio:0 is another interface to the same package-0: counted once
    facts.update({"power.rapl.3.name": "package-0", "power.rapl.3.domain": "intel-rapl-mmio:0"})
    s = [{**x, "rapl3_uj": x["rapl0_uj"]} for x in s]
    assert energy.summarise(s, facts, 5)["energy_j"] == pytest.approx(5.0)


# ---- the agent's power sources, one function at a time, under each shell --------------------

def lib(shell: Shell, script: str, env: dict[str, str]) -> list[str]:
    prog = f"ORCH_AGENT_LIB=1 . {shlex.quote(str(AGENT))}\n{script}"
    res = subprocess.run([shell.interpreter, "-c", prog], env=shell.environ(env),
                         capture_output=True, stdin=subprocess.DEVNULL, timeout=30, check=False)
    assert res.returncode == 0 and res.stderr == b"", (res.returncode, res.stderr)
    return res.stdout.decode().split("\n")[:-1]


def power_tree(root: Path) -> dict[str, str]:
    """Empty power directories under root, as ORCH_* overrides (nothing of the host's)."""
    dirs = {"ORCH_POWERCAP_DIR": root / "powercap", "ORCH_HWMON_DIR": root / "hwmon",
            "ORCH_POWER_SUPPLY_DIR": root / "power_supply",
            "ORCH_BATTERY_DIR": root / "power_supply" / "battery",
            "ORCH_THERMAL_DIR": root / "thermal"}
    for d in dirs.values():
        d.mkdir(parents=True, exist_ok=True)
    return {k: str(v) for k, v in dirs.items()}


def fields(line: str) -> dict[str, str]:
    return dict(f.split("=", 1) for f in line.split("\t") if "=" in f)


def test_agent_no_power_source(shell, tmp_path):
    env = power_tree(tmp_path)
    facts = lib(shell, "facts", env)
    assert "F\tpower.source\tno power source" in facts
    assert lib(shell, 'battery_paths; power_paths; power_fields; say "[$PWR]"', env) == ["[]"]


@pytest.mark.parametrize("current,voltage,status,unit,sign", [
    (-512_000, 3_900_000, "Discharging", "uA", "negative"),
    (512, 3_900, "Discharging", "mA", "positive"),
])
def test_agent_battery_power(shell, tmp_path, current, voltage, status, unit, sign):
    env = power_tree(tmp_path)
    bat = Path(env["ORCH_BATTERY_DIR"])
    for name, value in (("current_now", current), ("voltage_now", voltage), ("status", status),
                        ("charge_counter", 3_000_000), ("temp", 301)):
        (bat / name).write_text(f"{value}\n")
    facts = dict(line.split("\t")[1:] for line in lib(shell, "facts", env))
    assert facts["power.battery.current_unit"] == unit
    assert facts["power.battery.voltage_unit"] == unit.replace("A", "V")
    assert facts["power.battery.discharge_sign"] == sign
    assert facts["power.source"].startswith("battery:")
    (line,) = lib(shell, 'battery_paths; power_paths; power_fields; say "$PWR"', env)
    assert fields(line) == {"batt_ua": str(current), "batt_uv": str(voltage),
                            "batt_uah": "3000000"}


def test_agent_laptop_battery_found_by_type(shell, tmp_path):
    env = power_tree(tmp_path)
    bat0 = Path(env["ORCH_POWER_SUPPLY_DIR"]) / "BAT0"
    ac = Path(env["ORCH_POWER_SUPPLY_DIR"]) / "AC"
    bat0.mkdir()
    ac.mkdir()
    (ac / "type").write_text("Mains\n")
    (ac / "power_now").write_text("1\n")
    for name, value in (("type", "Battery"), ("power_now", 9_500_000), ("energy_now", 40_000_000),
                        ("status", "Discharging")):
        (bat0 / name).write_text(f"{value}\n")
    (line,) = lib(shell, 'battery_paths; power_paths; power_fields; say "$BSTAT|$PWR"', env)
    stat, _, pwr = line.partition("|")
    assert stat == f"{bat0}/status"
    assert fields(pwr) == {"batt_uw": "9500000", "batt_uwh": "40000000"}


def test_agent_rapl_hwmon_and_root_only_counters(shell, tmp_path):
    env = power_tree(tmp_path)
    pc = Path(env["ORCH_POWERCAP_DIR"])
    (pc / "intel-rapl").mkdir()                       # the control type: no energy_uj
    for name, dom, e in (("intel-rapl:0", "package-0", 262_143_000_000), ("intel-rapl:0:0", "core", 7)):
        (pc / name).mkdir()
        (pc / name / "name").write_text(f"{dom}\n")
        (pc / name / "energy_uj").write_text(f"{e}\n")   # past 2^31: no shell arithmetic on it
        (pc / name / "max_energy_range_uj").write_text("262143328850\n")
    (pc / "intel-rapl:1").mkdir()
    (pc / "intel-rapl:1" / "energy_uj").mkdir()       # a read that fails, as root-only does
    hw = Path(env["ORCH_HWMON_DIR"]) / "hwmon0"
    hw.mkdir()
    (hw / "power1_input").write_text("4200000\n")
    facts = dict(line.split("\t")[1:] for line in lib(shell, "facts", env))
    assert facts["power.rapl.0.name"] == "package-0"
    assert facts["power.rapl.0.max_uj"] == "262143328850"
    assert facts["power.rapl.1.name"] == "core"
    assert "intel-rapl:1" in facts["power.rapl.unreadable"]
    assert "root-only" in facts["power.rapl.unreadable"]
    assert facts["power.source"] == "rapl: package-0 core"
    (line,) = lib(shell, 'battery_paths; power_paths; power_fields; say "$PWR"', env)
    assert fields(line) == {"rapl0_uj": "262143000000", "rapl1_uj": "7"}
    # without a readable RAPL domain: the hwmon power sensor
    for d in ("intel-rapl:0", "intel-rapl:0:0"):
        (pc / d / "energy_uj").unlink()
    (line,) = lib(shell, 'battery_paths; power_paths; power_fields; say "$PWR"', env)
    assert fields(line) == {"hwmon0_uw": "4200000"}
    facts = dict(line.split("\t")[1:] for line in lib(shell, "facts", env))
    assert facts["power.source"] == "hwmon: hwmon0/power1_input"
    assert "intel-rapl:1" in facts["power.rapl.unreadable"]


# ---- end to end: the test's own integral against orch's J/token -----------------------------

def spool_window(spool: Path) -> list[dict[str, int]]:
    """The decode phase as the test reads the raw spool: from the S line just before the first
    C line (the first S line when a token came first) to the first S line after the engine
    ended (one without the engine's rss_kb)."""
    lines = spool.read_text().splitlines()
    first_c = next(i for i, line in enumerate(lines) if line.startswith("C\t"))
    start = max((i for i in range(first_c) if lines[i].startswith("S\t")), default=first_c)
    out = []
    for line in lines[start:]:
        if not line.startswith("S\t"):
            continue
        parts = line.split("\t")
        sample = {"t_ms": int(parts[1]), **{k: int(v) for k, v in
                                            (p.split("=", 1) for p in parts[2:])}}
        out.append(sample)
        if "rss_kb" not in sample and len(out) > 1:
            break
    return out


def own_battery_j(window: list[dict[str, int]], amps_per_unit: float, volts_per_unit: float) -> float:
    total = 0.0
    for a, b in itertools.pairwise(window):
        pa = abs(a["batt_ua"]) * amps_per_unit * a["batt_uv"] * volts_per_unit
        pb = abs(b["batt_ua"]) * amps_per_unit * b["batt_uv"] * volts_per_unit
        total += (b["t_ms"] - a["t_ms"]) / 1000 * (pa + pb) / 2
    return total


def table_json(kind: str = "energy") -> list[dict]:
    code, out = orch("table", "-t", kind, "--format", "json")
    assert code == 0, out
    return json.loads(out)


def one_spool(workdir: Path) -> Path:
    (spool,) = list(workdir.glob("runs/*/spool"))
    return spool


@pytest.fixture
def phone_ws(phone, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ORCH_DB", raising=False)
    (tmp_path / "devices.yaml").write_text("devices:\n" + adb_device("emu", phone))
    body = (ENGINES / "fake_bmoe.sh").read_text().split("\n", 1)[1]
    (tmp_path / "fake_bmoe.sh").write_text(f"#!{phone.sh}\n{body}")
    Path(phone.data_dir, "m.gguf").write_bytes(b"GGUF" + bytes(4092))
    return tmp_path


def phone_matrix(ws: Path, phone, interval: str = "0.1s", delay: float = 0.05,
                 tokens: int = TOKENS) -> Path:
    path = ws / "e.yaml"
    path.write_text(textwrap.dedent(f"""\
        name: energy
        engine: bmoe
        binary: {{local: fake_bmoe.sh}}
        models: {{m: {phone.data_dir}/m.gguf}}
        prompt: p
        tokens: {tokens}
        cooldown: 0
        sample_interval: {interval}
        configs: {{a: --delay {delay}}}
        """))
    return path


@pytest.mark.slow
@pytest.mark.parametrize("scale,sign", [(1, -1), (1000, 1)], ids=["uA-negative", "mA-positive"])
def test_phone_j_per_token_matches_the_own_integral(phone_ws, phone, scale, sign):
    """µA/µV with discharge negative (AOSP's convention), mA/mV with discharge positive (some
    vendors'): the same draw, the same joules."""
    from adb_emulator import PowerGauge

    def profile(t: float) -> dict:
        ua = 400_000 + int(200_000 * ((t * 7) % 1.0))        # a saw-tooth draw, 0.4-0.6 A
        return {"current": sign * ua // scale, "voltage": (3_900_000 - int(t * 10_000)) // scale,
                "status": "Discharging", "charge_counter": 3_000_000}
    gauge = PowerGauge(phone, profile, every_s=0.02)
    gauge.start()
    try:
        code, out = orch("run", str(phone_matrix(phone_ws, phone)), "--device", "emu")
    finally:
        gauge.stop()
    assert code == 0, out
    facts = Store.open("orch.db").device_by_name("emu").facts
    assert facts["power.battery.discharge_sign"] == ("negative" if sign < 0 else "positive")
    assert facts["power.battery.current_unit"] == ("uA" if scale == 1 else "mA")
    window = spool_window(one_spool(Path(phone.data_dir) / "orch"))
    own = own_battery_j(window, 1e-6 * scale, 1e-6 * scale) / TOKENS
    (row,) = table_json()
    assert row["j_per_token"] == pytest.approx(own, rel=0.01)
    assert row["power_w"] == pytest.approx(0.5 * 3.9, rel=0.15)
    assert row["tokens_per_j"] == pytest.approx(1 / own, rel=0.01)
    assert row["net_j_per_token"] is None             # no idle power calibrated
    code, out = orch("table", "-t", "throughput")
    assert code == 0 and "J/token" in out and f"{row['j_per_token']:.3f}" in out


@pytest.mark.slow
def test_phone_charging_run_is_not_measured(phone_ws, phone):
    def profile(t: float) -> dict:      # plugged in half-way through the run
        return {"current": -450_000, "voltage": 3_900_000,
                "status": "Charging" if t > 0.5 else "Discharging"}
    from adb_emulator import PowerGauge

    gauge = PowerGauge(phone, profile, every_s=0.02)
    gauge.start()
    try:
        code, out = orch("run", str(phone_matrix(phone_ws, phone, delay=0.1)), "--device", "emu")
    finally:
        gauge.stop()
    assert code == 0, out
    (row,) = table_json()
    assert all(row[k] is None for k in energy.ENERGY_FIELDS)
    assert row["energy_note"] == "not measured: charging"
    code, md = orch("table", "-t", "throughput,energy")
    assert code == 0 and md.count("not measured: charging") == 2, md
    (run,) = Runs(Store.open("orch.db")).current()
    assert any("adb over Wi-Fi" in w for w in run.warnings)


@pytest.mark.slow
def test_phone_gauge_every_5s_is_flagged(phone_ws, phone):
    from adb_emulator import PowerGauge

    steps = iter(range(10**6))

    def profile(_t: float) -> dict:     # a new reading every 5 s, as fuel gauges give
        return {"current": -(400_000 + 50_000 * (next(steps) % 3)), "voltage": 3_850_000,
                "status": "Discharging"}
    gauge = PowerGauge(phone, profile, every_s=5.0)
    gauge.start()
    try:
        matrix = phone_matrix(phone_ws, phone, interval="0.5s", delay=0.35, tokens=TOKENS)
        code, out = orch("run", str(matrix), "--device", "emu")
    finally:
        gauge.stop()
    assert code == 0, out
    (row,) = table_json()
    window = spool_window(one_spool(Path(phone.data_dir) / "orch"))
    assert row["j_per_token"] == pytest.approx(own_battery_j(window, 1e-6, 1e-6) / TOKENS, rel=0.01)
    assert row["energy_note"].startswith("flagged: power source updates every"), row
    (run,) = Runs(Store.open("orch.db")).current()
    assert any("slower than the sampling" in w for w in run.warnings)


class RaplCounter(threading.Thread):
    """A fake package-0 counter that the test drives: +`step_uj` every 10 ms, wrapping at
    `max_uj`; `cumulative` maps each value written to the energy since the start (µJ), which
    is the test's own knowledge of the wrap."""

    def __init__(self, domain: Path, start_uj: int, max_uj: int, step_uj: int) -> None:
        super().__init__(daemon=True)
        self.domain, self.value, self.max_uj, self.step = domain, start_uj, max_uj, step_uj
        self.cumulative = {start_uj: 0}
        self.total = 0
        self.stop_ = threading.Event()
        domain.mkdir(parents=True)
        (domain / "name").write_text("package-0\n")
        (domain / "max_energy_range_uj").write_text(f"{max_uj}\n")
        self._write()

    def _write(self) -> None:
        tmp = self.domain / "energy_uj.tmp"
        tmp.write_text(f"{self.value}\n")
        os.replace(tmp, self.domain / "energy_uj")

    def run(self) -> None:
        # +step_uj per 10 ms of elapsed time, not per loop: a thread that a busy machine
        # holds back still writes the energy of the time that passed (step: changeable)
        last = time.monotonic()
        while not self.stop_.wait(0.01):
            now = time.monotonic()
            add = round(self.step * (now - last) / 0.01)
            last = now
            self.total += add
            self.value = (self.value + add) % self.max_uj
            self.cumulative[self.value] = self.total
            self._write()


def test_local_rapl_with_a_wrap_around_under_dash(tmp_path, monkeypatch):
    """The local device's agent (sh = dash here) reads a fake powercap tree whose counter wraps
    during the run; J/token equals the test's own integral, and the wrap is undone."""
    rapl_workspace(tmp_path, monkeypatch)
    # 60 mJ per 10 ms (6 W): from 2^32 - 100 mJ the counter wraps after about 20 ms
    counter = RaplCounter(tmp_path / "sys" / "powercap" / "intel-rapl:0", 2**32 - 100_000,
                          2**32, 60_000)
    counter.start()
    try:
        code, out = orch("run", "m.yaml")
    finally:
        counter.stop_.set()
        counter.join(10)
    assert code == 0, out
    window = spool_window(one_spool(tmp_path / "dev"))
    wrapped = any(b["rapl0_uj"] < a["rapl0_uj"] for a, b in itertools.pairwise(window))
    first, last = window[0]["rapl0_uj"], window[-1]["rapl0_uj"]
    own = (counter.cumulative[last] - counter.cumulative[first]) / 1e6 / TOKENS
    (row,) = table_json()
    assert row["j_per_token"] == pytest.approx(own, rel=0.01)
    assert row["energy_j"] > 0
    facts = Store.open("orch.db").device_by_name("local").facts
    assert facts["power.source"] == "rapl: package-0"
    (run,) = Runs(Store.open("orch.db")).current()
    assert wrapped == any("wrapped" in w for w in (run.warnings or []))


def test_this_machine_says_no_power_source_and_tables_dash(tmp_path, monkeypatch):
    """No RAPL, no battery, no hwmon (as on this machine, made so by empty ORCH_* trees):
    the facts say so and every energy figure is "—" / empty / null, never 0."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ORCH_DB", raising=False)
    for key, value in power_tree(tmp_path / "sys").items():
        monkeypatch.setenv(key, value)
    (tmp_path / "devices.yaml").write_text(f"devices:\n  local:\n    kind: local\n"
                                           f"    workdir: {tmp_path}/dev\n")
    code, out = orch("devices", "--probe", "-d", "local")
    assert code == 0 and "no power source" in out, out
    (tmp_path / "fake_bmoe.sh").write_text((ENGINES / "fake_bmoe.sh").read_text())
    (tmp_path / "m.gguf").write_bytes(b"GGUF" + bytes(4092))
    (tmp_path / "m.yaml").write_text(textwrap.dedent(f"""\
        name: none
        engine: bmoe
        binary: {{local: fake_bmoe.sh}}
        models: {{m: {tmp_path}/m.gguf}}
        prompt: p
        tokens: 4
        cooldown: 0
        sample_interval: 0.1s
        configs: {{a: --delay 0.01}}
        """))
    code, out = orch("run", "m.yaml")
    assert code == 0, out
    (row,) = table_json()
    assert all(row[k] is None for k in energy.ENERGY_FIELDS) and row["energy_note"] is None
    code, md = orch("table", "-t", "energy")
    assert code == 0
    line = next(line for line in md.splitlines() if line.startswith("| a "))
    assert line.count("—") == 5 and " 0" not in line, md
    code, md = orch("table", "-t", "throughput")
    assert code == 0 and "J/token" not in md        # the default table stays narrow
    code, csv = orch("table", "-t", "energy", "--format", "csv")
    header, values = csv.splitlines()[:2]
    cells = dict(zip(header.split(","), values.split(",")))
    assert all(cells[k] == "" for k in energy.ENERGY_FIELDS)


def rapl_workspace(tmp_path: Path, monkeypatch, tokens: int = TOKENS) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ORCH_DB", raising=False)
    for key, value in power_tree(tmp_path / "sys").items():
        monkeypatch.setenv(key, value)
    (tmp_path / "devices.yaml").write_text(f"devices:\n  local:\n    kind: local\n"
                                           f"    workdir: {tmp_path}/dev\n")
    (tmp_path / "fake_bmoe.sh").write_text((ENGINES / "fake_bmoe.sh").read_text())
    (tmp_path / "m.gguf").write_bytes(b"GGUF" + bytes(4092))
    (tmp_path / "m.yaml").write_text(textwrap.dedent(f"""\
        name: rapl
        engine: bmoe
        binary: {{local: fake_bmoe.sh}}
        models: {{m: {tmp_path}/m.gguf}}
        prompt: p
        tokens: {tokens}
        cooldown: 0
        sample_interval: 0.1s
        configs: {{a: --delay 0.05}}
        """))
    return tmp_path


def test_calibrate_measures_idle_power_and_net_energy_is_above_it(tmp_path, monkeypatch):
    ws = rapl_workspace(tmp_path, monkeypatch)
    counter = RaplCounter(ws / "sys" / "powercap" / "intel-rapl:0", 0, 2**40, 20_000)  # ~2 W
    counter.start()
    try:
        code, out = orch("calibrate", "--seconds", "1", "--interval", "0.1")
        assert code == 0 and "local idle power: " in out, out
        idle = Store.open("orch.db").device_by_name("local").idle_baseline["power_w"]
        assert 0.5 < idle < 2.5
        counter.step = 60_000                                                          # ~6 W
        code, out = orch("run", "m.yaml")
    finally:
        counter.stop_.set()
        counter.join(10)
    assert code == 0, out
    window = spool_window(one_spool(ws / "dev"))
    seconds = (window[-1]["t_ms"] - window[0]["t_ms"]) / 1000
    (row,) = table_json()
    assert row["net_j_per_token"] == pytest.approx(
        row["j_per_token"] - idle * seconds / TOKENS, rel=0.01)
    assert 0 < row["net_j_per_token"] < row["j_per_token"]


def test_imported_runs_read_power_columns_and_metrics(tmp_path):
    """A per-token CSV column (power_mw; current_ua + voltage_uv) or a `.metrics` field
    (energy_j; power_w; charging=1) becomes the run's energy (docs/energy.md)."""
    fix = Path(__file__).resolve().parent / "fixtures" / "bigmoe" / "2026-07-13"
    study = tmp_path / "study"
    study.mkdir()
    lines = (fix / "qwen_base_ov.csv").read_text().splitlines()
    own: dict[str, float] = {"qwen_base_ov": 0.0, "qwen_sg_ov": 0.0}
    mw, ua = [], []
    for line in lines:
        if line.startswith("step,"):
            mw.append(line + ",power_mw")
            ua.append(line + ",current_ua,voltage_uv")
        elif line[:1].isdigit():
            step, wall = int(line.split(",")[0]), float(line.split(",")[2]) / 1000
            p_mw = 3000 + step % 7 * 100
            mw.append(f"{line},{p_mw}")
            own["qwen_base_ov"] += wall * p_mw / 1000
            current = -(800_000 + step % 5 * 10_000)
            ua.append(f"{line},{current},3850000")
            own["qwen_sg_ov"] += wall * abs(current) * 1e-6 * 3.85
        else:
            mw.append(line)
            ua.append(line)
    (study / "qwen_base_ov.csv").write_text("\n".join(mw) + "\n")
    (study / "qwen_sg_ov.csv").write_text("\n".join(ua) + "\n")
    for name, extra in (("gemma_base_ov", "energy_j=512.0\n"), ("gemma_sg_ov", "power_w=4.5\n"),
                        ("gemma_auto_ov", "power_w=4.5\ncharging=1\n")):
        (study / f"{name}.csv").write_text((fix / f"{name}.csv").read_text())
        (study / f"{name}.metrics").write_text((fix / f"{name}.metrics").read_text() + extra)
    db = str(tmp_path / "x.db")
    code, out = orch("import", str(study), "--db", db)
    assert code == 0, out
    code, out = orch("table", "--db", db, "-t", "energy", "--format", "json")
    rows = {r["config"]: r for r in json.loads(out)}
    for config in ("qwen_base_ov", "qwen_sg_ov"):
        assert rows[config]["j_per_token"] == pytest.approx(own[config] / 256, rel=0.01)
    assert rows["gemma_base_ov"]["energy_j"] == 512.0
    assert rows["gemma_base_ov"]["j_per_token"] == pytest.approx(2.0)
    sg = rows["gemma_sg_ov"]
    assert sg["power_w"] == pytest.approx(4.5) and sg["energy_j"] > 0
    assert rows["gemma_auto_ov"]["j_per_token"] is None
    assert rows["gemma_auto_ov"]["energy_note"] == "not measured: charging"


@pytest.mark.slow
def test_ab_rows_carry_energy_deltas_with_intervals(tmp_path, monkeypatch):
    """Two configs, two interleaved rounds on a 6 W counter: the slower config spends more
    joules per token; the A/B rows say so with an interval and a Holm-corrected p."""
    ws = rapl_workspace(tmp_path, monkeypatch, tokens=10)
    text = (ws / "m.yaml").read_text().replace(
        "configs: {a: --delay 0.05}", "configs: {a: --delay 0.05, b: --delay 0.15}\n"
        "repeat: 2\norder: interleaved")
    (ws / "m.yaml").write_text(text)
    counter = RaplCounter(ws / "sys" / "powercap" / "intel-rapl:0", 0, 2**40, 60_000)
    counter.start()
    try:
        code, out = orch("run", "m.yaml")
    finally:
        counter.stop_.set()
        counter.join(10)
    assert code == 0, out
    code, out = orch("table", "-t", "ab", "--format", "json")
    rows = {r["config"]: r for r in json.loads(out)}
    a, b = rows["a"], rows["b"]
    assert a["j_per_token"] is not None and a["energy_delta_pct"] is None   # the baseline
    assert b["j_per_token"] > a["j_per_token"]
    assert b["energy_delta_pct"] == pytest.approx(
        (b["j_per_token"] / a["j_per_token"] - 1) * 100, rel=0.2)
    assert b["energy_ci_low_pct"] is not None and b["energy_p_adjusted"] is not None
    code, md = orch("table", "-t", "ab")
    assert code == 0 and "| Δ a vs b |" in md and "J/token [95% CI]" in md \
        and "p J (Holm)" in md, md


@pytest.mark.extra("plots")   # the report's figures: matplotlib
def test_the_report_draws_power_beside_temperature_and_ram(tmp_path, monkeypatch):
    ws = rapl_workspace(tmp_path, monkeypatch, tokens=10)
    counter = RaplCounter(ws / "sys" / "powercap" / "intel-rapl:0", 0, 2**40, 60_000)
    counter.start()
    try:
        code, out = orch("run", "m.yaml")
    finally:
        counter.stop_.set()
        counter.join(10)
    assert code == 0, out
    from orchestrator.report.document import plot_data

    store = Store.open("orch.db")
    (run,) = Runs(store).current()
    (series,) = plot_data.sample_series(store.frame("sample", [run.id]), {run.id})
    watts = series.values["power"]
    assert np.isfinite(watts).sum() >= 3 and np.nanmedian(watts) == pytest.approx(6.0, rel=0.5)
    code, out = orch("report", "-o", "r.md")
    assert code == 0, out
    report = (ws / "r.md").read_text()
    assert "power" in report.split("Process RSS", 1)[1][:400], report
    assert "| J/token |" in report and "| power W |" in report   # the throughput table
