"""The lab's infrastructure checks (orchestrator/lab/health.py) on the emulated phone (mksh,
toybox, dumpsys, thermal zones): battery level, start temperature, another orch job, and the
gate that counts failures in a row into quarantine and holds until release."""
from __future__ import annotations

import threading

import pytest
from waiting import wait_for

from orchestrator.db import lab as lab_db
from orchestrator.db.store import Store
from orchestrator.lab.health import HealthGate, HealthLimits, Stopping, check_device
from orchestrator.run.agent_client import AgentClient
from orchestrator.transports.adb import AdbTransport


@pytest.fixture
def client(phone):
    transport = AdbTransport("emu", serial=phone.serial, adb_port=phone.adb_port,
                             workdir=f"{phone.data_dir}/orch")
    transport.connect()
    c = AgentClient(transport)
    c.install()
    yield c
    transport.close()


def test_a_phone_passes_then_fails_on_battery_and_heat(client, phone):
    facts = client.facts()
    assert (facts["battery.level_pct"], facts["battery.status"]) == ("80", "Charging")  # dumpsys
    assert check_device(client, HealthLimits(), set()) is None
    # a charging phone is not held for a low level; a discharging one is (sysfs first)
    assert check_device(client, HealthLimits(min_battery_pct=90), set()) is None
    with open(f"{phone.battery_dir}/capacity", "w") as f:
        f.write("15\n")
    with open(f"{phone.battery_dir}/status", "w") as f:
        f.write("Discharging\n")
    low = check_device(client, HealthLimits(), set())
    assert low == "battery low: 15% < 20% and not charging"
    phone.set_temp("cpu-0-0", 75.5)
    hot = check_device(client, HealthLimits(max_start_temp_c=70, min_battery_pct=10), set())
    assert hot is not None and hot.startswith("too hot to start: CPU 75.5 °C > 70 °C")


def test_failures_in_a_row_quarantine_and_a_release_lets_the_cell_go(tmp_path):
    store = Store.open(str(tmp_path / "orch.db"))
    lab_db.register_device(store, "emu", "adb", "w", "h")
    stop = threading.Event()
    gate = HealthGate(store, "emu", HealthLimits(after=3, retry_s=0.01, poll_s=0.01), stop)
    answers = iter(["unreachable: a", "unreachable: b", "unreachable: c", None])
    seen: list[str] = []

    def check():
        answer = next(answers)
        if answer is None:   # the release happened before this check
            seen.append(lab_db.lab_device(store, "emu").state)
        return answer

    releaser = threading.Thread(target=lambda: _release_when_quarantined(store))
    releaser.start()
    gate.pass_(check)
    releaser.join(timeout=30)
    row = lab_db.lab_device(store, "emu")
    assert seen == ["active"] and row.failures == 0 and row.state == "active"

    lab_db.update_device(store, "emu", state=lab_db.QUARANTINED, reason="x")
    stop.set()
    with pytest.raises(Stopping):   # a consumer shutting down leaves the held cell taken
        gate.pass_(lambda: None)


def _release_when_quarantined(store: Store) -> None:
    row = wait_for(lambda: (r := lab_db.lab_device(store, "emu")).state == lab_db.QUARANTINED and r,
                   30, 0.01, what="the quarantine")
    assert row.failures == 3 and row.reason == "unreachable: c"
    lab_db.update_device(store, "emu", state=lab_db.ACTIVE, failures=0)
