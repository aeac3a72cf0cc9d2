"""A/B rows (results/ab.py): each model against its own baseline, intervals, paired or Welch
tests, Holm across a document; `orch table -t ab` and the report's A/B table; end to end on
`local` with moe-probe (A/A control, a real cache effect) and a two-model bmoe matrix.

Over 400 lines on purpose: the A/B rules, then their tables, then the end-to-end runs that feed
them.
"""
from __future__ import annotations

import json
import math
import textwrap
from types import SimpleNamespace

import numpy as np
import pytest
from cli_helpers import orch_ok as orch
from scipy import stats as sps
from test_report import by_label, find, md_tables, run_matrix

from orchestrator.config.stored_matrix import stored_matrix
from orchestrator.db import schema
from orchestrator.db.store import Store
from orchestrator.report.format import ab_rows as ab_table
from orchestrator.results import ab
from orchestrator.db.runs import Runs
from orchestrator.stats.figures import frame
from orchestrator.stats.uncertainty import holm
from orchestrator.stats.figures import RunFigures


def figures_of(stats: dict) -> dict:
    """Each run's figures from a dict of its values (Runs.figures' shape)."""
    return {rid: RunFigures.of(values) for rid, values in stats.items()}

# ---- synthetic runs ----------------------------------------------------------------------


def runs_of(spec: list[tuple[str, str, int, float | None, str]], session: int = 1
            ) -> tuple[list[SimpleNamespace], dict[int, dict]]:
    """(run rows, stats) from (model, config, repeat, tok/s, status), in run order."""
    rows, stats = [], {}
    for i, (model, config, rep, tps, status) in enumerate(spec, 1):
        rows.append(SimpleNamespace(id=i, session_id=session, model=model, device="d",
                                    config=config, status=status, repeat_index=rep,
                                    order_index=i))
        stats[i] = {"mean": tps, "cache_hit_pct": None, "read_mib_per_token": None}
    return rows, stats


def interleaved(model: str, series: dict[str, list[float]]) -> list[tuple]:
    rounds = len(next(iter(series.values())))
    return [(model, c, r, series[c][r], "ok") for r in range(rounds) for c in series]


def matrix(body: str):
    m = stored_matrix(textwrap.dedent(body))
    assert m is not None
    return m


TWO_MODELS = """\
    name: two
    engine: bmoe
    models: {{m1: /m1.gguf, m2: /m2.gguf}}
    repeat: 3
    order: {order}
    baseline: {{m1: a, m2: b}}
    configs: {{a: --x 1, b: --x 2, c: --x 3}}
    """


def row(groups: list[ab.ABGroup], model: str, config: str) -> ab.ABRow:
    group = next(g for g in groups if g.model == model)
    return next(r for r in group.rows if r.config == config)


def test_each_model_has_its_own_baseline_and_no_delta_crosses_models():
    m1 = {"a": [10.0, 10.2, 9.9], "b": [20.0, 20.5, 19.6], "c": [5.0, 5.1, 5.05]}
    m2 = {"a": [3.0, 3.1, 2.95], "b": [6.0, 6.2, 5.9], "c": [12.0, 12.1, 11.8]}
    rows, stats = runs_of(interleaved("m1", m1) + interleaved("m2", m2))
    groups = ab.ab_groups(rows, figures_of(stats), {1: matrix(TWO_MODELS.format(order="as-written"))})
    assert [(g.model, g.baseline) for g in groups] == [("m1", "a"), ("m2", "b")]
    assert [r.config for r in groups[1].rows] == ["b", "a", "c"]       # the baseline first
    for model, series, base in (("m1", m1, "a"), ("m2", m2, "b")):
        for config in series:
            r = row(groups, model, config)
            assert r.interval.mean == pytest.approx(np.mean(series[config]))
            if config == base:
                assert r.is_baseline and r.comparison is None and r.verdict == "baseline"
                continue
            # the ratio of geometric means of this model's runs only
            want = math.exp(np.mean(np.log(series[config])) - np.mean(np.log(series[base])))
            assert r.comparison.delta_pct == pytest.approx((want - 1) * 100)
            assert r.comparison.method == "welch"              # as-written: rounds not paired
    # --baseline overrides in every group where that config ran
    groups = ab.ab_groups(rows, figures_of(stats), {1: matrix(TWO_MODELS.format(order="as-written"))}, "c")
    assert [g.baseline for g in groups] == ["c", "c"]
    groups = ab.ab_groups(rows, figures_of(stats), {1: matrix(TWO_MODELS.format(order="as-written"))},
                          "nonexistent")
    assert [g.baseline for g in groups] == ["a", "b"]


def test_imported_session_compares_with_the_first_config_in_run_order():
    rows, stats = runs_of([("-", "y", 0, 4.0, "ok"), ("-", "x", 0, 5.0, "ok"),
                           ("-", "z", 0, 2.0, "ok")])
    (group,) = ab.ab_groups(rows, figures_of(stats), {1: None})
    assert group.baseline == "y"
    x = row([group], "-", "x")
    assert x.comparison.delta_pct == pytest.approx(25.0)
    assert x.comparison.p_value is None and not x.comparison.significant
    assert ab_table.verdict_words(x) == "not tested (n=1/1)" and x.interval.low is None


def test_interleaved_rounds_are_paired_and_pairs_only_their_members():
    # a drift from round to round, much larger than the 2% effect: pairing removes it
    base = [10.0, 12.0, 14.0, 16.0, 18.0]
    cand = [b * 1.02 * (1 + e) for b, e in zip(base, (0.001, -0.002, 0.0015, -0.001, 0.0))]
    other = [b * (1 + e) for b, e in zip(base, (0.01, -0.01, 0.005, 0.0, -0.005))]
    rows, stats = runs_of(interleaved("-", {"a": base, "b": cand, "c": other}))
    body = """\
        name: p
        engine: moe-probe
        repeat: 5
        order: {order}
        configs: {{a: --x 1, b: --x 2, c: --x 3}}
        {extra}
        """
    paired = ab.ab_groups(rows, figures_of(stats), {1: matrix(body.format(order="interleaved", extra=""))})
    b = row(paired, "-", "b")
    assert b.comparison.method == "paired" and b.comparison.n_cand == 5
    want = sps.ttest_1samp(np.log(cand) - np.log(base), 0.0).pvalue
    assert b.comparison.p_value == pytest.approx(want)
    assert b.comparison.significant and b.verdict == "faster"
    assert b.comparison.ci_low_pct > 0 and b.comparison.ci_low_pct < b.comparison.delta_pct \
        < b.comparison.ci_high_pct
    assert ab_table.verdict_words(row(paired, "-", "c")) == "no significant difference (n=5 rounds)"
    # the same runs unpaired: the drift swamps the effect
    welch = ab.ab_groups(rows, figures_of(stats), {1: matrix(body.format(order="as-written", extra=""))})
    b = row(welch, "-", "b")
    assert b.comparison.method == "welch" and not b.comparison.significant
    assert ab_table.verdict_words(b) == "no significant difference (n=5/5)"
    assert b.comparison.ci_low_pct < 0 < b.comparison.ci_high_pct
    # `pairs:` pairs only the configs of the pair, in any order
    pairs = ab.ab_groups(rows, figures_of(stats), {1: matrix(body.format(
        order="shuffled", extra="pairs: [[a, b]]"))})
    assert row(pairs, "-", "b").comparison.method == "paired"
    assert row(pairs, "-", "c").comparison.method == "welch"
    # a round missing on one side is dropped from the pairing, not misaligned
    rows2 = [r for r in rows if not (r.config == "b" and r.repeat_index == 2)]
    dropped = ab.ab_groups(rows2, figures_of(stats), {1: matrix(body.format(order="interleaved", extra=""))})
    keep = [0, 1, 3, 4]
    want = sps.ttest_1samp(np.log([cand[i] for i in keep]) - np.log([base[i] for i in keep]),
                           0.0).pvalue
    assert row(dropped, "-", "b").comparison.p_value == pytest.approx(want)


def test_holm_across_every_group_decides_significance():
    # four paired comparisons, each with a raw p between 0.03 and 0.05: alone each would be
    # "significant"; four in one document are not (Holm multiplies the smallest by 4)
    base = [10.0, 12.0, 11.0, 13.0]
    logs = {"m1": {"b": [0.01, 0.05, 0.04, 0.02], "c": [0.02, 0.05, 0.03, 0.01]},
            "m2": {"b": [-0.01, -0.05, -0.04, -0.02], "c": [-0.02, -0.04, -0.03, -0.01]}}
    spec = []
    for model, by_config in logs.items():
        spec += interleaved(model, {"a": base, **{c: list(np.array(base) * np.exp(d))
                                                  for c, d in by_config.items()}})
    rows, stats = runs_of(spec)
    body = TWO_MODELS.format(order="interleaved").replace("repeat: 3", "repeat: 4") \
        .replace("{m1: a, m2: b}", "a")
    groups = ab.ab_groups(rows, figures_of(stats), {1: matrix(body)})
    tested = [r.comparison for g in groups for r in g.rows if r.comparison is not None]
    assert len(tested) == 4 and all(g.family == 4 for g in groups)
    assert all(0.03 < c.p_value < 0.05 for c in tested)
    assert [c.p_adjusted for c in tested] == pytest.approx(holm([c.p_value for c in tested]))
    assert not any(c.significant for c in tested)
    assert {ab_table.verdict_words(r) for g in groups for r in g.rows if not r.is_baseline} == {
        "no significant difference (n=4 rounds)"}
    # one document with one of them: significant
    alone = ab.ab_groups([r for r in rows if r.model == "m2" and r.config != "c"], figures_of(stats),
                         {1: matrix(body)})
    (only,) = [r for r in alone[0].rows if not r.is_baseline]
    assert only.comparison.significant and only.verdict == "slower" and alone[0].family == 1


def test_runs_that_did_not_end_ok_take_no_part():
    spec = interleaved("-", {"a": [10.0, 10.1, 9.9], "b": [11.0, 11.1, 10.9]})
    spec += [("-", "b", 3, 500.0, "failed"), ("-", "c", 0, 3.0, "timeout"),
             ("-", "c", 1, 3.0, "killed")]
    rows, stats = runs_of(spec)
    (group,) = ab.ab_groups(rows, figures_of(stats), {1: None})
    b = row([group], "-", "b")
    assert b.interval.n == 3 and b.comparison.n_cand == 3 and b.failed == (7,)
    assert b.interval.mean == pytest.approx(11.0)
    c = row([group], "-", "c")
    assert c.comparison is None and c.ids == () and c.verdict == "no run ended ok"
    assert ab_table.value_cells(c)[2] == "no run ended ok (†: 8, 9)"
    assert ab_table.delta_cells(c) is None             # no Δ row for it
    # a baseline without an ok run: no comparison at all, and why
    rows, stats = runs_of([("-", "a", 0, 10.0, "failed"), ("-", "b", 0, 11.0, "ok")])
    (group,) = ab.ab_groups(rows, figures_of(stats), {1: None})
    assert group.rows == [] and "has no run that ended ok" in group.note


def test_deterministic_figures_are_plain_differences():
    rows, stats = runs_of(interleaved("-", {"a": [10.0, 10.5], "b": [14.0, 14.2]}))
    for rid, hit, read in ((1, 50.0, 200.0), (3, 50.0, 200.0), (2, 62.5, 150.0), (4, 62.5, 150.0)):
        stats[rid].update(cache_hit_pct=hit, read_mib_per_token=read)
    (group,) = ab.ab_groups(rows, figures_of(stats), {1: None})
    b = row([group], "-", "b")
    assert b.cache_hit_delta_pp == 12.5 and b.read_delta_pct == -25.0
    cells = dict(zip(ab_table.HEADERS[1:], ab_table.delta_cells(b)))    # its Δ row
    assert cells["cache hit"] == "+12.5 pp" and cells["flash read/token"] == "−25.0%"
    note = " ".join(ab_table.notes(group))
    assert "exact" in note and "within" not in note     # no noise caveat on exact figures


def test_cells_and_records():
    rows, stats = runs_of(interleaved("-", {"a": [10.0, 11.0, 12.0], "b": [5.0, 5.5, 6.0]}))
    (group,) = ab.ab_groups(rows, figures_of(stats), {1: None})
    b = row([group], "-", "b")
    lo, hi = sps.t.interval(0.95, 2, loc=5.5, scale=np.std([5.0, 5.5, 6.0], ddof=1) / 3 ** 0.5)
    assert ab_table.mean_cell(b.interval) == "**5.50** [%.2f–%.2f]" % (lo, hi)
    c = b.comparison
    assert ab_table.delta_cell(c) == "−50.0%% [%s, %s]" % (
        ("%+.1f%%" % c.ci_low_pct).replace("-", "−"), ("%+.1f%%" % c.ci_high_pct).replace("-", "−"))
    (base_rec, rec) = ab_table.records([group])
    assert base_rec["config"] == base_rec["baseline"] == "a" and base_rec["delta_pct"] is None
    assert base_rec["n_base"] == base_rec["n_config"] == 3
    for key in ("config", "baseline", "model", "device", "delta_pct", "ci_low_pct",
                "ci_high_pct", "p_value", "p_adjusted", "significant", "n_base", "n_config",
                "method"):
        assert key in rec
    assert rec["table"] == "ab" and rec["delta_pct"] == pytest.approx(c.delta_pct)
    assert rec["p_value"] == c.p_value and rec["p_adjusted"] == c.p_adjusted
    assert rec["significant"] is True and rec["verdict"] == "slower"
    assert ab_table.p_cell(0.0004) == "<0.001" and ab_table.p_cell(0.0456) == "0.046"


# ---- synthetic stored runs: `orch table` ---------------------------------------------------

def store_session(db: str, body: str, spec: list[tuple[str, str, int, float, str]]) -> int:
    """A stored session of the matrix `body` whose runs have constant per-token times, so each
    run's mean tok/s is exactly the given value."""
    store = Store.open(db)
    device = store.upsert_device("d", "local")
    text = textwrap.dedent(body)
    sid = store.create_session(kind="run", name="s", matrix_name="m", matrix_text=text)
    for i, (model, config, rep, tps, status) in enumerate(spec):
        rid = store.create_run(uid=f"r{i}", session_id=sid, device_id=device,
                               cell_key=f"{model}|{config}|{rep}", model=model, config=config,
                               repeat_index=rep, order_index=i, status=status, engine="bmoe",
                               superseded=False)
        with store.engine.begin() as conn:
            conn.execute(schema.token.insert(), [
                {"run_id": rid, "seq": k, "step": k + 1, "wall_ms": 1000.0 / tps}
                for k in range(8)])
    return sid


def test_orch_table_ab_json_csv_md_and_default(tmp_path):
    db = str(tmp_path / "orch.db")
    m1 = {"a": [10.0, 10.2, 9.9], "b": [20.0, 20.5, 19.6]}
    m2 = {"a": [3.0, 3.1, 2.95], "b": [6.0, 6.3, 5.8]}
    body = TWO_MODELS.format(order="interleaved").replace(", c: --x 3", "")
    store_session(db, body, interleaved("m1", m1) + interleaved("m2", m2))
    data = json.loads(orch("table", "--db", db, "-t", "ab", "--format", "json"))
    assert {r["table"] for r in data} == {"ab"} and len(data) == 4
    by = {(r["model"], r["config"]): r for r in data}
    assert by["m1", "b"]["baseline"] == "a" and by["m2", "a"]["baseline"] == "b"
    want = math.exp(np.mean(np.log(m2["a"])) - np.mean(np.log(m2["b"])))
    assert by["m2", "a"]["delta_pct"] == pytest.approx((want - 1) * 100)
    assert by["m2", "a"]["method"] == "paired" and by["m2", "a"]["significant"] is True
    assert by["m2", "a"]["ci_low_pct"] <= by["m2", "a"]["delta_pct"] <= by["m2", "a"]["ci_high_pct"]
    csv = orch("table", "--db", db, "-t", "ab", "--format", "csv").splitlines()
    assert csv[0].startswith("table,model,device,config,label,baseline,") and len(csv) == 5
    # markdown: the A/B table per model, shown unasked since the configs repeat
    text = orch("table", "--db", db)
    tables = md_tables(text)
    abt = find(tables, "decode mean [95% CI]")
    assert [t["title"] for t in abt] == ["m1 on d", "m2 on d"]
    assert by_label(abt[1])["b"]["verdict"] == "baseline"
    assert by_label(abt[1])["Δ b vs a"]["verdict"] == "slower"
    assert "Holm-corrected across the 2 comparison(s)" in text


def test_orch_table_leaves_ab_out_by_default_for_single_runs(tmp_path):
    db = str(tmp_path / "orch.db")
    body = TWO_MODELS.format(order="as-written").replace("repeat: 3", "repeat: 1")
    store_session(db, body, [("m1", "a", 0, 10.0, "ok"), ("m1", "b", 0, 12.0, "ok")])
    assert "**A/B against" not in orch("table", "--db", db)
    assert "not tested (n=1/1)" in orch("table", "--db", db, "-t", "ab")


# ---- end to end on `local` ---------------------------------------------------------------

# 64 MiB of experts, little compute per expert: without a cache a token reads 32 MiB (from the
# page cache), with a 128 MiB cache it reads nothing after the first pass, about 20x faster
PROBE_FLAGS = "--io pread --layers 4 --experts 8 --expert-mb 2 --top-k 4 --compute-kb 4 --seed 7"
AA_CACHE = f"""\
    name: aa-cache
    description: an A/A control and a real expert-cache effect, 5 interleaved rounds
    engine: moe-probe
    prompt: hello experts
    tokens: 16
    repeat: 5
    order: interleaved
    baseline: none
    cooldown: 0
    sample_interval: 0.2s
    configs:
      none: {PROBE_FLAGS} --cache-mb 0
      none-again: {PROBE_FLAGS} --cache-mb 0
      cache: {PROBE_FLAGS} --cache-mb 128
    """


def ab_records(*args: str) -> dict[str, dict]:
    data = json.loads(orch("table", *args, "-t", "ab", "--format", "json"))
    return {r["config"]: r for r in data}


@pytest.mark.slow
def test_aa_control_is_not_significant_and_a_cache_is(workspace):
    """Identical flags (one routing seed: the same work) differ only by machine noise. A
    paired test marks such an A/A pair significant in about alpha = 5% of sessions by design
    (Holm does not lower that: the cache's tiny p-value ranks first). A second, independent
    session is run only when the first one's A/A is significant: a false alarm in both has
    probability alpha² = 0.25%, while a real bias of the method (a config favoured by its
    place in the round) would fail both."""
    run_matrix(workspace, AA_CACHE)
    rec = ab_records()
    if rec["none-again"]["significant"]:
        run_matrix(workspace, AA_CACHE)                 # a new session: `orch table`'s newest
        rec = ab_records()
    aa, cache = rec["none-again"], rec["cache"]
    assert aa["method"] == cache["method"] == "paired" and aa["n_config"] == 5
    assert aa["baseline"] == "none" and not aa["significant"]
    assert aa["p_adjusted"] >= 0.05 and aa["ci_low_pct"] < 0 < aa["ci_high_pct"] or \
        aa["delta_pct"] == 0
    assert aa["verdict"] == "no significant difference (n=5 rounds)"
    # the cache serves nearly every expert from memory: a large, real speed-up
    assert cache["significant"] and cache["verdict"] == "faster"
    assert 0 < cache["ci_low_pct"] <= cache["delta_pct"] <= cache["ci_high_pct"]
    assert cache["cache_hit_pct"] > 90 and cache["read_delta_pct"] < -90
    # the report says the same, with each config's interval in the throughput table
    store = Store.open("orch.db")
    sid = max(r.session_id for r in Runs(store).current())
    text = orch("report", str(sid), "--no-plots")
    tables = md_tables(text)
    rows = by_label(find(tables, "decode mean [95% CI]")[0])
    assert rows["none"]["verdict"] == "baseline"
    assert rows["Δ none vs cache"]["verdict"] == "faster"
    assert rows["Δ none vs none-again"]["verdict"] == "no significant difference (n=5 rounds)"
    assert "within the spread" not in text
    thr = by_label(find(tables, "95% CI")[0])
    runs = [r for r in Runs(store).current(sid) if r.config == "cache"]
    means = frame(Runs(store).figures(runs))["mean"]
    lo, hi = sps.t.interval(0.95, 4, loc=means.mean(), scale=means.std(ddof=1) / 5 ** 0.5)
    assert thr["cache"]["95% CI"] == "%.2f–%.2f" % (lo, hi)


TWO_MODEL_BMOE = """\
    name: two-models
    engine: bmoe
    binary: {{local: fake_bmoe.sh}}
    models: {{m1: /m1.gguf, m2: /m2.gguf}}
    prompt: p
    tokens: 6
    repeat: 2
    order: interleaved
    baseline: {{m1: slow, m2: fast}}
    labels: {{fast: fast path}}
    cooldown: 0
    sample_interval: 0.1s
    configs:
      slow: --delay 0.001 --slowdown {dir}/slow.count
      fast: --delay 0.001 --slowdown {dir}/fast.count
    """


@pytest.mark.slow
def test_two_model_matrix_each_model_against_its_own_baseline(workspace):
    # fake_bmoe is 20 ms/token slower per run counted in its --slowdown file: `slow` starts at
    # count 10, `fast` at 0, so every (model, config) has its own speed
    (workspace / "slow.count").write_text("10\n")
    (workspace / "fast.count").write_text("0\n")
    run_matrix(workspace, TWO_MODEL_BMOE.format(dir=workspace))
    store = Store.open("orch.db")
    runs = Runs(store).current()
    assert len(runs) == 8 and all(r.status == "ok" for r in runs)
    stats = frame(Runs(store).figures(runs))["mean"]
    data = json.loads(orch("table", "--format", "json", "-t", "ab"))
    assert {(r["model"], r["config"], r["baseline"]) for r in data} == {
        ("m1", "slow", "slow"), ("m1", "fast", "slow"), ("m2", "fast", "fast"),
        ("m2", "slow", "fast")}
    text = orch("report", "--no-plots")
    tables = md_tables(text)
    assert "**Baseline:** m1: slow; m2: fast path" in text      # labels, as in the tables
    labels = {"slow": "slow", "fast": "fast path"}
    for title in ("m1 on local", "m2 on local"):      # the throughput rows carry labels too
        assert set(by_label(find(tables, "95% CI", title)[0])) == {"slow", "fast path"}
    for rec in data:
        if rec["config"] == rec["baseline"]:
            assert rec["delta_pct"] is None
            continue
        own = {c: [stats[r.id] for r in runs if r.model == rec["model"] and r.config == c]
               for c in ("slow", "fast")}
        want = math.exp(np.mean(np.log(own[rec["config"]])) - np.mean(np.log(own[rec["baseline"]])))
        assert rec["delta_pct"] == pytest.approx((want - 1) * 100)
        assert rec["method"] == "paired" and rec["n_config"] == 2
        table = by_label(find(tables, "verdict", f"{rec['model']} on local")[0])
        label = labels[rec["config"]]                 # the matrix's `labels:`
        assert rec["label"] == label
        assert table[labels[rec["baseline"]]]["verdict"] == "baseline"
        delta = table[f"Δ {labels[rec['baseline']]} vs {label}"]
        assert list(delta.values())[1].split(" [")[0] == \
            ("%+.1f%%" % rec["delta_pct"]).replace("-", "−")
    # no row compares one model's config with the other model's runs
    ab_tables = find(tables, "verdict")
    assert [t["title"] for t in ab_tables] == ["m1 on local", "m2 on local"]
    assert all(len(t["rows"]) == 3 for t in ab_tables)     # baseline, config, its Δ row
