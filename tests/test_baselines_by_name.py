"""Baselines by name (`-b CONFIG`, `-b MODEL:CONFIG`) on `orch table` and `orch report`, the
noise floor and within-run interval of single-run A/B rows, and deltas that round to zero."""
from __future__ import annotations

import json
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
from cli_helpers import orch
from test_ab import TWO_MODELS, matrix, runs_of

from orchestrator.db import schema
from orchestrator.db.store import Store
from orchestrator.errors import ConfigError
from orchestrator.report.format import ab_rows as ab_table
from orchestrator.report.format.formatters import pct
from orchestrator.results import ab
from orchestrator.stats.figures import RunFigures


def figures_of(stats: dict) -> dict:
    """Each run's figures from a dict of its values (Runs.figures' shape)."""
    return {rid: RunFigures.of(values) for rid, values in stats.items()}

FIX = Path(__file__).parent / "fixtures" / "bigmoe" / "2026-07-21-pinned-dense-ab"
DESIGN = Path(__file__).parent / "fixtures" / "designs" / "2026-07-21-pinned-dense-ab.yaml"
QWEN, GPT = "Qwen_Qwen3.6-35B-A3B-Q4_K_M", "gpt-oss-120b-Q4_K_M"


@pytest.fixture
def pinned(tmp_path: Path) -> str:
    db = str(tmp_path / "orch.db")
    code, out = orch("import", str(FIX), "--design", str(DESIGN), "--db", db)
    assert code == 0, out
    return db


def store_session(db: str, body: str, spec: list[tuple[str, str, int, float, str]]) -> int:
    """A stored session (test_ab.store_session's, with uids unique across sessions) whose runs
    have constant per-token times: each run's mean tok/s is exactly the value given."""
    store = Store.open(db)
    device = store.upsert_device("d", "local")
    sid = store.create_session(kind="run", name="s", matrix_name="m", matrix_text=body)
    for i, (model, config, rep, tps, status) in enumerate(spec):
        rid = store.create_run(uid=f"s{sid}r{i}", session_id=sid, device_id=device,
                               cell_key=f"{model}|{config}|{rep}", model=model, config=config,
                               repeat_index=rep, order_index=i, status=status, engine="bmoe",
                               superseded=False)
        with store.engine.begin() as conn:
            conn.execute(schema.token.insert(), [
                {"run_id": rid, "seq": k, "step": k + 1, "wall_ms": 1000.0 / tps}
                for k in range(8)])
    return sid


def ab_json(db: str, *options: str) -> dict[tuple[str, str], dict]:
    code, out = orch("table", "1", "--db", db, "-t", "ab", "--format", "json", *options)
    assert code == 0, out
    return {(r["model"], r["config"]): r for r in json.loads(out)}


# ---- parsing, once for every command -------------------------------------------------------

def rows(*pairs: tuple[str, str]) -> list[SimpleNamespace]:
    return [SimpleNamespace(model=m, config=c, session_id=3) for m, c in pairs]


RUNS = rows(("m1", "a"), ("m1", "b=2"), ("m2", "a"), ("m2", "c"), ("org:m3", "c"))


def test_bare_config_applies_to_every_model_that_ran_it_and_model_colon_config_to_one():
    assert ab.parse_baselines(["a"], RUNS, "session 3") == {"m1": ["a"], "m2": ["a"]}
    # `=` in a config name, `:` in a model name: the split is at the last colon
    assert ab.parse_baselines(["m1:b=2", "org:m3:c"], RUNS, "session 3") == {
        "m1": ["b=2"], "org:m3": ["c"]}
    # two for one model: two baselines, each with its own rows (given twice: once)
    assert ab.parse_baselines(["a", "m1:b=2", "a"], RUNS, "session 3") == {
        "m1": ["a", "b=2"], "m2": ["a"]}
    assert ab.parse_baselines([], RUNS, "session 3") == {}
    assert ab.runs_where(RUNS) == "session 3"


@pytest.mark.parametrize(("specs", "message"), [
    (["nosuch"], "-b nosuch: no config 'nosuch' in session 3 (configs: a, b=2, c)"),
    (["m9:a"], "-b m9:a: no model 'm9' in session 3 (models: m1, m2, org:m3)"),
    (["m1:c"], "-b m1:c: model 'm1' did not run 'c' in session 3 (its configs: a, b=2)"),
])
def test_bad_choices_are_refused_naming_the_choices(specs, message):
    with pytest.raises(ConfigError) as err:
        ab.parse_baselines(specs, RUNS, "session 3")
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


# ---- orch table: the study's figures -------------------------------------------------------

def test_orch_table_b_prints_the_studys_deltas(pinned):
    # findings.md quotes ratios of the tok/s it printed (3.053/2.588, 3.053/1.865,
    # 2.588/1.865); the runs give 3.0525, 2.5883, 1.8654 tok/s. At one decimal the data give
    # +17.9% (17.94; the printed figures would give +18.0%), +63.6% (63.64; printed: 63.7)
    # and +38.8%: the study's numbers, which it took from unrounded means.
    by = ab_json(pinned, "-b", "anon-long")
    assert by[QWEN, "ahwb-long"]["baseline"] == "anon-long"
    assert round(by[QWEN, "ahwb-long"]["delta_pct"], 1) == 17.9
    by = ab_json(pinned, "-b", "anon-crossday")
    assert {r["baseline"] for k, r in by.items() if k[0] == QWEN} == {"anon-crossday"}
    assert round(by[QWEN, "ahwb-long"]["delta_pct"], 1) == 63.6
    assert round(by[QWEN, "anon-long"]["delta_pct"], 1) == 38.8
    # a model that did not run anon-crossday keeps its design file's baseline
    assert {r["baseline"] for k, r in by.items() if k[0] == GPT} == {"anon-short-c2000"}
    by = ab_json(pinned, "-b", "anon-crossday", "-b", f"{GPT}:ahwb-short-c1000")
    assert {r["baseline"] for k, r in by.items() if k[0] == GPT} == {"ahwb-short-c1000"}


def test_orch_table_bad_b_exits_2_with_one_line(pinned):
    code, out = orch("table", "1", "--db", pinned, "-t", "ab", "-b", "nosuch")
    lines = out.strip().splitlines()
    assert code == 2 and len(lines) == 1
    assert lines[0].startswith("error: -b nosuch: no config 'nosuch' in session 1 (configs: ")
    assert "anon-long" in lines[0] and "ahwb-long" in lines[0]
    code, out = orch("table", "1", "--db", pinned, "-b", f"{GPT}:anon-long")
    assert code == 2 and f"model '{GPT}' did not run 'anon-long'" in out
    # two for one model: each its own rows (docs/report.md, "Baselines")
    code, out = orch("table", "1", "--db", pinned, "-t", "ab", "--format", "json",
                     "-b", "anon-long", "-b", "ahwb-long")
    assert code == 0, out
    against = {(r["baseline"], r["config"]) for r in json.loads(out) if r["model"] == QWEN}
    assert ("anon-long", "anon-long") in against and ("ahwb-long", "ahwb-long") in against


# ---- orch report: repeatable -b ------------------------------------------------------------

def test_orch_report_takes_repeatable_b(pinned):
    code, text = orch("report", "1", "--db", pinned, "--no-plots", "-b", "anon-crossday",
                      "-b", f"{GPT}:ahwb-short-c1000")
    assert code == 0, text
    header = next(line for line in text.splitlines() if line.startswith("- **Baseline:**"))
    # the header names each model's baseline (by config name or by its design label)
    assert ("anon-crossday" in header or "anon, 20 Jul 21:35" in header) and "Qwen3.6-35B-A3B Q4_K_M:" in header   # the model by its label
    assert "ahwb-short-c1000" in header or "cache 1000 MiB forced" in header
    # the Δ rows under each config, named by the design's labels
    ab_rows = [line for line in text.splitlines()
               if line.startswith("| Δ anon, 20 Jul 21:35 (cross-day, not usable) vs ")]
    assert any("vs ahwb, long generation" in line and "+63.6%" in line for line in ab_rows)
    assert any("vs anon, long generation" in line and "+38.8%" in line for line in ab_rows)
    code, out = orch("report", "1", "--db", pinned, "--no-plots", "-b", "nosuch")
    assert code == 2 and "-b nosuch: no config 'nosuch' in session 1" in out


# ---- single runs: the noise floor, the within-run interval --------------------------------

def test_single_run_rows_carry_the_noise_floor_of_the_groups_repeats():
    spec = [("m1", "a", 0, 10.0, "ok"), ("m1", "b", 0, 11.0, "ok"), ("m1", "c", 0, 12.0, "ok"),
            ("m1", "c", 1, 12.6, "ok")]
    runs, stats = runs_of(spec)
    body = TWO_MODELS.format(order="as-written").replace("repeat: 3", "repeat: 1")
    group = ab.ab_groups(runs, figures_of(stats), {1: matrix(body)})[0]
    b = next(r for r in group.rows if r.config == "b")
    assert ab_table.verdict_words(b) == "not tested (n=1/1)"
    assert b.noise_floor_pct == pytest.approx(5.0) and b.noise_floor_from == "c"
    assert b.comparison.p_value is None          # still not a test
    assert ab_table.verdict_text(b) == \
        "not tested (n=1/1); noise floor ±5.0% (from repeats of c)"
    rec = next(r for r in ab_table.records([group]) if r["config"] == "b")
    assert (rec["noise_floor_pct"], rec["noise_floor_from"]) == (pytest.approx(5.0), "c")
    assert any("noise floor" in n for n in ab_table.notes(group))


def test_without_repeats_in_the_session_the_earlier_ones_count(tmp_path):
    db = str(tmp_path / "orch.db")
    body = textwrap.dedent(TWO_MODELS.format(order="as-written").replace("repeat: 3",
                                                                          "repeat: 1"))
    store_session(db, body, [("m1", "a", 0, 10.0, "ok"), ("m1", "a", 1, 10.8, "ok")])
    store_session(db, body, [("m1", "a", 0, 10.0, "ok"), ("m1", "b", 0, 12.0, "ok")])
    code, out = orch("table", "2", "--db", db, "-t", "ab", "--format", "json")
    assert code == 0, out
    b = next(r for r in json.loads(out) if r["config"] == "b")
    assert b["noise_floor_pct"] == pytest.approx(8.0)
    assert b["noise_floor_from"] == "a, session 1"
    code, out = orch("table", "2", "--db", db, "-t", "ab")
    assert "not tested (n=1/1); noise floor ±8.0% (from repeats of a, session 1)" in out
    # no repeats anywhere: nothing is claimed
    code, out = orch("table", "1", "--db", db, "-t", "ab", "--format", "json")
    assert all(r["noise_floor_pct"] is None for r in json.loads(out))


def test_single_runs_show_their_within_run_interval():
    runs, stats = runs_of([("m1", "a", 0, 10.0, "ok"), ("m1", "b", 0, 12.0, "ok")])
    stats[1].update(tps_ci_low=9.5, tps_ci_high=10.5)
    stats[2].update(tps_ci_low=11.0, tps_ci_high=13.0)
    group = ab.ab_groups(runs, figures_of(stats), {1: None})[0]
    assert [r.within_run for r in group.rows] == [(9.5, 10.5), (11.0, 13.0)]
    cells = ab_table.value_cells(group.rows[1])
    assert cells[0] == "**12.00** [11.00–13.00 within-run]"
    assert ab_table.mean_header(group.rows) == "decode mean [within-run 95%]"
    assert any(n.startswith("within-run:") for n in ab_table.notes(group))
    rec = ab_table.records([group])[1]
    assert (rec["within_run_ci_low"], rec["within_run_ci_high"]) == (11.0, 13.0)


# ---- paper cuts ----------------------------------------------------------------------------

def test_a_delta_that_rounds_to_zero_has_no_sign():
    assert pct(-0.04) == "0.0%" and pct(0.04) == "0.0%" and pct(0.0) == "0.0%"
    assert pct(-12.44) == "−12.4%" and pct(2.0) == "+2.0%"
    assert ab_table.pp(-0.01) == "0.0 pp" and ab_table.pp(-1.5) == "−1.5 pp"
