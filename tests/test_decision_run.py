"""`repeat: {until: decided}` end to end on `local`, on the simulated phone (bench/_phone.py):
the rounds run only what is undecided, the session says why it stopped (and the report's
Method section with it), and an interrupted session resumed with --resume ends as the store
says, never running a decided config again."""
from __future__ import annotations

import os
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import orch
from sqlalchemy import select

from orchestrator.config.inventory import Inventory
from orchestrator.config.matrix import load_matrix
from orchestrator.db import schema
from orchestrator.db.runs import Runs
from orchestrator.db.store import Store
from orchestrator.errors import ConfigError
from orchestrator.run.decisions import decisions, warmup_tokens
from orchestrator.run.session import RunOptions, run_matrix
from orchestrator.transports.local import LocalEntry

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from _phone import Phone, PhoneModel, PhoneProgress  # noqa: E402

MAX = 6


def matrix(root: Path, phone: Phone) -> str:
    path = root / "decided.yaml"
    path.write_text(
        f"name: decided\nengine: bmoe\nbinary: {{local: {phone.engine}}}\n"
        f"models: {{phone: {root}/model.gguf}}\nprompt: p\ntokens: 16\nsample_interval: 0.5s\n"
        f"timeout: 60s\nbaseline: base\norder: interleaved\n"
        f"repeat: {{until: decided, equivalence: 2%, max: {MAX}}}\n"
        f"cooldown: {{until: 32C, sensor: cpu, min: 0s, max: 1s, interval: 0.01s}}\n"
        f"configs:\n  base: --phone {phone.root} --effect 0\n"
        f"  same: --phone {phone.root} --effect 0\n"
        f"  fast: --phone {phone.root} --effect 0.3\n")
    (root / "model.gguf").write_bytes(b"GGUF" + bytes(4092))
    return str(path)


class StopAt(PhoneProgress):
    """Sets `stop` (as Ctrl-C would) once the cell `at` streams its first token."""

    def __init__(self, phone: Phone, stop: threading.Event, at: int) -> None:
        super().__init__(phone)
        self.stop, self.at, self.index = stop, at, -1

    def cell_started(self, index: int, cell: Any) -> None:
        self.index += 1

    def token(self, row: Any, count: int) -> None:
        if self.index >= self.at:
            self.stop.set()


def engines_left(phone: Phone) -> list[int]:
    left = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if str(phone.engine).encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                left.append(int(pid))
        except OSError:
            continue
    return left


@pytest.mark.slow
def test_until_decided_runs_only_the_undecided_and_resumes(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ORCH_DB", raising=False)
    with Phone(tmp_path / "phone", PhoneModel(seed=3, noise=0.005, outlier_p=0.0)) as phone:
        path = matrix(tmp_path, phone)
        store = Store.open(str(tmp_path / "orch.db"))
        inventory = Inventory({"local": LocalEntry(kind="local", workdir=str(tmp_path / "dev"),
                                                   env=phone.env)})
        loaded = load_matrix(path)
        stop = threading.Event()
        # interrupted while the second round runs (cell 0 is the warm-up, cells 1-3 round 0,
        # 4-6 round 1)
        with pytest.raises(KeyboardInterrupt):
            run_matrix(store, inventory, loaded, "local", StopAt(phone, stop, 5),
                       RunOptions(command="test", stop=stop))
        assert engines_left(phone) == []
        cut = Runs(store).current()
        assert "interrupted" in {r.status for r in cut}
        progress = PhoneProgress(phone)
        result = run_matrix(store, inventory, loaded, "local", progress,
                            RunOptions(command="test", resume=True))
        assert engines_left(phone) == []
    runs = Runs(store).current(session=result.session_id)
    # a warm-up run of 16 tokens before the first measured cell, and again on --resume (the
    # device idled meanwhile): stored, as `warmup`, which no figure counts
    warm = [r for r in runs if r.repeat_index < 0]
    assert [(r.status, r.config) for r in warm] == [("warmup", "base")] * 2
    assert all(Runs(store).figures([r])[r.id].tokens == 16 for r in warm)
    runs = [r for r in runs if r.repeat_index >= 0]
    assert all(r.status == "ok" for r in runs)
    state = decisions(store, result.session_id, loaded.matrix)
    fast, same = state["phone/fast"], state["phone/same"]
    assert fast.state == "differs" and fast.delta_pct > 15
    # a decided config never ran after the round it was decided at
    rounds = {c: sorted(r.repeat_index for r in runs if r.config == c)
              for c in ("base", "same", "fast")}
    assert rounds["fast"] == list(range(fast.n))
    if same.decided:
        assert rounds["same"] == list(range(same.n))
    assert rounds["base"] == list(range(max(len(rounds["fast"]), len(rounds["same"]))))
    assert len(rounds["base"]) <= MAX
    # the progress said so per config, and the session and the report's Method say why
    assert any("fast decided (differs): +" in n for n in progress.notes)
    (session,) = store.fetch(select(schema.session))
    assert session.repeat_stop.startswith("until decided (Pocock over looks 2..6")
    assert "a 16-token warm-up run of each model first" in session.repeat_stop
    assert "phone/fast differs" in session.repeat_stop
    code, report = orch("report", "--no-plots", "--db", str(tmp_path / "orch.db"))
    assert code == 0, report
    assert "Stopping rule" in report and "phone/fast differs" in report
    # the warm-up runs are no repeats of the baseline
    low, high = len(rounds["fast"]), len(rounds["base"])
    assert f"**Repeats:** {low if low == high else f'{low} to {high}'} run(s)" in report
    # one answer per comparison: the A/B table and the findings give the rule's decision
    # (a fixed-sample test of the same runs could call it "no significant difference")
    assert f"faster (decided after {fast.n} rounds)" in report, report
    assert "decision rule, decided after" in report
    assert "no significant difference" not in report.split("Stopping rule")[1], report


@pytest.mark.slow
def test_the_pure_model_replays_the_real_path(tmp_path, monkeypatch):
    """bench/decision judges its goal on the pure model (bench/_decision_model.py) over many
    seeds: it is only worth that if it replays what orch does. One seed of the session above,
    through orch and through the model: the same rounds per config, the same decisions, and
    the device time within 2% (the threaded zone integrates in real-time slices)."""
    from _decision_model import decided

    from orchestrator.stats.decision import Rule

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ORCH_DB", raising=False)
    model = PhoneModel(seed=6)
    with Phone(tmp_path / "phone", model) as phone:
        loaded = load_matrix(matrix(tmp_path, phone))
        store = Store.open(str(tmp_path / "orch.db"))
        inventory = Inventory({"local": LocalEntry(kind="local", workdir=str(tmp_path / "dev"),
                                                   env=phone.env)})
        result = run_matrix(store, inventory, loaded, "local", PhoneProgress(phone),
                            RunOptions(command="test"))
        device_s = phone.clock_s
        assert engines_left(phone) == []
    real = decisions(store, result.session_id, loaded.matrix)
    # the matrix's cooldown: until 32 °C, at most 1 s of real time (100 simulated seconds)
    replay = decided(model, {"same": 0.0, "fast": 0.3}, 16, 32.0, 1.0 / model.scale,
                     Rule(max=MAX, equivalence=2.0))
    assert {c: (d.state, d.n) for c, d in real.items()} == \
        {f"phone/{c}": (s, replay.rounds[c]) for c, s in replay.states.items()}
    assert abs(replay.device_s - device_s) <= 0.02 * device_s, (replay.device_s, device_s)


def test_the_matrix_setting_is_checked(tmp_path):
    base = ("name: m\nengine: bmoe\nbinary: /bin/true\nprompt: p\nconfigs: {a: --x 1, "
            "b: --x 2}\n")
    for repeat, words in (("{until: decided, min: 1, max: 5}", "min of at least 2"),
                          ("{until: 2%, min: 2, max: 5, equivalence: 2%}",
                           "equivalence goes with `until: decided`"),
                          ("{until: decided, max: 5, equivalence: 200%}",
                           "between 0 and 100"),
                          ("{min: 3, max: 3, warmup: 16}", "warmup goes with `until: decided`"),
                          ("{until: decided, max: 5, warmup: -1}", "greater than or equal to 0")):
        (tmp_path / "m.yaml").write_text(base + f"repeat: {repeat}\n")
        with pytest.raises(ConfigError) as caught:
            load_matrix(str(tmp_path / "m.yaml"))
        assert words in str(caught.value) and "\n" not in str(caught.value).strip()
    (tmp_path / "m.yaml").write_text(base + "repeat: {until: decided, max: 8}\n")
    policy = load_matrix(str(tmp_path / "m.yaml")).matrix.repeat
    assert (policy.decided, policy.min, policy.max, policy.equivalence) == (True, 2, 8, None)
    assert warmup_tokens(load_matrix(str(tmp_path / "m.yaml")).matrix) == 16
    (tmp_path / "m.yaml").write_text(base + "repeat: {until: decided, max: 5, warmup: 0}\n")
    assert warmup_tokens(load_matrix(str(tmp_path / "m.yaml")).matrix) == 0


def test_each_model_is_warmed_up_once():
    """One warm-up cell per model (its first cell of the round), the warm-up's own length,
    repeat -1; none at `warmup: 0`."""
    from orchestrator.config.plan import Cell
    from orchestrator.run.decisions import warmup_cells

    cells = [Cell(model=m, model_path=None, config=c, flags="", repeat=0, order=i)
             for i, (m, c) in enumerate([("q", "base"), ("q", "fast"), ("g", "fast"),
                                         ("g", "base")])]
    warm = warmup_cells(cells, 16)
    assert [(c.model, c.config, c.repeat, c.tokens) for c in warm] == \
        [("q", "base", -1, 16), ("g", "fast", -1, 16)]
    assert warmup_cells(cells, 0) == []
