"""The turn model (docs/sessions.md): a session run's per-turn figures (stats/turns.py) are
computed once, stored with the run's figures, and every view (`orch table`, `orch show`,
`orch export`, the report) prints those values; one-shot runs get no turn views."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from orchestrator.db.figures import compute_run
from orchestrator.db.runs import Runs
from orchestrator.db.store import Store
from orchestrator.db.writes import write_batch
from orchestrator.record import RunRecord, Turn
from orchestrator.stats.figures import RunFigures
from orchestrator.stats.statistics import RunInput, compute
from orchestrator.stats.turns import AFTER_IDLE, FIRST, WARM
from tests.cli_helpers import orch_ok

# three turns of 60 tokens: a cold first turn, a warm second, a re-warming third after 5 s idle
MS = {1: 200.0, 2: 100.0, 3: 150.0}
N = 60


def _walls(seed: int = 1) -> dict[int, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {t: ms + rng.normal(0, 5, N) for t, ms in MS.items()}


def _record() -> RunRecord:
    return RunRecord(tokens=3 * N, complete=True, turns=[
        Turn(turn=1, prompt_tokens=30, context_tokens=90, tokens=N, ttft_s=5.0, load_s=4.0,
             prefill_s=1.0, cache_hit_pct=20.0, clear_kv=True),
        Turn(turn=2, prompt_tokens=8, context_tokens=158, tokens=N, ttft_s=0.5, prefill_s=0.5,
             cache_hit_pct=60.0, clear_kv=False),
        Turn(turn=3, prompt_tokens=9, context_tokens=227, tokens=N, ttft_s=0.8, prefill_s=0.8,
             idle_before_s=5.0, cache_hit_pct=45.0, clear_kv=False)])


def _tokens(run_id: int) -> pd.DataFrame:
    rows, seq = [], 0
    for turn, w in _walls().items():
        for ms in w:
            rows.append({"run_id": run_id, "seq": seq, "wall_ms": ms, "turn": turn})
            seq += 1
    return pd.DataFrame(rows)


def test_turn_figures_rates_kinds_and_the_after_idle_comparison():
    f = compute(_tokens(1), {1: RunInput(_record())})[1]
    assert [t.kind for t in f.turns] == [FIRST, WARM, AFTER_IDLE]
    walls = _walls()
    for t in f.turns:
        assert t.tokens == N
        assert abs(t.mean - N / (walls[t.turn].sum() / 1000)) < 1e-9     # n / Σ decode s
        assert t.tps_ci_low < t.mean < t.tps_ci_high
    # the whole run's rate is over every token, as for a one-shot run
    all_ms = np.concatenate(list(walls.values()))
    assert abs(f.mean - len(all_ms) / (all_ms.sum() / 1000)) < 1e-9
    # after idle: 100 ms vs 150 ms a token -> a third slower, and the interval excludes 0
    assert -36 < f.after_idle_vs_warm_pct < -30
    assert f.after_idle_vs_warm_ci_low < f.after_idle_vs_warm_pct < f.after_idle_vs_warm_ci_high < 0
    assert f.first_turn_ttft_s == 5.0 and f.warm_turn_ttft_s == 0.5
    assert f.turns[1].prompt_tokens == 8 and f.turns[2].idle_before_s == 5.0


def test_stored_turn_figures_read_back_equal():
    f = compute(_tokens(1), {1: RunInput(_record())})[1]
    back = RunFigures.from_stored(json.loads(json.dumps(f.stored())))
    assert back is not None and back.turns == f.turns
    assert back.after_idle_vs_warm_pct == f.after_idle_vs_warm_pct


def test_a_one_shot_run_has_no_turns_even_with_a_turn_column_of_zeros():
    tokens = pd.DataFrame({"run_id": 1, "seq": range(30), "wall_ms": 100.0, "turn": 0})
    f = compute(tokens, {1: RunInput(RunRecord())})[1]
    assert f.turns is None and f.after_idle_vs_warm_pct is None


def test_turns_from_the_token_rows_when_the_record_has_none():
    """A session CSV imported without its BMOE_DONE lines: its turn column still makes turns."""
    f = compute(_tokens(1), {1: RunInput(RunRecord())})[1]
    assert [t.turn for t in f.turns] == [1, 2, 3] and f.turns[0].tokens == N
    assert [t.kind for t in f.turns] == [FIRST, WARM, WARM]     # no idle recorded


def _stored_session(path: Path) -> tuple[str, int]:
    db = f"sqlite:///{path / 'orch.db'}"
    store = Store.open(db)
    sid = store.create_session(name="chat", kind="run")
    rid = store.create_run(uid="u1", session_id=sid, device_id=store.upsert_device("d", "local"),
                           cell_key="chat", model="m", config="chat", flags=None,
                           repeat_index=0, order_index=0, status="running", engine="bmoe",
                           superseded=False)
    tok = _tokens(rid)
    rows = [(rid, int(r.seq), int(r.seq) + 1, float(r.wall_ms), None, None, None, None, None,
             None, None, None, int(r.turn), None) for r in tok.itertuples()]
    write_batch(store, rid, rows, [], [], len(rows))
    record = _record()
    row = Runs(store).get(rid)
    store.update_run(rid, status="ok", summary=record.stored(),
                     figures=compute_run(store, row, record))
    return db, rid


def test_views_print_the_stored_turn_figures(tmp_path):
    db, rid = _stored_session(tmp_path)
    stored = Runs(Store.open(db)).figures(Runs(Store.open(db)).current(1))[rid]
    table = orch_ok("table", "--db", db)
    assert "**Turns**" in table and "**Turn comparison**" in table
    lines = [line for line in table.splitlines() if line.startswith("| chat |")]
    assert any("after idle" in line and "5 s" in line for line in lines)
    delta = "%+.1f%%" % stored.after_idle_vs_warm_pct
    assert delta.replace("-", "−") in table and "slower" in table
    show = orch_ok("show", str(rid), "--db", db)
    assert "after idle" in show and delta.replace("-", "−") in show
    out = tmp_path / "export"
    orch_ok("export", "1", "-o", str(out), "--db", db)
    turns = pd.read_csv(out / "turns.csv")
    assert list(turns["turn"]) == [1, 2, 3] and list(turns["kind"]) == [FIRST, WARM, AFTER_IDLE]
    assert np.allclose(turns["mean"], [t.mean for t in stored.turns])
    report = orch_ok("report", "--db", db)
    assert "**Turn comparison**" in report and delta.replace("-", "−") in report


def test_one_shot_sessions_get_no_turn_tables(tmp_path):
    db = f"sqlite:///{tmp_path / 'orch.db'}"
    store = Store.open(db)
    sid = store.create_session(name="s", kind="run")
    rid = store.create_run(uid="u1", session_id=sid, device_id=store.upsert_device("d", "local"),
                           cell_key="c", model="m", config="c", flags=None, repeat_index=0,
                           order_index=0, status="running", engine="bmoe", superseded=False)
    rows = [(rid, i, i + 1, 100.0, None, None, None, None, None, None, None, None, 0, None)
            for i in range(30)]
    write_batch(store, rid, rows, [], [], 30)
    store.update_run(rid, status="ok", summary=RunRecord().stored(),
                     figures=compute_run(store, Runs(store).get(rid), RunRecord()))
    assert "Turn" not in orch_ok("table", "--db", db)
    assert "Turn" not in orch_ok("report", "--db", db)
    orch_ok("export", "1", "-o", str(tmp_path / "x"), "--db", db)
    assert not (tmp_path / "x" / "turns.csv").exists()


def test_migration_0011_moves_a_stored_turn_out_of_extra(tmp_path):
    """A session CSV imported before token.turn existed kept its turn in `extra`: after the
    migration its rows carry it and its figures have its turns."""
    import sqlalchemy as sa
    from alembic import command
    from alembic.config import Config

    from orchestrator.db.store import MIGRATIONS

    url = f"sqlite:///{tmp_path / 'old.db'}"
    engine = sa.create_engine(url)
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    with engine.begin() as conn:
        config.attributes["connection"] = conn
        command.upgrade(config, "0010")
    with engine.begin() as conn:
        conn.exec_driver_sql("INSERT INTO device (id, name, kind) VALUES (1, 'd', 'local')")
        conn.exec_driver_sql("INSERT INTO session (id, kind) VALUES (1, 'import')")
        conn.exec_driver_sql("INSERT INTO run (id, uid, session_id, device_id, cell_key, status, "
                             "superseded) VALUES (1, 'u', 1, 1, 'c', 'ok', 0)")
        for seq in range(40):
            turn = 1 if seq < 20 else 2
            conn.exec_driver_sql("INSERT INTO token (run_id, seq, step, wall_ms, extra) VALUES "
                                 f"(1, {seq}, {seq % 20 + 1}, 100.0, '{{\"turn\": {turn}}}')")
    engine.dispose()
    store = Store.open(url)
    turns = store.frame("token", [1])["turn"].tolist()
    assert turns == [1] * 20 + [2] * 20
    figures = Runs(store).figures(Runs(store).current(1))[1]
    assert [t.turn for t in figures.turns] == [1, 2]


def test_a_config_of_two_session_runs_gets_a_row_over_its_runs(tmp_path):
    """Two runs' Δ combine into the config's: their mean with a t interval over the runs (the
    between-run noise), never an average of the runs' bootstrap intervals."""
    from orchestrator.stats.uncertainty import mean_interval

    db, rid = _stored_session(tmp_path)
    store = Store.open(db)
    rid2 = store.create_run(uid="u2", session_id=1, device_id=store.upsert_device("d", "local"),
                            cell_key="chat", model="m", config="chat", flags=None,
                            repeat_index=1, order_index=1, status="running", engine="bmoe",
                            superseded=False)
    rng = np.random.default_rng(7)
    rows, seq = [], 0
    for turn, ms in ((1, 210.0), (2, 100.0), (3, 140.0)):
        for w in ms + rng.normal(0, 5, N):
            rows.append((rid2, seq, seq + 1, float(w), None, None, None, None, None, None, None,
                         None, turn, None))
            seq += 1
    write_batch(store, rid2, rows, [], [], len(rows))
    store.update_run(rid2, status="ok", summary=_record().stored(),
                     figures=compute_run(store, Runs(store).get(rid2), _record()))
    figures = Runs(store).figures(Runs(store).current(1))
    iv = mean_interval([figures[rid].after_idle_vs_warm_pct, figures[rid2].after_idle_vs_warm_pct])
    table = orch_ok("table", "--db", db, "--tables", "turns")
    row = next(line for line in table.splitlines() if "| all 2 |" in line)
    assert ("%+.1f%%" % iv.mean).replace("-", "−") in row
    assert ("%+.1f%%" % iv.low).replace("-", "−") in row


def test_other_turns_under_one_config_name_are_another_config():
    """A session's requests are part of what a config measured (stats/config_key.py): runs
    of one name and flags with other turns are not compared as one config."""
    from orchestrator.stats.config_key import ConfigKey

    chat = [{"cmd": "generate", "id": 1, "prompt": "hi", "n_predict": 32, "idle_s": 0}]
    idle = [{**chat[0], "idle_s": 240}]
    a = ConfigKey.of("m", "chat", "-t 4", session=chat)
    assert a.comparable(ConfigKey.of("m", "chat", "-t 4", session=[dict(chat[0])]))
    assert not a.comparable(ConfigKey.of("m", "chat", "-t 4", session=idle))
    assert not a.comparable(ConfigKey.of("m", "chat", "-t 4"))      # a one-shot run
