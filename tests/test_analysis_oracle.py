"""Statistics layer: reproduce the published summary.md of each fixture folder from raw files.

The run -> row mapping below is the fixtures' knowledge (found by matching numbers: e.g. the
2026-07-13 "adaptive cache (--cache-mb auto) + overlap" Qwen row's 4.37 tok/s and 82% hit are
qwen_auto_ov's 256 rows and trailer), so it lives here and not in the library.

Over 400 lines on purpose: one fixture folder's oracle per block, with the run -> row mapping
each needs.
"""
from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Mapping, Sequence
from io import StringIO
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from orchestrator.engines.bmoe import BmoeRunParser
from orchestrator.engines.bmoe_format import parse_metrics_sidecar
from orchestrator.record import Pressure, RunRecord, load_record
from orchestrator.stats import statistics as analysis
from orchestrator.stats.statistics import RunInput
from orchestrator.report.table import runs as tables
from orchestrator.stats.statistics import pressure_by_run

FIX = Path(__file__).parent / "fixtures" / "bigmoe"

# ---- fixture knowledge ---------------------------------------------------------------------

JUL13_ORDER = [
    "solo mmap (no streaming)", "streaming O_DIRECT, cache 0, lane 4",
    "streaming + cache 2000 MiB, lane 2", "streaming + cache 2000 MiB, lane 4",
    "streaming + cache 4000 MiB, lane 2", "streaming + cache 4000 MiB, lane 4",
    "streaming O_DIRECT + overlap, cache 0, lane 4", "streaming + cache 2000 MiB, lane 4, overlap",
    "streaming + cache 4000 MiB, lane 4, overlap", "streaming + cache 4000 MiB, lane 4, prefetch 1",
    "streaming + cache 4000 MiB, lane 4, prefetch 2", "streaming + cache 4000 MiB, lane 4, prefetch 4",
    "fixed cache + overlap (reference)", "adaptive cache (--cache-mb auto) + overlap",
    "adaptive cache, capped + overlap", "fixed cache + overlap + speculative gating",
]
JUL13_SUFFIX_LABEL = {
    "base_ov": "fixed cache + overlap (reference)",
    "auto_ov": "adaptive cache (--cache-mb auto) + overlap",
    "autocap_ov": "adaptive cache, capped + overlap",
    "sg_ov": "fixed cache + overlap + speculative gating",
}
JUL13_SECTIONS = [  # (title, file prefix)
    ("Qwen3-30B-A3B-Q4_K_M (18.5 GB, 128 experts, top-8, 48 layers)", "qwen"),
    ("Gemma-4-26B-A4B-it-Q4_K_M (17.0 GB, fused gate+up experts)", "gemma"),
]
PR23_SECTIONS = [  # (title, [(stem, label), ...]) in published order; first row = the baseline
    ("Qwen3-30B-A3B-Q4_K_M — base: cache 4000 MiB, lane 4, overlap",
     [("qwen_base", "baseline (overlap)"), ("qwen_pf2", "+ prefetch 2"),
      ("qwen_sg", "+ spec-gate"), ("qwen_sg_pf2", "+ spec-gate + prefetch 2")]),
    ("Gemma-4-26B-A4B-it-Q4_K_M — base: cache 2000 MiB, lane 4, overlap",
     [("gemma_base", "baseline (overlap)"), ("gemma_pf2", "+ prefetch 2"),
      ("gemma_sg", "+ spec-gate"), ("gemma_sg_pf2", "+ spec-gate + prefetch 2")]),
    ("Qwen3-30B-A3B-Q4_K_M — MAX: cache 5000 MiB, lane 4, overlap",
     [("qwen5k_base", "baseline (overlap)"), ("qwen5k_pf1", "+ prefetch 1")]),
]

# ---- loading (through the adapter's RunParser, as a live run would) ------------------------


def load_folder(folder: Path) -> tuple[pd.DataFrame, dict]:
    """Token rows and records of every run in a fixture folder, as `orch import` reads them
    (the `.metrics` sidecar becomes the record's pressure)."""
    tokens, records = [], {}
    for csv in sorted(folder.glob("*.csv")):
        stem = csv.stem
        parser = BmoeRunParser()
        for line in csv.read_text(encoding="utf-8").splitlines():
            for row in parser.feed("C", line):
                rec = dataclasses.asdict(row)
                rec.pop("extra")
                tokens.append({"run_id": stem, **rec})
        for suffix in (".log", ".out"):
            if csv.with_suffix(suffix).exists():
                for line in csv.with_suffix(suffix).read_text(encoding="utf-8").splitlines():
                    parser.feed("O", line)
        records[stem] = parser.record()
        if csv.with_suffix(".metrics").exists():
            records[stem].pressure = Pressure.from_sidecar(
                parse_metrics_sidecar(csv.with_suffix(".metrics").read_text()))
    return pd.DataFrame(tokens), records


def runs_table(tokens: pd.DataFrame, records: Mapping[Any, Any] | None = None,
               pressure: Mapping[Any, Any] | None = None, quantile_method: str = "linear",
               trim: int = 0) -> pd.DataFrame:
    """statistics.table (the vectorised part: no within-run bootstrap) of every run in tokens
    or records; `records`: run id -> RunRecord or stored dict, `pressure`: run id -> the
    pressure figures that replace its record's."""
    records, pressure = records or {}, pressure or {}
    seen = set(tokens["run_id"]) if len(tokens) else set()
    ids = list(dict.fromkeys(tokens["run_id"])) + [r for r in records if r not in seen]
    inputs = {}
    for rid in ids:
        rec = records.get(rid)
        rec = rec if isinstance(rec, RunRecord) else load_record(rec)
        if pressure.get(rid):
            rec = rec.model_copy(update={"pressure": Pressure(**pressure[rid])})
        inputs[rid] = RunInput(rec)
    return analysis.table(tokens, inputs, quantile_method=quantile_method, trim=trim,
                          within_run=False)


def run_stats(tokens: pd.DataFrame, record, pressure=None) -> dict:
    """One run's row of runs_table (token frame without run_id), missing values as None."""
    t = tokens.assign(run_id=0) if len(tokens) else pd.DataFrame(
        {"run_id": pd.Series([], dtype=int), "wall_ms": pd.Series([], dtype=float)})
    row = runs_table(t, {0: record}, {0: pressure}).iloc[0].to_dict()
    return {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in row.items()}


# The published tables write "GB" for memory that is GiB (kB / 1024², docs/formats.md §6); orch
# writes the unit it means, so the oracle is read with that unit corrected and every number
# untouched. Only table cells: the section titles quote model file sizes in decimal GB.
_GB_CELL = re.compile(r"(?<=\| )(\d+\.\d+) GB(?= \|)")


def published(folder: str) -> str:
    """A fixture folder's summary.md, its "GB" cells written "GiB"."""
    text = (FIX / folder / "summary.md").read_text(encoding="utf-8")
    return _GB_CELL.sub(r"\1 GiB", text)


def md_cells(text: str) -> dict[tuple[str, str, str], str]:
    """{(section title, row label, column header): cell} for every table in a summary.md."""
    out, title, header = {}, "", None
    for line in text.splitlines():
        if line.startswith("### "):
            title, header = line[4:], None
        elif line.startswith("|") and not line.startswith("|---"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            if cells[0] == "Config":
                header = cells
            else:
                for h, c in zip(header[1:], cells[1:]):
                    out[(title, cells[0], h)] = c
    return out


# Columns orch adds to the published tables (after checking every published cell unchanged).
NEW_COLUMNS = {"p5", "decode: compute + I/O (s/tok)"}


def mismatches(got: str, want: str) -> list[tuple]:
    """Published cells that orch prints differently; orch's table must hold every published
    cell and, beyond them, only the NEW_COLUMNS."""
    g, w = md_cells(got), md_cells(want)
    assert w.keys() <= g.keys()
    assert {k[2] for k in g.keys() - w.keys()} == NEW_COLUMNS
    return [(k, g[k], w[k]) for k in w if g[k] != w[k]]


_STREAM_LINE = re.compile(r"\(compute ([\d.]+) \+ .*flash I/O ([\d.]+) s/token")


def raw_new_cells(csv: Path, method: str = "linear") -> dict[str, str]:
    """The NEW_COLUMNS' cells of one run, computed here from the raw files and nothing of
    orch's: p5 of 1000/wall_ms over the CSV's rows (numpy, `method`), and the compute + I/O
    split as the `.log`'s moe-stream line prints it."""
    rows = pd.read_csv(csv, comment="#")
    wall = rows.wall_ms.to_numpy()
    p5 = np.percentile(1000 / wall[wall > 0], 5, method=method)
    stream = _STREAM_LINE.search(csv.with_suffix(".log").read_text(encoding="utf-8-sig"))
    return {"p5": "%.2f" % p5, "decode: compute + I/O (s/tok)": " + ".join(stream.groups())}


def check_new_columns(got: str, rows: dict[tuple[str, str], Path], method: str = "linear") -> int:
    """Every NEW_COLUMNS cell of `got`: the raw files' figure for a measured row ({(section,
    label): csv}), "—" for the others. Returns how many measured cells were compared."""
    compared = 0
    for (title, label, header), cell in md_cells(got).items():
        if header not in NEW_COLUMNS:
            continue
        csv = rows.get((title, label))
        if csv is None:
            assert cell == "—", (title, label, header)
        else:
            assert cell == raw_new_cells(csv, method)[header], (title, label, header)
            compared += 1
    return compared


def summary_section(stats: pd.DataFrame, title: str, labels: Mapping[Any, str] | None = None,
                    order: Sequence[str] | None = None,
                    kinds: Sequence[str] = ("throughput", "detail", "pressure", "adaptive"),
                    measured_only: Sequence[str] = ("adaptive",)) -> str:
    """One model's section of a summary.md as the study printed it: `### title`, then each
    of orch table's tables under its caption (a test's printer: orch itself prints per group).

    Tables in `measured_only` skip the labels of `order` that have no run: the published
    budget/spec table concerns only the configs measured with that engine version.
    """
    parts = [f"### {title}\n"]
    present = {(labels or {}).get(rid, str(rid)) for rid in stats.index}
    for kind in kinds:
        if tables.TABLES[kind].caption:
            parts.append(tables.TABLES[kind].caption + "\n")
        rows = order
        if kind in measured_only and order is not None:
            rows = [label for label in order if label in present]
        parts.append(tables.markdown(stats, kind, labels, rows))
    return "\n".join(parts)


# ---- the oracle tests ----------------------------------------------------------------------

def build_jul13() -> str:
    tokens, records = load_folder(FIX / "2026-07-13")
    stats = runs_table(tokens, records)
    parts = []
    for title, prefix in JUL13_SECTIONS:
        labels = {f"{prefix}_{sfx}": lab for sfx, lab in JUL13_SUFFIX_LABEL.items()}
        parts.append(summary_section(stats.loc[list(labels)], title, labels, JUL13_ORDER))
    return "\n" + "\n".join(parts)


def jul13_rows() -> dict[tuple[str, str], Path]:
    return {(title, label): FIX / "2026-07-13" / f"{prefix}_{sfx}.csv"
            for title, prefix in JUL13_SECTIONS for sfx, label in JUL13_SUFFIX_LABEL.items()}


def test_jul13_summary_md_reproduced_exactly() -> None:
    want = published("2026-07-13")
    got = build_jul13()
    assert mismatches(got, want) == []
    numbers = [c for c in md_cells(want).values() if c != "—"]
    # every measured cell was compared: 2 models x 4 runs x 22 columns, less the 26 adaptive
    # cells that are "—" because the run had no spec gate
    assert len(numbers) == 2 * 4 * (10 + 5 + 7) - 26
    # the sections in the published order and titles
    assert re.findall("^### .*", got, re.MULTILINE) == re.findall("^### .*", want, re.MULTILINE)
    # p5 and compute + I/O, which the phone study prints and this summary.md did not
    assert check_new_columns(got, jul13_rows()) == 2 * 4 * len(NEW_COLUMNS)


def build_pr23(method: str) -> str:
    tokens, records = load_folder(FIX / "2026-07-12-pr23")
    stats = runs_table(tokens, records, quantile_method=method)
    parts = []
    for title, rows in PR23_SECTIONS:
        labels = dict(rows)
        parts.append(f"### {title}\n\n"
                     + tables.markdown(stats.loc[list(labels)], "variants", labels))
    return "\n" + "\n".join(parts)


def pr23_expected() -> str:
    text = published("2026-07-12-pr23")
    # The published column says "stall ms/tok" but holds s/tok (0.063 for the 63 ms mean of the
    # stall_ms column, which the 2026-07-13 table prints as 63.4); our header states the unit.
    assert text.count("stall ms/tok") == 3
    return text.replace("stall ms/tok", "stall s/tok")


def pr23_rows() -> dict[tuple[str, str], Path]:
    return {(title, label): FIX / "2026-07-12-pr23" / f"{stem}.csv"
            for title, rows in PR23_SECTIONS for stem, label in rows}


def test_pr23_summary_md_reproduced_exactly() -> None:
    # This older table's p95 was taken without interpolation (the lower neighbour at
    # i = 0.95*(n-1)), unlike docs/formats.md §6 and the 2026-07-13 table; see the next test.
    want, got = pr23_expected(), build_pr23("lower")
    assert mismatches(got, want) == []
    assert len([c for c in md_cells(want).values() if c != "—"]) == 108
    assert re.findall("^### .*", got, re.MULTILINE) == re.findall("^### .*", want, re.MULTILINE)
    assert check_new_columns(got, pr23_rows(), "lower") == 10 * len(NEW_COLUMNS)
    assert check_new_columns(build_pr23("linear"), pr23_rows()) == 10 * len(NEW_COLUMNS)


def test_pr23_p95_is_not_the_section6_method() -> None:
    bad = mismatches(build_pr23("linear"), pr23_expected())
    assert {k[2] for k, _, _ in bad} == {"p95"}
    assert sorted((k[0][:5], k[1], g, w) for k, g, w in bad) == sorted([
        ("Qwen3", "baseline (overlap)", "8.31", "8.30"), ("Qwen3", "+ prefetch 2", "8.01", "8.00"),
        ("Qwen3", "+ spec-gate", "4.17", "4.16"), ("Qwen3", "+ spec-gate + prefetch 2", "4.22", "4.21"),
        ("Gemma", "baseline (overlap)", "4.24", "4.23"),
        ("Qwen3", "baseline (overlap)", "7.52", "7.51"), ("Qwen3", "+ prefetch 1", "6.89", "6.88"),
    ])


# ---- method details ------------------------------------------------------------------------

def test_one_run_matches_numpy_and_runs_table() -> None:
    tokens, records = load_folder(FIX / "2026-07-17")
    table = runs_table(tokens, records)
    assert len(table) == 9
    for rid, grp in tokens.groupby("run_id"):
        one = run_stats(grp.drop(columns="run_id"), records[rid])
        w = grp.wall_ms.to_numpy()
        tps = np.sort(1000 / w[w > 0])
        assert one["n"] == len(grp) == 256
        assert one["mean"] == pytest.approx(len(w) / (w.sum() / 1000), rel=1e-12)
        assert (one["min"], one["max"]) == (tps[0], tps[-1])
        for key, q in (("median", 50), ("p5", 5), ("p95", 95)):
            assert one[key] == pytest.approx(np.percentile(tps, q), rel=1e-12)
        assert one["stall_ms_per_token"] == pytest.approx(grp.stall_ms.mean())
        row = table.loc[rid].to_dict()
        for k, v in one.items():
            assert (v is None and (row[k] is None or (isinstance(row[k], float)
                                                      and math.isnan(row[k])))) or row[k] == v
    gpt = table.loc["gpt_k2"]
    assert math.isnan(gpt.cache_hit_pct)                  # -1.0: no cache
    assert gpt.compute_s_per_token == 0.242 and gpt.io_s_per_token == 1.25
    assert table.loc["gemma_k6"].peak_rss_gib == pytest.approx(6306624 / 1048576)
    assert table.loc["gemma_k6"].batt_temp_max_c == pytest.approx(39.8)


def test_mmap_run_has_no_decode_split() -> None:
    tokens, records = load_folder(FIX / "2026-07-14")
    s = run_stats(tokens[tokens.run_id == "gptoss_mmap_k2"].drop(columns="run_id"),
                  records["gptoss_mmap_k2"])
    assert s["streaming"] is False and s["compute_s_per_token"] is None and s["io_s_per_token"] is None
    # a plain mmap run measures neither flash reads nor a stall (its CSV writes 0): not 0
    assert s["cache_hit_pct"] is None and s["read_mib_per_token"] is None
    assert s["stall_ms_per_token"] is None
    assert f"{s['mean']:.3f}" == "0.089" and s["ttft_s"] == pytest.approx(80.294)
    assert s["peak_rss_gib"] is None


def test_killed_run_falls_back_to_rows() -> None:
    parser = BmoeRunParser()
    rows = []
    for line in (FIX / "2026-07-13" / "qwen_sg_ov.csv").read_text().splitlines()[:-41]:
        rows += parser.feed("C", line)
    tokens = pd.DataFrame([dataclasses.asdict(r) for r in rows]).drop(columns="extra")
    s = run_stats(tokens, parser.record())
    assert s["n"] == 216 and s["complete"] is False and s["prefill_tps"] is None
    assert s["read_mib_per_token"] == pytest.approx(tokens.read_bytes.sum() / 1048576 / 216)
    assert s["cache_hit_pct"] == rows[-1].cache_hit_pct          # cumulative: last row
    assert s["streaming"] is True and s["compute_s_per_token"] is None


def test_speculative_rows_and_empty_runs() -> None:
    tokens = pd.DataFrame({"run_id": ["a"] * 4 + ["b"], "wall_ms": [300.0, 0, 0, 100.0, 0.0],
                           "stall_ms": [1.0, 0, 0, 3.0, 0]})
    t = runs_table(tokens, {"c": {"tokens": 0}})
    a = t.loc["a"]
    assert a.n == 4 and a["mean"] == pytest.approx(4 / 0.4)     # rows with wall 0 count in n
    assert (a["min"], a["max"], a["median"]) == pytest.approx((1000 / 300, 10.0, (10 + 1000 / 300) / 2))
    assert a.stall_ms_per_token == 1.0
    assert t.loc["b"].n == 1 and math.isnan(t.loc["b"]["mean"]) and math.isnan(t.loc["b"].p95)
    assert t.loc["c"].n == 0 and t.loc["c"].complete is True
    empty = run_stats(pd.DataFrame({"wall_ms": []}), None)
    assert empty["n"] == 0 and empty["mean"] is None and empty["complete"] is None
    with pytest.raises(ValueError):
        runs_table(tokens, quantile_method="hazen")


def test_pressure_by_run() -> None:
    s = pd.DataFrame({
        "t_ms": [2000, 0, 1000, 3000],
        "hwm_kb": [np.nan, np.nan, np.nan, np.nan],
        "rss_kb": [5242880, 1048576, 3145728, 4194304],
        "mem_avail_kb": [2097152, 6291456, np.nan, 3145728],
        "cpu_temp_mC": [70000, 43200, 55000, np.nan],
        "batt_temp_dC": [387, 380, np.nan, 391],
    }).assign(run_id=7)
    p = pressure_by_run(s)[7]
    assert p == {"peak_rss_gib": 5.0, "mem_floor_gib": 2.0, "cpu_temp_start_c": 43.2,
                 "cpu_temp_max_c": 70.0, "batt_temp_max_c": 39.1}
    s["hwm_kb"] = [6291456, 1048576, 3145728, 6291456]
    assert pressure_by_run(s)[7]["peak_rss_gib"] == 6.0
    assert pressure_by_run(pd.DataFrame()) == {}
    # the samples' pressure wins over a record's (a sidecar)
    record = RunRecord(pressure=Pressure(mem_floor_gib=9.0, batt_temp_max_c=30.0))
    one = run_stats(pd.DataFrame({"wall_ms": [100.0]}), record, p)
    assert one["mem_floor_gib"] == 2.0 and one["batt_temp_max_c"] == 39.1
    assert run_stats(pd.DataFrame({"wall_ms": [100.0]}), record)["mem_floor_gib"] == 9.0


def test_pressure_from_sidecar_failed_read() -> None:
    m = parse_metrics_sidecar("peak_rss_kb=6459244\ncpu_temp_before_mC=\ncpu_temp_max_mC=69100\n")
    p = Pressure.from_sidecar(m)
    assert p.cpu_temp_start_c is None and p.cpu_temp_max_c == 69.1
    assert p.mem_floor_gib is None and f"{p.peak_rss_gib:.2f}" == "6.16"


def test_spread_and_delta() -> None:
    s = analysis.spread([5.0, 5.2, None, 4.8, float("nan")])
    assert s["n"] == 3 and s["mean"] == pytest.approx(5.0) and s["stdev"] == pytest.approx(0.2)
    assert (s["min"], s["max"]) == (4.8, 5.2)
    assert analysis.spread([3.0])["stdev"] is None and analysis.spread([])["n"] == 0
    assert analysis.delta_pct(5.0, 4.0) == pytest.approx(-20.0)
    assert analysis.delta_pct(0, 1) is None and analysis.delta_pct(None, 1) is None


def test_csv_and_json_tables() -> None:
    tokens, records = load_folder(FIX / "2026-07-13")
    stats = runs_table(tokens, records)
    labels = {"qwen_base_ov": "ref", "qwen_sg_ov": "sg"}
    order = ["ref", "sg", "not measured"]
    for kind in ("throughput", "detail", "pressure", "adaptive", "variants"):
        md = tables.cells(stats, kind, labels, order)
        csv = pd.read_csv(StringIO(tables.to_csv(stats, kind, labels, order)))
        js = json.loads(tables.to_json(stats, kind, labels, order))
        assert list(csv.config) == [r["config"] for r in js] == list(md.Config) == order
        assert all(v is None for k, v in js[2].items() if k != "config")
        assert (md.iloc[2, 1:] == "—").all()
    js = json.loads(tables.to_json(stats, "throughput", labels, order))
    assert f"{js[0]['mean']:.2f}" == "5.02"
    # the stall is the detail table's (the throughput table keeps the study's columns)
    js = json.loads(tables.to_json(stats, "detail", labels, order))
    assert f"{js[0]['stall_ms_per_token']:.1f}" == "63.4"
    adaptive = json.loads(tables.to_json(stats, "adaptive", labels, order))
    assert adaptive[1]["spec_auto_off"] is False and adaptive[0]["spec_recall_pct"] is None


def test_runs_table_of_a_thousand_runs() -> None:
    """1,000 runs x 256 tokens, one row each; how fast: bench/analysis (the same table)."""
    rng = np.random.default_rng(1)
    runs, n = 1000, 256
    tokens = pd.DataFrame({"run_id": np.repeat(np.arange(runs), n),
                           "wall_ms": rng.gamma(4.0, 50.0, runs * n),
                           "stall_ms": rng.gamma(2.0, 10.0, runs * n)})
    summaries = {i: {"trailer": {"tokens": n, "read_MiB": 5e4, "prefill_tps": 5.0,
                                 "load_s": 10.0, "prefill_s": 5.0, "cache_hit_pct": 70.0}}
                 for i in range(runs)}
    table = runs_table(tokens, summaries)
    assert len(table) == runs


def test_row_order_and_unequal_lengths_do_not_matter() -> None:
    rng = np.random.default_rng(7)
    lengths = rng.integers(1, 300, 200)
    tokens = pd.DataFrame({
        "run_id": np.repeat([f"r{i}" for i in range(200)], lengths),
        "wall_ms": np.where(rng.random(lengths.sum()) < 0.05, 0.0, rng.gamma(3.0, 80.0, lengths.sum())),
        "cache_hit_pct": np.arange(lengths.sum(), dtype=float),
    })
    tokens["step"] = tokens.groupby("run_id").cumcount() + 1
    ordered = runs_table(tokens)
    shuffled = runs_table(tokens.sample(frac=1, random_state=3).sort_values(
        "step", kind="stable"))           # interleaved runs, each still in step order
    pd.testing.assert_frame_equal(ordered, shuffled.loc[ordered.index], rtol=1e-12)
    valid = tokens[tokens.wall_ms > 0].assign(tps=lambda d: 1000 / d.wall_ms).groupby("run_id").tps
    for q, key in ((0.05, "p5"), (0.5, "median"), (0.95, "p95")):
        ref = valid.quantile(q)
        assert np.allclose(ordered.loc[ref.index, key], ref, rtol=1e-12)
    last = tokens.groupby("run_id").cache_hit_pct.last()          # cumulative: last row wins
    assert (ordered.loc[last.index, "cache_hit_pct"] == last).all()
    # one very long run takes the general (argsort) path and must agree too
    big = pd.concat([tokens, pd.DataFrame({"run_id": "long", "wall_ms": rng.gamma(3.0, 80.0, 90_000)})])
    t = runs_table(big)
    tps = np.sort(1000 / big[big.run_id == "long"].wall_ms.to_numpy())
    assert t.loc["long", "p95"] == pytest.approx(np.percentile(tps, 95), rel=1e-12)
    assert np.allclose(t.loc[ordered.index, "p95"], ordered.p95, rtol=1e-12)


# ---- beyond the published tables: latency percentiles, warm-up and steady state ----------

def mser5(wall: np.ndarray) -> tuple[int, float] | None:
    """MSER-5 written out for one run (White 1997): batch means of 5, the d over the first half
    of the batches that minimises Σ(b - mean)² / m² of the m batches left; (first steady token,
    tok/s from there), None under 20 tokens or when the minimum is the half's last batch (the
    run had not settled)."""
    k = len(wall) // 5
    if len(wall) < 20:
        return None
    b = [float(np.mean(wall[5 * i:5 * i + 5])) for i in range(k)]
    scores = []
    for d in range(k // 2):
        rest = np.array(b[d:])
        scores.append((float(((rest - rest.mean()) ** 2).sum()) / len(rest) ** 2, d))
    d = min(scores)[1]
    if d == k // 2 - 1:
        return None
    return 5 * d + 1, (len(wall) - 5 * d) / (wall[5 * d:].sum() / 1000)


def test_latency_and_steady_state_match_their_definitions() -> None:
    frames = [load_folder(FIX / f) for f in ("2026-07-13", "2026-07-17", "2026-07-14")]
    tokens = pd.concat([t for t, _ in frames], ignore_index=True)
    table = runs_table(tokens, {k: v for _, r in frames for k, v in r.items()})
    for rid, grp in tokens.groupby("run_id", sort=False):
        w = grp.wall_ms.to_numpy()
        row = table.loc[rid]
        for key, q in (("latency_p50_ms", 50), ("latency_p90_ms", 90), ("latency_p99_ms", 99)):
            assert row[key] == pytest.approx(np.percentile(w[w > 0], q), rel=1e-12)
        want = mser5(w)
        if want is None:
            assert math.isnan(row.steady_from_token) and math.isnan(row.steady_mean)
        else:
            assert row.steady_from_token == want[0]
            assert row.steady_mean == pytest.approx(want[1], rel=1e-12)
    # two 2026-07-17 runs slow down through their first half (the statistic still falls at
    # its end): no steady state is claimed for them
    assert math.isnan(table.loc["qwen_k6"].steady_from_token)
    # 2026-07-13's adaptive cache grows for a while: its steady state starts late and runs faster
    auto = table.loc["qwen_auto_ov"]
    assert auto.steady_from_token > 50 and auto.steady_mean > auto["mean"] * 1.2
    # majflt/token: the trailer's where it has one, else the rows' mean (2026-07-17 has both)
    k6 = tokens[tokens.run_id == "gemma_k6"]
    assert table.loc["gemma_k6"].majflt_per_token == pytest.approx(k6.majflt.mean(), abs=0.01)
    assert math.isnan(table.loc["qwen_base_ov"].majflt_per_token)      # not in those files


def test_steady_state_on_ragged_interleaved_runs() -> None:
    rng = np.random.default_rng(5)
    lengths = rng.integers(1, 120, 60)
    parts = []
    for i, n in enumerate(lengths):
        warm = np.linspace(900, 200, n) * (np.arange(n) < rng.integers(0, n + 1))
        parts.append(pd.DataFrame({"run_id": f"r{i}", "step": np.arange(1, n + 1),
                                   "wall_ms": 200 + warm + rng.gamma(2.0, 10.0, n)}))
    tokens = pd.concat(parts, ignore_index=True)
    shuffled = tokens.sample(frac=1, random_state=1).sort_values("step", kind="stable")
    table = runs_table(shuffled)
    for rid, grp in tokens.groupby("run_id"):
        want = mser5(grp.wall_ms.to_numpy())
        row = table.loc[rid]
        if want is None:                       # under 20 tokens: no steady state
            assert math.isnan(row.steady_from_token) and math.isnan(row.steady_mean)
        else:
            assert row.steady_from_token == want[0]
            assert row.steady_mean == pytest.approx(want[1], rel=1e-12)
