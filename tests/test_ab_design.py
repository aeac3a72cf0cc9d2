"""A/B as designed (issue 36, Build 6): a design's `pairs:` and an interleaved `order:` test
paired; several baselines per model (a design's list, two `-b`), each with its own rows; a
Δ row under each compared config; `exclude:` and `--exclude` leave a run out of every figure,
listed with the reason; n = 2 intervals as ± their half-width; the mean column's header names
the interval it holds. On the real study folders of tests/fixtures/bigmoe."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from cli_helpers import orch
from test_ab import figures_of, runs_of
from test_report import by_label, md_tables

from orchestrator.config.design import Design
from orchestrator.report.format import ab_rows as ab_table
from orchestrator.results import ab

FIXTURES = Path(__file__).parent / "fixtures"
REPLAY = FIXTURES / "bigmoe" / "2026-07-20-cache-replay"
REPLAY_DESIGN = FIXTURES / "designs" / "2026-07-20-cache-replay.yaml"
PINNED = FIXTURES / "bigmoe" / "2026-07-21-pinned-dense-ab"
PINNED_DESIGN = FIXTURES / "designs" / "2026-07-21-pinned-dense-ab.yaml"
GPT, QWEN3 = "gpt-oss-120b-Q4_K_M", "Qwen3-30B-A3B-Q4_K_M"
QWEN36 = "Qwen_Qwen3.6-35B-A3B-Q4_K_M"


def imported(tmp_path: Path, folder: Path, design: Path | dict) -> str:
    """A store of `folder` imported with `design` (a file, or a dict written to one)."""
    if isinstance(design, dict):
        path = tmp_path / "design.yaml"
        path.write_text(yaml.safe_dump(design, sort_keys=False))
        design = path
    db = str(tmp_path / "orch.db")
    code, out = orch("import", str(folder), "--design", str(design), "--db", db)
    assert code == 0, out
    return db


def ab_records(db: str, *options: str) -> list[dict]:
    code, out = orch("table", "1", "--db", db, "-t", "ab", "--format", "json", *options)
    assert code == 0, out
    return json.loads(out)


def replay_design(**changes) -> dict:
    design = yaml.safe_load(REPLAY_DESIGN.read_text())
    design.update(changes)
    return {k: v for k, v in design.items() if v is not None}


# ---- the design's keys ---------------------------------------------------------------------

def test_design_keys_pairs_exclude_and_baseline_lists_are_checked():
    configs = {"a": {"files": ["a.csv"]}, "b": {"files": ["b.csv"]}}
    design = Design.model_validate({"configs": configs, "pairs": [["a", "b"]],
                                    "baseline": {"m": ["a", "b"]}, "models": {"m": {}},
                                    "exclude": {"b*.csv": "cross-day"}})
    assert design.baselines_for("m") == ["a", "b"] and design.baseline_for("m") == "a"
    assert design.paired("b", "a") and not design.paired("a", "a")
    assert design.exclusion("sub/b1.csv") == ("b*.csv", "cross-day")
    assert design.exclusion("a.csv") is None
    for bad, where in (({"pairs": [["a", "zz"]]}, "pairs.0.1"),
                       ({"baseline": {"m": ["a", "zz"]}}, "baseline.m.1"),
                       ({"exclude": {"a.csv": " "}}, "give the reason")):
        with pytest.raises(ValueError) as err:
            Design.model_validate({"configs": configs, "models": {"m": {}}, **bad})
        assert where in str(err.value)


# ---- paired: design pairs, an interleaved order --------------------------------------------

def test_design_pairs_are_tested_paired_by_repeat():
    spec = [("m", "a", 0, 10.0, "ok"), ("m", "a", 1, 10.4, "ok"), ("m", "a", 2, 9.6, "ok"),
            ("m", "b", 0, 11.0, "ok"), ("m", "b", 1, 11.5, "ok"), ("m", "b", 2, 10.5, "ok")]
    rows, stats = runs_of(spec)
    configs = {"a": {"files": ["a*"]}, "b": {"files": ["b*"]}}
    paired = Design.model_validate({"configs": configs, "baseline": "a", "pairs": [["a", "b"]]})
    plain = Design.model_validate({"configs": configs, "baseline": "a"})
    (group,) = ab.ab_groups(rows, figures_of(stats), {1: None}, designs={1: paired})
    assert group.rows[1].comparison.method == "paired"
    (group,) = ab.ab_groups(rows, figures_of(stats), {1: None}, designs={1: plain})
    assert group.rows[1].comparison.method == "welch"      # as-written runs: not rounds


def test_an_interleaved_design_order_is_tested_paired(tmp_path):
    # qwen-ab-run1.log ran lru_a then lfu_a, run2.log lfu_b then lru_b: two rounds
    db = imported(tmp_path, REPLAY, REPLAY_DESIGN)
    lfu = next(r for r in ab_records(db) if r["config"] == "layer-lfu")
    assert lfu["baseline"] == "lru" and lfu["method"] == "paired" and lfu["n_config"] == 2
    # without `order:` the import's order is no evidence of rounds: Welch
    (tmp_path / "plain").mkdir()
    db = imported(tmp_path / "plain", REPLAY, replay_design(order=None))
    lfu = next(r for r in ab_records(db) if r["config"] == "layer-lfu")
    assert lfu["method"] == "welch"


# ---- several baselines, Δ rows ------------------------------------------------------------

def test_several_baselines_per_model_each_with_its_own_rows_and_a_delta_row(tmp_path):
    db = imported(tmp_path, REPLAY, REPLAY_DESIGN)
    against = {(r["baseline"], r["config"]) for r in ab_records(db) if r["model"] == GPT}
    # lanes4 against its pair; lanes8 against prefetch, and the unpaired cliff cell under the
    # baseline whose settings it is nearest (8 lanes, like it; 4 lanes is one more apart)
    assert against == {("lanes4_k2", "lanes4_k2"), ("lanes4_k2", "lanes8_k2"),
                       ("lanes8_k2", "lanes8_k2"), ("lanes8_k2", "pf1_k2"),
                       ("lanes8_k2", "cliff_k4_c1500")}
    code, text = orch("report", "--db", db, "--no-plots")
    assert code == 0, text
    assert "- **Baseline:**" in text and "4 I/O lanes, k=2 (ran first, cold) and 8 I/O lanes" \
        in text
    tables = [t for t in md_tables(text) if "verdict" in t["headers"]]
    gpt = by_label(tables[0])
    names = [r[0] for r in tables[0]["rows"]]
    # baseline, config, the config's Δ row in the write-up's words ("default vs k=6")
    i = names.index("8 I/O lanes, k=2, prefetch 1")
    base = max(j for j, name in enumerate(names[:i]) if name == "8 I/O lanes, k=2")
    assert tables[0]["rows"][base][2] == "baseline"       # its block: the baseline first
    delta = gpt["Δ 8 I/O lanes, k=2 vs 8 I/O lanes, k=2, prefetch 1"]
    assert names[i + 1] == "Δ 8 I/O lanes, k=2 vs 8 I/O lanes, k=2, prefetch 1"
    assert list(delta.values())[1] == "−37.1%" and delta["verdict"] == "not tested (n=1/1)"
    assert delta["cache hit"] == "0.0 pp" and delta["flash read/token"] == "+0.5%"
    qwen = by_label(tables[1])
    assert list(qwen["Δ LRU vs layer-LFU"].values())[1].startswith("−27.1% [")


# ---- the interval as it is: n = 2, within-run ----------------------------------------------

def test_n2_interval_is_its_half_width_and_the_header_names_the_intervals(tmp_path):
    db = imported(tmp_path, REPLAY, REPLAY_DESIGN)
    code, text = orch("report", "--db", db, "--no-plots")
    tables = [t for t in md_tables(text) if "verdict" in t["headers"]]
    gpt, qwen = tables
    # one run each: within-run intervals, and the header says so
    assert gpt["headers"][1] == "decode mean [within-run 95%]"
    # two runs each: ± the half-width (t with 1 df), never a range below 0 tok/s
    assert qwen["headers"][1] != "decode mean [95% CI]"
    lru = by_label(qwen)["LRU"][qwen["headers"][1]]
    assert lru == "**5.19** [n = 2: ±1.51, too few to test]"
    assert "n = 2: the 95% interval of a mean over two runs" in text
    rec = next(r for r in ab_records(db) if r["config"] == "lru")
    assert rec["mean_ci_low"] == pytest.approx(5.19 - 1.51, abs=0.01)   # the record keeps it


def test_interval_kinds():
    rows, stats = runs_of([("m", "a", 0, 10.0, "ok"), ("m", "a", 1, 10.5, "ok"),
                           ("m", "a", 2, 10.2, "ok"), ("m", "b", 0, 11.0, "ok"),
                           ("m", "b", 1, 11.4, "ok")])
    (group,) = ab.ab_groups(rows, figures_of(stats), {1: None})
    a, b = group.rows
    assert ab_table.interval_kind(a.interval) == "runs"
    assert ab_table.interval_kind(b.interval) == "n2"
    assert ab_table.mean_cell(b.interval).startswith("**11.20** [n = 2: ±")
    assert ab_table.mean_header([a]) == "decode mean [95% CI]"
    assert ab_table.mean_header([a, b]) == "decode mean [95%: over runs, or as the row says]"


# ---- exclude ------------------------------------------------------------------------------

def test_design_exclude_leaves_a_run_out_of_every_figure_and_lists_it(tmp_path):
    design = yaml.safe_load(PINNED_DESIGN.read_text())
    design["exclude"] = {"bmoe-20260720-212009.csv": "cross-day: device state and build differ"}
    db = imported(tmp_path, PINNED, design)
    code, text = orch("report", "--db", db, "--no-plots")
    assert code == 0, text
    left_out = text[text.index("## Left out"):text.index("## Provenance")]
    assert ("anon-crossday † run 1 (`bmoe-20260720-212009.csv`) on OnePlus 15R: excluded — "
            "cross-day: device state and build differ (design file, `exclude:` "
            "`bmoe-20260720-212009.csv`)") in left_out
    assert "- **Runs:** 8 ended ok, 0 left out (†), 1 excluded by the author" in text
    results = text[:text.index("## Left out")]
    assert "anon, 20 Jul 21:35" not in results           # its label: in no table or finding
    assert all(r["config"] != "anon-crossday" for r in ab_records(db))
    code, out = orch("table", "1", "--db", db)
    assert "excluded — cross-day" in out


def test_cli_exclude_on_report_table_and_compare(tmp_path):
    db = imported(tmp_path, PINNED, PINNED_DESIGN)
    code, text = orch("report", "--db", db, "--no-plots", "--exclude", "3=order effect")
    assert code == 0 and "ahwb-short † run 3" in text and "order effect (`--exclude 3`)" in text
    assert all(r["config"] != "ahwb-short" for r in ab_records(db, "--exclude", "3"))
    recs = ab_records(db, "--exclude", "bmoe-20260721-0905*")     # a glob over the files
    assert all(r["config"] != "ahwb-short" for r in recs)
    code, out = orch("table", "1", "--db", db, "--exclude", "99")
    assert code == 2 and "--exclude 99: no run '99' here" in out
    copy = tmp_path / "again"
    shutil.copytree(PINNED, copy)
    code, out = orch("import", str(copy), "--design", str(PINNED_DESIGN), "--db", db)
    assert code == 0, out
    code, out = orch("compare", "-s", "1", "-s", "2", "--db", db, "--format", "json",
                     "--exclude", "1", "--exclude", "10")
    assert code == 0, out
    assert "left out: " in out and "run 1 (anon-crossday): no reason given" in out


def test_unpaired_configs_go_under_the_nearest_baseline():
    """Two baselines (a study's base and its MAX base): each variant is compared with the
    base it differs least from, a tie with each, a pair wins over the distance."""
    from orchestrator.results.baselines import members
    flags = {"base": {"io": 4}, "pf2": {"io": 4, "pf": 2}, "max": {"io": 4, "cache": 5000},
             "max-pf1": {"io": 4, "cache": 5000, "pf": 1}, "other": {"io": 8}}

    def distance(a: str, b: str) -> int:
        fa, fb = flags[a], flags[b]
        return sum(fa.get(k) != fb.get(k) for k in fa.keys() | fb.keys())

    def never(a: str, b: str) -> bool:
        return False

    got = members(["base", "max"], list(flags), never, distance)
    assert got == {"base": ["pf2", "other"], "max": ["max-pf1"]}
    assert members(["base", "max"], list(flags), lambda a, b: {a, b} == {"max", "pf2"},
                   distance)["max"] == ["pf2", "max-pf1"]
    # without settings to tell them apart: under the first baseline
    assert members(["base", "max"], ["base", "max", "pf2"], never) == {"base": ["pf2"],
                                                                        "max": []}


def test_the_throughput_tables_interval_over_two_runs_is_its_half_width():
    """The throughput table's 95% CI column follows the A/B table's rule: over two runs it is
    ± its half-width, never a range running below 0 tok/s ("−3.10–13.49")."""
    from orchestrator.report.format.cells import ci_cell
    assert ci_cell(-3.10, 13.49, {"n": 2}) == "n = 2: ±8.29"
    assert ci_cell(4.10, 4.30, {"n": 3}) == "4.10–4.30"
    assert ci_cell(None, None, None) == "—"
