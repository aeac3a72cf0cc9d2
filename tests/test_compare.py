"""`orch compare` and `orch report --compare`: any devices or sessions (two sessions of one
device, an imported session) with intervals, Welch p-values and Holm, from real runs."""
from __future__ import annotations

import json
import math
import statistics
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
from cli_helpers import orch, orch_ok
from scipy import stats as scipy_stats

from orchestrator.db.store import Store
from orchestrator.db.runs import Runs
from orchestrator.stats.figures import frame

FIX = Path(__file__).resolve().parent / "fixtures" / "bigmoe"
KEYS = {"model", "config", "reference", "other", "ratio", "ci_low", "ci_high", "p_value",
        "p_adjusted", "significant", "n_reference", "n_other"}

PROBE = """\
    name: probe-cmp
    engine: moe-probe
    prompt: hello experts
    tokens: 24
    repeat: 3
    cooldown: 0
    sample_interval: 0.2s
    configs:
      pread: --io pread --cache-mb 0 --layers 4 --experts 8 --expert-mb 0.0625 --top-k 2
      mmap: --io mmap --cache-mb 1 --layers 4 --experts 8 --expert-mb 0.0625 --top-k 2
    """

# fake_bmoe.sh --slowdown FILE: every run counts itself in FILE and is 20 ms/token slower per
# count, so repeats have a spread, and a counter started at 20 makes a config ~4x slower.
FAKE = """\
    name: {name}
    engine: bmoe
    binary: {{local: fake_bmoe.sh}}
    models: {{m: /m.gguf}}
    prompt: p
    tokens: 8
    repeat: 3
    cooldown: 0
    configs:
      same: --delay 0 --slowdown {ws}/same
      changed: --delay 0 --slowdown {ws}/changed
    """


def run_matrix(workspace: Path, body: str, *devices: str, file: str = "m.yaml") -> None:
    (workspace / file).write_text(textwrap.dedent(body))
    code, out = orch("run", file, *[a for d in devices for a in ("--device", d)])
    assert code == 0, out


def compare_json(*args: str) -> list[dict]:
    return json.loads(orch_ok("compare", *args, "--format", "json"))


def by_config(records: list[dict]) -> dict[str, dict]:
    return {r["config"]: r for r in records if r["kind"] == "config"}


def run_means(store: Store, device: str | None = None, session: int | None = None
              ) -> dict[str, list[float]]:
    runs = [r for r in Runs(store).current(session) if r.status == "ok"
            and (device is None or r.device == device)]
    stats = frame(Runs(store).figures(runs))
    out: dict[str, list[float]] = {}
    for r in sorted(runs, key=lambda r: r.id):
        out.setdefault(r.config, []).append(float(stats.loc[r.id, "mean"]))
    return out


def geometric_ratio(a: list[float], b: list[float]) -> float:
    return math.exp(statistics.fmean(map(math.log, b)) - statistics.fmean(map(math.log, a)))


def md_table(text: str) -> dict[str, dict[str, str]]:
    """The first markdown table, as config -> header -> cell."""
    lines = text[text.index("\n|"):].split("\n\n", 1)[0].strip().splitlines()
    headers = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = [dict(zip(headers, (c.strip() for c in l.strip("|").split("|")))) for l in lines[2:]]
    return {r["Config"]: r for r in rows}


@pytest.mark.slow
def test_two_devices_with_intervals(workspace):
    run_matrix(workspace, PROBE, "local", "other")
    store = Store.open("orch.db")
    records = compare_json("-d", "local", "-d", "other", "-m", "probe-cmp")
    assert all(KEYS <= set(r) for r in records if r["kind"] in ("config", "summary"))
    assert [r["device"] for r in records if r["kind"] == "device"] == ["local", "other"]
    rows = by_config(records)
    assert set(rows) == {"pread", "mmap"}
    local, other = run_means(store, "local"), run_means(store, "other")
    for config, rec in rows.items():
        a, b = local[config], other[config]
        assert (rec["reference"], rec["other"]) == ("local", "other")
        assert rec["n_reference"] == rec["n_other"] == 3
        assert rec["mean_reference"] == pytest.approx(statistics.fmean(a))
        assert rec["mean_other"] == pytest.approx(statistics.fmean(b))
        # each side's interval: Student t over its runs' means
        half = scipy_stats.t.ppf(0.975, 2) * statistics.stdev(a) / math.sqrt(3)
        assert rec["mean_reference_ci_low"] == pytest.approx(statistics.fmean(a) - half)
        # the ratio: Welch on the logs, with an interval that contains it
        assert rec["ratio"] == pytest.approx(geometric_ratio(a, b))
        welch = scipy_stats.ttest_ind(list(map(math.log, b)), list(map(math.log, a)),
                                      equal_var=False)
        assert rec["p_value"] == pytest.approx(welch.pvalue)
        assert rec["ci_low"] <= rec["ratio"] <= rec["ci_high"]
        assert rec["method"] == "welch"
        assert rec["p_adjusted"] >= rec["p_value"]
        assert rec["significant"] == (rec["p_adjusted"] < 0.05)
    summary = [r for r in records if r["kind"] == "summary"]
    assert len(summary) == 1 and summary[0]["configs"] == 2
    assert summary[0]["ratio"] == pytest.approx(
        math.sqrt(rows["pread"]["ratio"] * rows["mmap"]["ratio"]))
    # no -m: each device's newest session, the same runs here
    assert by_config(compare_json("-d", "local", "-d", "other")) == rows
    # markdown: each side's mean with its interval, the run ids, the summary row
    orch_ok("compare", "-d", "local", "-d", "other", "-o", "cmp.md")
    table = md_table(Path("cmp.md").read_text(encoding="utf-8"))
    assert set(table) == {"pread", "mmap", "geometric mean (2 configs)"}
    rec = rows["pread"]
    assert table["pread"]["local tok/s [95% CI]"] == "%.2f [%.2f–%.2f]" % (
        rec["mean_reference"], rec["mean_reference_ci_low"], rec["mean_reference_ci_high"])
    assert table["pread"]["other/local ratio"] == "%.2f×" % rec["ratio"]
    assert table["pread"]["other/local 95% CI"] == "%.2f×–%.2f×" % (rec["ci_low"],
                                                                    rec["ci_high"])
    # the terminal table
    out = orch_ok("compare", "-d", "local", "-d", "other")
    assert "pread" in out and "%.2f×" % rec["ratio"] in out and "geometric mean" in out


@pytest.mark.slow
def test_two_sessions_on_one_device_big_difference_is_significant(workspace):
    run_matrix(workspace, FAKE.format(name="cmp-1", ws=workspace), file="a.yaml")
    # the same flags (what was measured is the same), a slower engine: `same` counts from 0
    # again, `changed` from 20 (+400 ms per token and more)
    (workspace / "same").write_text("0\n")
    (workspace / "changed").write_text("20\n")
    run_matrix(workspace, FAKE.format(name="cmp-2", ws=workspace), file="b.yaml")
    store = Store.open("orch.db")
    one, two = run_means(store, session=1), run_means(store, session=2)
    assert one["same"] == two["same"] and len(set(one["same"])) == 3   # identical, with spread
    rows = by_config(compare_json("--session", "cmp-1", "--session", "2"))
    assert (rows["same"]["reference"], rows["same"]["other"]) == ("cmp-1 (session 1)", "cmp-2 (session 2)")
    same, changed = rows["same"], rows["changed"]
    assert same["ratio"] == pytest.approx(1.0) and same["significant"] is False
    assert same["ci_low"] < 1.0 < same["ci_high"]
    assert changed["significant"] is True and changed["p_adjusted"] < 0.05
    assert changed["ratio"] == pytest.approx(geometric_ratio(one["changed"], two["changed"]))
    assert changed["ci_high"] < 1.0 and changed["ratio"] < 0.4
    table = md_table(orch_ok("compare", "-s", "1", "-s", "2", "--format", "md"))
    # headers name the sessions by name; the lines above the table give their ids
    assert table["changed"]["cmp-2/cmp-1 verdict"] == "slower"
    assert table["same"]["cmp-2/cmp-1 verdict"] == "no significant difference"
    # the same comparison as a section of the report, which notes the pooled device tables
    text = orch_ok("report", "--compare", "-s", "1", "-s", "2", "--no-plots")
    section = text.split("## Comparison", 1)[1]
    assert "cmp-1 (session 1) and cmp-2 (session 2) ran on local" in section
    assert md_table(section)["changed"]["cmp-2/cmp-1 verdict"] == "slower"
    csv = orch_ok("compare", "-s", "1", "-s", "2", "--format", "csv").splitlines()
    assert KEYS <= set(csv[0].split(",")) and len(csv) == 1 + 2 + 1


@pytest.mark.slow
def test_local_vs_imported_without_matrix(workspace):
    # `orch compare -d local -d imported` crashed ("Can't determine which FROM clause to join
    # from") unless -m was given
    orch_ok("import", str(FIX / "2026-07-13"))
    run_matrix(workspace, PROBE.replace("pread:", "qwen_base_ov:"), "local")
    store = Store.open("orch.db")
    records = compare_json("-d", "local", "-d", "imported")
    rows = by_config(records)
    matched = rows["qwen_base_ov"]
    assert (matched["n_reference"], matched["n_other"]) == (3, 1)
    imported = run_means(store, "imported")["qwen_base_ov"]
    assert matched["ratio"] == pytest.approx(
        geometric_ratio(run_means(store, "local")["qwen_base_ov"], imported))
    # one imported run: a ratio, no interval, no test, no verdict
    assert matched["ci_low"] is None and matched["p_value"] is None
    assert matched["significant"] is None
    # configs on one side only are listed, with no ratio
    assert rows["mmap"]["n_other"] == 0 and rows["mmap"]["ratio"] is None
    assert rows["gemma_base_ov"]["n_reference"] == 0 and rows["gemma_base_ov"]["ratio"] is None
    text = orch_ok("compare", "-d", "local", "-d", "imported", "--format", "md")
    assert "- Only on local: mmap." in text
    # model by model, the reference side's model first (rows in the author's order)
    assert "- Only on imported: qwen qwen_auto_ov, " in text and "gemma gemma_auto_ov," in text
    # a probe run against a bmoe import: the same name, measured otherwise (marked, listed)
    assert md_table(text)["qwen_base_ov ≠"]["imported/local 95% CI"] == "—"
    assert "- qwen_base_ov (local vs imported): engine moe-probe vs bmoe; tokens 24 vs 256." \
        in text
    assert "no difference here can be tested" in text


@pytest.mark.slow
def test_errors_are_one_line_exit_2_or_3(workspace):
    run_matrix(workspace, FAKE.format(name="cmp-1", ws=workspace), "local")
    orch_ok("import", str(FIX / "2026-07-13"))
    Store.open("orch.db").create_session(kind="run", name="empty", matrix_name="empty")
    cases = {
        ("-d", "local"): "two or more sides",
        ("-s", "1"): "two or more sides",
        ("-d", "local", "-d", "other"): "device other has no runs",
        ("-d", "local", "-d", "imported", "-m", "cmp-1"):
            "device imported never ran a matrix named 'cmp-1'",
        ("-s", "empty", "-d", "local"): "session 3 has no runs",
        ("-d", "local", "-d", "local"): "are the same runs",
        ("-s", "1", "-m", "cmp-1"): "give --device too",
    }
    for args, message in cases.items():
        code, out = orch("compare", *args)
        lines = out.strip().splitlines()
        assert code == 2 and len(lines) == 1 and message in lines[0], (args, out)
    code, out = orch("compare", "-s", "9", "-d", "local")   # not found: exit 3
    assert code == 3 and out.strip() == f"error: no session 9 in {Store.open('orch.db').url}", out
    code, out = orch("report", "--compare", "-d", "local")
    assert code == 2 and "two or more sides" in out
    code, out = orch("report", "-s", "1")
    assert code == 2 and "--session is for --compare" in out


def test_configs_pair_by_name_and_settings(tmp_path):
    """`orch compare` pairs what was measured the same way: a config of one name run with
    other flags on one side is its own row, present on that side only (results/measured.py)."""
    from orchestrator.results.measured import config_labels

    rows = [SimpleNamespace(id=1, model="m", config="t1", flags="-t 2", model_sha256="a" * 64),
            SimpleNamespace(id=2, model="m", config="t1", flags="-t  2", model_sha256=None),
            SimpleNamespace(id=3, model="m", config="t1", flags="-t 4", model_sha256="a" * 64),
            SimpleNamespace(id=4, model="m", config="t2", flags="-t 4", model_sha256="a" * 64),
            SimpleNamespace(id=5, model="n", config="t1", flags="-t 8", model_sha256=None)]
    assert config_labels(rows) == {1: "t1 (flags -t 2)", 2: "t1 (flags -t 2)",
                                   3: "t1 (flags -t 4)", 4: "t2", 5: "t1"}
