"""Thermal cooldown, calibration and battery facts on the emulated phone (real adb server)."""
from __future__ import annotations

import datetime as dt
import textwrap
from pathlib import Path

import pytest
from cli_helpers import Heater, adb_device, orch

from orchestrator.db.runs import Runs
from orchestrator.db.store import Store

ENGINES = Path(__file__).resolve().parent / "engines"
REPO = ENGINES.parent.parent



@pytest.fixture
def phone_ws(phone, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ORCH_DB", raising=False)
    (tmp_path / "devices.yaml").write_text("devices:\n" + adb_device("emu", phone))
    body = (ENGINES / "fake_bmoe.sh").read_text().split("\n", 1)[1]
    (tmp_path / "fake_bmoe.sh").write_text(f"#!{phone.sh}\n{body}")
    Path(phone.data_dir, "m.gguf").write_bytes(b"GGUF" + bytes(4092))
    for zone in (0, 1):
        phone.set_temp(zone, 38)
    return tmp_path


def test_battery_facts_come_from_dumpsys_when_sysfs_has_no_status(phone_ws, phone):
    phone.set_temp("battery", 31.5)
    code, out = orch("devices", "--probe", "-d", "emu")
    assert code == 0, out
    facts = Store.open("orch.db").device_by_name("emu").facts
    assert facts["battery.temp_dC"] == "315"
    assert facts["battery.status"] in ("Charging", "Discharging", "Full", "Not charging", "Unknown")
    assert facts["prop.ro.product.model"] == "EMU-15R"


@pytest.mark.slow
def test_condition_cooldown_on_the_phone(phone_ws, phone, monkeypatch):
    code, out = orch("calibrate", "-d", "emu", "--seconds", "1", "--interval", "0.1")
    assert code == 0 and "idle baseline cpu: 38.0 °C" in out, out

    def write(value: int) -> None:
        for zone in (0, 1):
            phone.set_temp(zone, value / 1000)
    heater = Heater(write, 40000)        # baseline + 2 °C
    heater.watch(monkeypatch)
    heater.start()
    assert heater.hot.wait(10)           # hot before orch's cooldown begins
    (phone_ws / "c.yaml").write_text(textwrap.dedent(f"""\
        name: phone-cool
        engine: bmoe
        binary: {{local: fake_bmoe.sh}}
        models: {{m: {phone.data_dir}/m.gguf}}
        prompt: p
        tokens: 2
        cooldown: {{until: baseline+2C, sensor: cpu, min: 0s, max: 30s, interval: 0.1s}}
        configs: {{a: --delay 0}}
        """))
    code, out = orch("run", "c.yaml", "--device", "emu")
    heater.join(10)
    assert code == 0, out
    assert heater.stuck is None, heater.seen
    # the cooldown read every value as the phone cooled, and ended at the first within 40 °C
    assert heater.values_read() == heater.curve and heater.curve[-1] == 39000
    (run,) = Runs(Store.open("orch.db")).current()
    assert run.cooldown_met is True
    assert run.temp_start["value_mC"] == 39000
    started = run.started_at.replace(tzinfo=dt.timezone.utc).timestamp()
    assert heater.crossed_at <= started          # the cell started after the phone cooled


@pytest.mark.slow
def test_phone_matrix_end_to_end_on_the_emulated_phone(phone_ws, phone):
    """matrices/phone.yaml's configs, order and baseline as written; only what needs a real
    phone (the binary, the 18 GB models, 256 tokens, 45 s cooldowns) is swapped for stand-ins."""
    import yaml

    study = yaml.safe_load((REPO / "matrices" / "phone.yaml").read_text())
    for name in study["models"]:
        Path(phone.data_dir, f"{name}.gguf").write_bytes(b"GGUF" + bytes(4092))
    study.update(binary={"local": "fake_bmoe.sh"}, tokens=3, cooldown="0s",
                 models={name: f"{phone.data_dir}/{name}.gguf" for name in study["models"]})
    (phone_ws / "phone.yaml").write_text(yaml.safe_dump(study))
    code, out = orch("run", "phone.yaml", "--device", "emu")
    assert code == 0, out
    store = Store.open("orch.db")
    runs = Runs(store).current()
    assert len(runs) == 16 and all(r.status == "ok" for r in runs)
    assert all(len(store.frame("token", [r.id])) == 3 for r in runs)
    code, out = orch("report", "-o", "phone.md", "--no-plots")
    assert code == 0, out
    report = Path("phone.md").read_text()
    assert "EMU-15R" in report
    assert "orch/emu/emu:16/EMU.1/1:user/release-keys" in report
    assert "stream-c4000-l4-overlap" in report and "A/B against the baseline" in report
