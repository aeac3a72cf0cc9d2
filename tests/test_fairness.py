"""Fair comparisons: thermal-gated cooldown, calibration, order, concurrent devices, oom, drift."""
from __future__ import annotations

import datetime as dt
import os
import textwrap
from pathlib import Path

import pytest
from ci import unavailable
from cli_helpers import Heater, fake_thermal_zone, orch
from sqlalchemy import text
from waiting import wait_until

from orchestrator.db.runs import Runs
from orchestrator.db.store import Store
from orchestrator.results.drift import session_warnings

ENGINES = Path(__file__).resolve().parent / "engines"



@pytest.fixture
def bench(tmp_path, monkeypatch):
    """A workspace: two local devices sharing a fake thermal zone, the fake engine."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ORCH_DB", raising=False)
    fake_thermal_zone(tmp_path)
    (tmp_path / "devices.yaml").write_text(textwrap.dedent(f"""\
        devices:
          local:
            kind: local
            workdir: {tmp_path}/dev-a
            env: {{ORCH_THERMAL_DIR: {tmp_path}/thermal}}
          twin:
            kind: local
            workdir: {tmp_path}/dev-b
        """))
    (tmp_path / "fake_bmoe.sh").write_bytes((ENGINES / "fake_bmoe.sh").read_bytes())
    return tmp_path


def matrix(path: Path, body: str) -> str:
    head = "engine: bmoe\nbinary: {local: fake_bmoe.sh}\nmodels: {m: /m.gguf}\nprompt: p\n"
    path.write_text(head + textwrap.dedent(body))
    return str(path)


@pytest.mark.slow
def test_condition_cooldown_waits_until_the_tolerance_is_met(bench, monkeypatch):
    code, out = orch("calibrate", "--seconds", "1", "--interval", "0.1")
    assert code == 0, out
    assert "idle baseline cpu: 38.0 °C" in out
    zone = bench / "thermal" / "thermal_zone0"

    def write(value: int) -> None:
        (zone / "temp.new").write_text(f"{value}\n")
        os.replace(zone / "temp.new", zone / "temp")
    heater = Heater(write, 40000)        # baseline + 2 °C
    heater.watch(monkeypatch)
    heater.start()
    assert heater.hot.wait(10)           # hot before orch's cooldown begins
    m = matrix(bench / "c.yaml", """\
        name: cool
        tokens: 3
        cooldown: {until: baseline+2C, sensor: cpu, min: 0s, max: 30s, interval: 0.1s}
        configs:
          a: --delay 0
        """)
    code, out = orch("run", m)
    heater.join(10)
    assert code == 0, out
    assert heater.stuck is None, heater.seen
    # the cooldown read every value as the zone cooled, and ended at the first within 40 °C
    assert heater.values_read() == heater.curve and heater.curve[-1] == 39000
    (run,) = Runs(Store.open("orch.db")).current()
    assert run.cooldown_met is True and run.cooldown_s > 0
    assert run.temp_start["value_mC"] == 39000
    started = run.started_at.replace(tzinfo=dt.timezone.utc).timestamp()
    assert heater.crossed_at <= started          # the cell started after the zone cooled


def test_condition_never_met_hits_max_and_warns(bench):
    (bench / "thermal" / "thermal_zone0" / "temp").write_text("70000\n")
    m = matrix(bench / "h.yaml", """\
        name: hot
        tokens: 2
        cooldown: {until: 40C, min: 0s, max: 0.5s, interval: 0.1s}
        configs:
          a: --delay 0
        """)
    code, out = orch("run", m)
    assert code == 0, out
    store = Store.open("orch.db")
    (run,) = Runs(store).current()
    assert run.cooldown_met is False and run.cooldown_s >= 0.5
    (caveat,) = [w for w in session_warnings(store, run.session_id) if w.kind == "cooldown_max"]
    assert "cooldown reached its max" in caveat.message and caveat.run_ids == (run.id,)
    assert "`max`" in caveat.advice


def test_relative_cooldown_needs_calibration(bench):
    m = matrix(bench / "r.yaml", """\
        name: rel
        cooldown: {until: baseline+2C}
        configs: {a: --delay 0}
        """)
    code, out = orch("run", m, "--device", "twin")
    assert code == 2 and "orch calibrate --device twin" in out


def test_interleaved_repeats_run_in_order(bench):
    m = matrix(bench / "i.yaml", """\
        name: inter
        tokens: 2
        repeat: 3
        order: interleaved
        configs: {A: --delay 0, B: --delay 0}
        """)
    code, out = orch("run", m)
    assert code == 0, out
    runs = sorted(Runs(Store.open("orch.db")).current(), key=lambda r: r.started_at)
    assert [r.config for r in runs] == ["A", "B", "A", "B", "A", "B"]
    assert [r.repeat_index for r in runs] == [0, 0, 1, 1, 2, 2]


@pytest.mark.slow
def test_two_devices_run_concurrently(bench):
    m = matrix(bench / "two.yaml", """\
        name: both
        tokens: 25
        sample_interval: 0.2s
        configs: {a: --delay 0.1, b: --delay 0.1}
        """)
    code, out = orch("run", m, "--device", "local", "--device", "twin")
    assert code == 0, out
    store = Store.open("orch.db")
    runs = Runs(store).current()
    assert len(runs) == 4 and all(r.status == "ok" for r in runs)
    spans: dict[str, list[tuple]] = {}
    for r in runs:
        spans.setdefault(r.device, []).append((r.started_at, r.ended_at))
    assert sorted(spans) == ["local", "twin"]
    # side by side, not one after the other: a cell of one device ran while one of the other did
    assert any(s1 < e2 and s2 < e1 for s1, e1 in spans["local"] for s2, e2 in spans["twin"]), spans
    # and each device ran its own cells one at a time
    for cells in spans.values():
        (s1, e1), (s2, e2) = sorted(cells)
        assert e1 <= s2, cells
    assert store.fetch(text("PRAGMA integrity_check"))[0][0] == "ok"
    assert all(len(store.frame("token", [r.id])) == 25 for r in runs)


def _memory_cgroup(tmp_path: Path) -> Path:
    root = Path("/sys/fs/cgroup/memory")
    group = root / f"orch-test-{os.getpid()}"
    try:
        group.mkdir()
        (group / "memory.limit_in_bytes").write_text(str(64 << 20))
    except OSError as exc:
        if group.exists():
            group.rmdir()
        unavailable(f"no writable memory cgroup for the oom test: {exc}")
    return group


def test_engine_killed_for_memory_is_oom(bench):
    group = _memory_cgroup(bench)
    try:
        m = matrix(bench / "o.yaml", f"""\
            name: oom
            tokens: 5
            timeout: 60s
            configs:
              hog: --memhog {group}
              fine: --delay 0
            """)
        code, out = orch("run", m, "--device", "twin")
        assert code == 1
        runs = {r.config: r for r in Runs(Store.open("orch.db")).current()}
        assert runs["hog"].status == "oom", runs["hog"].cause
        assert runs["hog"].signal == 9 and "memory" in runs["hog"].cause
        assert runs["fine"].status == "ok"
    finally:
        def removed() -> bool:   # once the killed engine's group has emptied
            try:
                group.rmdir()
            except OSError:
                return False
            return True
        wait_until(removed, 10, 0.2)


@pytest.mark.parametrize("drifting", [True, False])
def test_drift_warning_only_when_tok_s_tracks_order(bench, drifting):
    slow = f" --slowdown {bench}/counter" if drifting else ""
    m = matrix(bench / "d.yaml", f"""\
        name: drift
        tokens: 4
        repeat: 3
        order: interleaved
        configs:
          A: --delay 0{slow}
          B: --delay 0{slow}
        """)
    code, out = orch("run", m)
    assert code == 0, out
    store = Store.open("orch.db")
    warnings = session_warnings(store, Runs(store).current()[0].session_id)
    drift = [w for w in warnings if "falls with run order" in w.message]
    assert bool(drift) is drifting
    if drifting:   # the matrix interleaved already: advice is a cooldown or repeats
        assert "already interleaved" in drift[0].advice
        assert "order: interleaved" not in drift[0].advice
        assert set(drift[0].configs) == {"A", "B"}
    assert ("falls with run order" in out) is drifting
