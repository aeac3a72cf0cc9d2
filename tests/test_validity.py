"""Validity warnings: start temperature on imported sessions, load and
throttling from the agent's samples, advice that fits the matrix, warnings next to their rows."""
from __future__ import annotations

import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
from cli_helpers import orch

from orchestrator.db.runs import Runs
from orchestrator.db.store import Store
from orchestrator.record import load_record
from orchestrator.cli.documents import report_text as render_report
from orchestrator.results.drift import caveats, session_warnings
from orchestrator.ingest.importer import driver_entries, import_dir
from orchestrator.run.validity import RunValidity, summarise

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "bigmoe"


def _section(text: str, heading_part: str) -> str:
    """The text of the first `### ` section whose heading contains heading_part."""
    parts = text.split("\n### ")
    (hit,) = [p for p in parts if heading_part in p.splitlines()[0]]
    return hit


def test_imported_session_flags_start_temperature(tmp_path):
    store = Store.open(str(tmp_path / "orch.db"))
    report = import_dir(store, FIXTURES / "2026-07-17")
    runs = {r.config: r for r in Runs(store).current(report.session_id)}
    assert runs["gpt_c2000_l4"].temp_start == {"cpu_temp_mC": 52900, "batt_temp_dC": 380}
    assert runs["gpt_c2000_l4"].mem_avail_start_kb == 7117300
    assert runs["gpt_c2000_l8"].cooldown_s == 180          # driver log: waited=180s
    assert load_record(runs["gpt_c2000_l8_k2"].summary).entry_state.driver["cpu_khz"] == 1555200
    found = [c for c in session_warnings(store, report.session_id) if c.kind == "start_temp"]
    gpt = [c for c in found if c.model.startswith("gpt-oss")]
    assert len(gpt) == 1
    assert "differ by 8.5 °C" in gpt[0].message
    assert "gpt_c2000_l4 52.9 °C vs gpt_c2000_l8 44.4 °C; threshold 5 °C" in gpt[0].message
    assert "thermal cooldown" in gpt[0].advice           # no matrix: no condition to tune
    text = render_report(store, Runs(store).current(report.session_id), plots=False)
    section = _section(text, "gpt-oss")
    assert "**Warnings** for this group" in section
    assert "start temperatures differ by 8.5 °C" in section
    # the warning sits with the gpt rows only, not with another model's group
    assert "gpt_c2000_l4 52.9" not in _section(text, "Qwen3")


def test_imported_session_table_md_shows_the_warning(workspace):
    code, out = orch("import", str(FIXTURES / "2026-07-17"))
    assert code == 0, out
    code, out = orch("table", "--format", "md")
    assert code == 0, out
    assert "start temperatures differ by 8.5 °C" in _section(out, "gpt-oss")


def test_driver_log_entries():
    entries = driver_entries(FIXTURES / "2026-07-17")
    assert entries["gpt_c2000_l4"] == {"batt_temp_dC": 380, "mem_avail_kb": 7117868,
                                       "cpu_khz": 1900800, "waited_s": 0, "log": "driver-lanes.log"}
    assert entries["gpt_c2000_l8_k2"]["log"] == "driver-k2.log"
    assert "waited_s" not in entries["gpt_c2000_l8_k2"]


def _row(i: int, config: str, order: int, **extra) -> SimpleNamespace:
    base = dict(id=i, device="phone", model="m", config=config, session_id=1, order_index=order,
                cooldown_met=None, temp_start=None, mem_avail_start_kb=None, summary=None,
                status="ok")
    return SimpleNamespace(**{**base, **extra})


def _drifting(n_rounds: int = 4) -> tuple[list[SimpleNamespace], dict[int, float]]:
    """A B A B ... with tok/s falling steadily with run order."""
    rows, means = [], {}
    for k in range(2 * n_rounds):
        rows.append(_row(k + 1, "AB"[k % 2], k))
        means[k + 1] = 10.0 - 0.5 * k
    return rows, means


@pytest.mark.parametrize(("matrix", "says", "never"), [
    ({"order": "interleaved"}, "already interleaved", "order: interleaved"),
    ({"order": "shuffled"}, "already interleaved", "order: interleaved"),
    ({"order": "as-written", "pairs": [["A", "B"]]}, "already interleaved", "order: interleaved"),
    ({"order": "interleaved", "cooldown": {"until": "baseline+2C"}}, "raise the thermal cooldown",
     "order: interleaved"),
    ({"order": "as-written"}, "order: interleaved", "already interleaved"),
])
def test_drift_advice_fits_the_matrix(matrix, says, never):
    rows, means = _drifting()
    (drift,) = [c for c in caveats(rows, means, {1: matrix}) if c.kind == "drift"]
    assert "falls with run order" in drift.message
    assert says in drift.advice and never not in drift.advice
    assert drift.configs == ("A", "B") and drift.run_ids == tuple(range(1, 9))


def test_load_and_throttling_from_samples():
    facts = {"cores": "2", "cpu.max_khz": "3000000"}
    busy = [{"rss_kb": 1, "load1_x100": 410, "cpu_khz": 1200000}] * 5
    before = [{"load1_x100": 9000, "cpu_khz": 300000}]       # no engine yet: not counted
    v = summarise(before + busy, facts)
    assert v.samples == 5 and v.load1_median == 4.1 and v.cpu_khz_median == 1200000
    assert v.overloaded and v.throttled
    calm = summarise([{"rss_kb": 1, "load1_x100": 150, "cpu_khz": 2900000}] * 3, facts)
    assert not calm.overloaded and not calm.throttled
    # an engine with 4 threads loads 2 cores to 4 by itself: that is not someone else
    own = summarise([{"rss_kb": 1, "load1_x100": 430, "threads": 4}] * 3, facts)
    assert own.others_load == pytest.approx(0.3) and not own.overloaded
    shared = summarise([{"rss_kb": 1, "load1_x100": 530, "threads": 4}] * 3, facts)
    assert shared.overloaded
    unknown = summarise(busy, {})                # no facts: no core count, no max: no verdict
    assert not unknown.overloaded and not unknown.throttled
    rows = [_row(1, "A", 0, summary={"schema_version": 1, "extra": {"validity": v.stored()}}),
            _row(2, "B", 1, summary={"schema_version": 1, "extra": {"validity": calm.stored()}})]
    found = {c.kind: c for c in caveats(rows, {1: 5.0, 2: 5.0}, {1: {}})}
    assert found["load"].run_ids == (1,) and "4.10 on 2 cores" in found["load"].message
    assert found["throttling"].run_ids == (1,)
    assert "1.20 GHz of 3.00 GHz" in found["throttling"].message
    assert RunValidity.from_stored(v.stored()) == v


@pytest.fixture
def busy_device(workspace):
    """The local device with a fake /proc/loadavg (4.07 on 2 cores) and cpufreq (1.0 of
    3.2 GHz): every run on it is overloaded and throttled."""
    cpu = workspace / "cpu"
    for n in range(2):
        freq = cpu / f"cpu{n}" / "cpufreq"
        freq.mkdir(parents=True)
        (freq / "cpuinfo_max_freq").write_text("3187200\n")
        (freq / "scaling_cur_freq").write_text("1000000\n")
        (freq / "scaling_governor").write_text("schedutil\n")
    (workspace / "loadavg").write_text("4.07 3.00 2.00 3/300 999\n")
    (workspace / "devices.yaml").write_text(textwrap.dedent(f"""\
        devices:
          local:
            kind: local
            workdir: {workspace}/dev-local
            env: {{ORCH_CPU_DIR: {cpu}, ORCH_LOADAVG: {workspace}/loadavg}}
        """))
    return workspace


@pytest.mark.slow
def test_run_on_a_busy_device_is_flagged(busy_device):
    (busy_device / "m.yaml").write_text(textwrap.dedent("""\
        name: busy
        engine: moe-probe
        prompt: hello
        tokens: 20
        sample_interval: 0.1s
        configs:
          c0: --io pread --cache-mb 0 --layers 2 --experts 4 --expert-mb 0.0625 --top-k 2 --compute-kb 64
        """))
    code, out = orch("run", "m.yaml")
    assert code == 0, out
    store = Store.open("orch.db")
    (run,) = Runs(store).current()
    device = store.device_by_name("local")
    assert device.facts["cpu.max_khz"] == "3187200" and device.facts["cpu.governor"] == "schedutil"
    validity = load_record(run.summary).validity
    assert validity["load1_median"] == 4.07 and validity["cpu_khz_median"] == 1000000
    assert any("load average 4.07" in w for w in run.warnings)
    assert any("throttled" in w for w in run.warnings)
    text = render_report(store, Runs(store).current(), plots=False)
    assert "load average beyond the engine's own threads" in text and "the CPU was throttled" in text
