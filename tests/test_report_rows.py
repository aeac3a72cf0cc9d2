"""Rows as the author orders and names them, caveats that follow the settings, and a trim
without surprise (issue 36, items 3-5), in the report, `orch table` (md, csv, json) and
`orch show`, on the bigmoe fixtures:

- rows in the design's `configs:` order (run order for configs it does not list), named by
  their labels, the key kept in the Configs legend; `left_out:` and `MODEL:CONFIG` notes in
  the model's group only (results/rows.py, config/notes.py, report/format/design_notes.py);
- ‡ on rows whose flags hold `--overlap` wherever they came from, the stall "—" (null) for
  serial rows (stats/overlap.py);
- the headline decode mean stays the whole run's under a trim, the trimmed mean beside it
  under its own name, token counts with both (stats/trim.py, formatters.py).
"""
from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest
from cli_helpers import orch_ok

from orchestrator.config.design import Design
from orchestrator.config.notes import Notes, key_problems
from orchestrator.report.format.formatters import tokens_after_trim
from orchestrator.report.format.within_cells import trim_header, with_trim
from orchestrator.results.rows import config_label, in_order, left_out, listed_configs
from orchestrator.stats.overlap import overlapped

FIX = Path(__file__).parent / "fixtures"
JUL13 = FIX / "bigmoe" / "2026-07-13"
PINNED = FIX / "bigmoe" / "2026-07-21-pinned-dense-ab"
PINNED_DESIGN = FIX / "designs" / "2026-07-21-pinned-dense-ab.yaml"
QWEN = "Qwen_Qwen3.6-35B-A3B-Q4_K_M"

# A design for 2026-07-13 written in an order that is not the run order (base, autocap, auto,
# sg; the files ran auto, autocap, base, sg), with flags that say overlap for three configs
# and, for the rule's sake, serial streaming for `sg` (the study ran it with overlap: the
# design's word is what the tables follow where the files do not say).
JUL13_DESIGN = """\
configs:
  base:
    files: ["*_base_ov.csv"]
    label: fixed cache + overlap (reference)
    flags: --moe-stream --io-threads 4 --overlap
  autocap:
    files: ["*_autocap_ov.csv"]
    label: adaptive cache, capped + overlap
    flags: --moe-stream --cache-mb auto --io-threads 4 --overlap
  auto:
    files: ["*_auto_ov.csv"]
    label: adaptive cache + overlap
    flags: --moe-stream --cache-mb auto --io-threads 4 --overlap
  sg:
    files: ["*_sg_ov.csv"]
    label: spec gate, serial
    flags: --moe-stream --io-threads 4 --spec-gate
notes:
  configs:
    base: the reference, on every model
    qwen:sg: overlap costs Qwen here
    gemma:sg: overlap helps Gemma here
left_out:
  gemma:cache-4000: OOM on this device
  mmap: not run on this day
"""
LABELS = ["fixed cache + overlap (reference)", "adaptive cache, capped + overlap",
          "adaptive cache + overlap", "spec gate, serial"]


def _rows(table: str) -> list[str]:
    """The first cell of each body row of the first markdown table in `table`."""
    lines = [line for line in table.splitlines() if line.startswith("|")]
    return [line.split("|")[1].strip() for line in lines[2:]]


def _section(text: str, start: str, end: str | None = None) -> str:
    begin = text.index(start)
    return text[begin:text.index(end, begin + 1) if end else len(text)]


# ---- pure: order, labels, scopes, overlap, trim words --------------------------------------

def test_in_order_lists_the_authors_configs_first_then_run_order() -> None:
    runs = ["auto", "autocap", "base", "x", "sg", "base", "w@b2", "w@b1"]
    assert in_order(runs, ["base", "w", "autocap", "auto", "sg"]) == \
        ["base", "w@b2", "w@b1", "autocap", "auto", "sg", "x"]
    assert in_order(runs, []) == ["auto", "autocap", "base", "x", "sg", "w@b2", "w@b1"]
    design = Design.model_validate({"configs": {"b": {"files": ["b*"]}, "a": {"files": ["a*"]}}})
    assert listed_configs([design, None], [None]) == ["b", "a"]


def test_label_from_the_design_and_left_out_scoped_by_model() -> None:
    design = Design.model_validate({
        "configs": {"k6": {"files": ["*k6*"], "label": "top-k 6"}},
        "left_out": {"gemma:cache-4000": "OOM", "k6": "not this day", "qwen:mmap": "trap"}})
    assert config_label("k6", None, design) == "top-k 6"
    assert config_label("k8", None, design) == "k8"
    gemma = left_out([design], "gemma")
    assert [(e.config, e.label, e.reason) for e in gemma] == \
        [("cache-4000", "cache-4000", "OOM"), ("k6", "top-k 6", "not this day")]
    assert [e.config for e in left_out([design], "qwen")] == ["k6", "mmap"]


def test_scoped_notes_and_keys_are_checked() -> None:
    notes = Notes(configs={"sg": "all", "qwen:sg": "qwen only"})
    assert notes.config_note("sg", "qwen") == "qwen only"
    assert notes.config_note("sg", "gemma") == "all"
    assert Notes(configs={"qwen:sg": "q"}).config_note("sg", "gemma") is None
    assert key_problems("qwen:sg", ["sg"], ["qwen"]) == []
    assert key_problems("llama:sg", ["sg"], ["qwen"]) and key_problems("qwen:nope", ["sg"], [])
    assert key_problems("qwen:", [], []) and key_problems("x", [], [], why=" ")
    with pytest.raises(ValueError, match="left_out"):
        Design.model_validate({"models": {"qwen": {}}, "left_out": {"llama:x": "OOM"}})
    with pytest.raises(ValueError, match="notes"):
        Design.model_validate({"models": {"qwen": {}},
                               "configs": {"sg": {"files": ["*"]}},
                               "notes": {"configs": {"llama:sg": "n"}}})


def test_overlap_follows_the_flags_wherever_they_came_from() -> None:
    assert overlapped({"overlap": "1"}, None, "--dense-weights anon", "bmoe") is True
    assert overlapped({"overlap": "0"}, None, "--overlap", "bmoe") is False    # the file wins
    assert overlapped({}, None, "--moe-stream --overlap", "bmoe") is True      # a design's
    assert overlapped({}, None, "--moe-stream --cache-mb 0", "bmoe") is False  # serial
    assert overlapped({}, None, "--dense-weights anon", "bmoe") is None        # does not say
    assert overlapped(None, ["bmoe-cli", "--overlap"], None, "bmoe") is True   # a live run
    assert overlapped(None, ["bmoe-cli"], None, "bmoe") is False


def test_trim_words_headers_and_token_counts() -> None:
    assert tokens_after_trim(1356, 1306, 50) == "1,356 (1,306 after trim 50)"
    assert tokens_after_trim(1356, 1356, 0) == "1,356"
    assert tokens_after_trim(None, 3, 50) == "—"
    assert trim_header("mean_after_trim", "mean after trim", 50) == "mean after trim 50"
    assert trim_header("mean", "decode mean", 50) == "decode mean"
    caption = with_trim("**Throughput** (tok/s):", 50)
    assert "first 50 tokens left out" in caption and "decode mean over every token" in caption


# ---- the report and orch table on 2026-07-13 with a design ----------------------------------

@pytest.fixture(scope="module")
def jul13(tmp_path_factory) -> str:
    folder = tmp_path_factory.mktemp("rows13")
    design = folder / "design.yaml"
    design.write_text(JUL13_DESIGN)
    db = str(folder / "orch.db")
    orch_ok("import", str(JUL13), "--db", db, "--design", str(design))
    return db


@pytest.fixture(scope="module")
def jul13_report(jul13: str) -> str:
    return orch_ok("report", "--db", jul13, "--no-plots")


def test_report_rows_in_the_designs_order_named_by_their_labels(jul13_report: str) -> None:
    for model in ("gemma", "qwen"):
        group = _section(jul13_report, f"### {model} on", "**Prefill")
        assert _rows(_section(group, "| Config", "\n\n")) == LABELS
    legend = _section(jul13_report, "**Configs**", "### ")
    assert _rows(_section(legend, "| Config", "\n\n")) == LABELS  # the legend in that order
    assert "| fixed cache + overlap (reference) | `base` |" in legend  # the key stays findable


def test_orch_table_rows_in_the_designs_order_md_csv_json(jul13: str) -> None:
    text = orch_ok("table", "--db", jul13)
    gemma = _section(text, "### gemma on", "### qwen on")
    assert _rows(_section(gemma, "| Config", "\n\n")) == LABELS
    rows = json.loads(orch_ok("table", "--db", jul13, "-t", "throughput", "--format", "json"))
    gemma = [(r["config"], r["label"]) for r in rows if r["model"] == "gemma"]
    assert [c for c, _ in gemma] == ["base", "autocap", "auto", "sg"]
    assert [label for _, label in gemma] == LABELS
    found = list(csv.DictReader(orch_ok("table", "--db", jul13, "-t", "throughput", "--format",
                                        "csv").splitlines()))
    assert [r["config"] for r in found if r["model"] == "gemma"] == ["base", "autocap", "auto", "sg"]


def test_left_out_and_scoped_notes_only_under_their_model(jul13: str, jul13_report: str) -> None:
    for text in (jul13_report, orch_ok("table", "--db", jul13)):
        gemma = _section(text, "### gemma on", "### qwen on")
        qwen = _section(text, "### qwen on", "\n## " if "\n## Left out" in text else None)
        assert "**cache-4000**: not run — OOM on this device" in gemma
        assert "cache-4000" not in qwen
        assert "**mmap**: not run — not run on this day" in gemma and "**mmap**: not run" in qwen
        assert "overlap helps Gemma here" in gemma and "overlap helps Gemma" not in qwen
        assert "overlap costs Qwen here" in qwen and "overlap costs Qwen" not in gemma
        assert "**fixed cache + overlap (reference)**: the reference" in gemma
        assert "**fixed cache + overlap (reference)**: the reference" in qwen


def test_overlap_mark_and_serial_stall_from_the_designs_flags(jul13: str,
                                                               jul13_report: str) -> None:
    """2026-07-13's CSVs have no preamble: the design's flags are what says overlap."""
    for text in (jul13_report, orch_ok("table", "--db", jul13, "-t", "throughput,detail")):
        gemma = _section(text, "### gemma on", "### qwen on")
        through = _section(gemma, "| Config", "\n\n")
        marked = {row.split("|")[1].strip(): row.rstrip().endswith("‡ |") or " ‡ |" in row
                  for row in through.splitlines()[2:]}
        assert marked == {LABELS[0]: True, LABELS[1]: True, LABELS[2]: True, LABELS[3]: False}
        assert "‡ ran with `--overlap`" in gemma
        detail = _section(gemma, "**Prefill")
        serial = next(r for r in detail.splitlines() if r.startswith(f"| {LABELS[3]} "))
        header = next(r for r in detail.splitlines() if r.startswith("| Config"))
        stall = [c.strip() for c in header.split("|")].index("stall ms/tok")
        assert serial.split("|")[stall].strip() == "—"
    rows = json.loads(orch_ok("table", "--db", jul13, "-t", "detail", "--format", "json"))
    stalls = {r["config"]: r["stall_ms_per_token"] for r in rows if r["model"] == "gemma"}
    assert stalls["sg"] is None and stalls["base"] == pytest.approx(133.36, abs=0.01)
    sg = next(r["run_id"] for r in rows if r["model"] == "gemma" and r["config"] == "sg")
    shown = orch_ok("show", str(sg), "--db", jul13)
    assert "stall" not in shown and "0.0" not in shown.split("flash read/token")[-1][:40]


def test_without_a_design_no_overlap_is_claimed(tmp_path: Path) -> None:
    db = str(tmp_path / "orch.db")
    orch_ok("import", str(JUL13), "--db", db)
    text = orch_ok("table", "--db", db)
    assert "‡" not in text


# ---- trim: the whole run's mean stays the headline -----------------------------------------

@pytest.fixture(scope="module")
def pinned(tmp_path_factory) -> str:
    db = str(tmp_path_factory.mktemp("rowspd") / "orch.db")
    orch_ok("import", str(PINNED), "--db", db, "--design", str(PINNED_DESIGN))
    return db


def _walls(name: str) -> list[float]:
    with open(PINNED / name, newline="") as f:
        return [float(r["wall_ms"]) for r in csv.DictReader(
            line for line in f if not line.startswith("#"))]


def test_trim_keeps_the_whole_run_mean_and_names_the_trimmed_one(pinned: str) -> None:
    walls = _walls("bmoe-20260721-103724.csv")          # anon-long, 1354 tokens
    whole = len(walls) / (sum(walls) / 1000)
    after = (len(walls) - 50) / (sum(walls[50:]) / 1000)
    rows = json.loads(orch_ok("table", "--db", pinned, "--trim", "50", "--format", "json"))
    anon = next(r for r in rows if r["table"] == "throughput" and r["config"] == "anon-long")
    assert anon["mean"] == pytest.approx(whole, rel=1e-9)             # 2.588, as published
    assert anon["mean_after_trim"] == pytest.approx(after, rel=1e-9)
    report = orch_ok("report", "--db", pinned, "--no-plots", "--trim", "50")
    group = _section(report, "### Qwen3.6-35B-A3B Q4_K_M on", "**Prefill")
    header = next(r for r in group.splitlines() if r.startswith("| Config"))
    assert re.search(r"\| decode mean \| (95% CI \| )?mean after trim 50 \|", header)
    row = next(r for r in group.splitlines() if r.startswith("| anon, long generation"))
    assert f"**{whole:.2f}**" in row and f"| {after:.2f} |" in row
    caption = next(r for r in group.splitlines() if r.startswith("**Throughput**"))
    assert "first 50 tokens left out" in caption and "decode mean over every token" in caption
    provenance = _section(report, "## Provenance")
    assert "1,354 (1,304 after trim 50)" in provenance
    plain = orch_ok("report", "--db", pinned, "--no-plots")
    assert "mean after trim" not in plain and "after trim" not in _section(plain, "## Provenance")
