"""`orch compare` says what else differs and puts devices side by side: per matched pair the
settings and token counts that differ (a ≠ mark on the row and a note), headers by session
name in at most nine columns (`--columns`), each side's device facts with their source, every
headline figure against the reference, and a comparison figure beside the document."""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from cli_helpers import orch, orch_ok
from test_baselines_by_name import DESIGN, FIX, GPT, QWEN

from orchestrator.results.confounds import differences, flag_settings
from orchestrator.results.headline_figures import figure_comparisons
from orchestrator.stats.config_figures import RunResult, combine
from orchestrator.stats.figures import RunFigures
from orchestrator.stats.uncertainty import difference

GPT_C2000 = "cache_mb=2000,force_cache=0,dense_weights=anon"     # its name without a design


@pytest.fixture
def sessions(tmp_path: Path) -> str:
    """Session 1: the pinned study with its design; session 2: the same files without it."""
    db = str(tmp_path / "orch.db")
    copy = tmp_path / "nodesign"
    shutil.copytree(FIX, copy)
    for args in ((str(FIX), "--design", str(DESIGN)), (str(copy),)):
        orch_ok("import", *args, "--db", db)
    return db


@pytest.fixture
def devices(tmp_path: Path) -> str:
    """The pinned study imported twice under its design: as the OnePlus 15R the design names,
    and as a `celeron` whose design describes another device."""
    db = str(tmp_path / "orch.db")
    design = yaml.safe_load(DESIGN.read_text(encoding="utf-8"))
    design["device"] = {"name": "celeron", "soc": "Intel Celeron N5105", "cores": 4,
                        "ram_gib": 16, "storage": "eMMC", "os": "Debian 12"}
    other = tmp_path / "celeron.yaml"
    other.write_text(yaml.safe_dump(design), encoding="utf-8")
    copy = tmp_path / "celeron-run"
    shutil.copytree(FIX, copy)
    orch_ok("import", str(FIX), "--design", str(DESIGN), "--db", db)
    orch_ok("import", str(copy), "--design", str(other), "--db", db)
    return db


def table_lines(text: str) -> list[str]:
    """The comparison table's lines (the first markdown table)."""
    return text[text.index("\n|") + 1:].split("\n\n", 1)[0].splitlines()


# ---- what else differs ---------------------------------------------------------------------

MATCH = ("--match", f"anon-long={GPT_C2000}", "--match", "ahwb-long=dense_weights=ahwb-1354tok")


def test_matched_configs_that_differ_are_marked_and_listed(sessions):
    code, out = orch("compare", "-s", "1", "-s", "2", "--db", sessions, "--format", "md",
                     *MATCH)
    assert code == 0, out
    rows = {line.split(" | ")[1]: line for line in table_lines(out)[2:]}
    # anon-long (Qwen, cache 3000 MiB, 1,354 tokens) against gpt-oss's short c2000 run
    assert f"anon-long ↔ {GPT_C2000} ≠" in rows
    assert "ahwb-long ↔ dense_weights=ahwb-1354tok" in rows       # the same run: no mark
    note = out.split("≠ These configs", 1)[1]
    line = next(l for l in note.splitlines() if l.startswith("- anon-long"))
    assert "(2026-07-21-pinned-dense-ab vs nodesign)" in line
    assert f"model {QWEN} vs {GPT}" in line and "cache_mb 3000 vs 2000" in line
    assert "tokens 1,354 vs 74" in line
    assert not any(l.startswith("- ahwb-long") for l in note.splitlines())
    records = json.loads(orch_ok("compare", "-s", "1", "-s", "2", "--db", sessions,
                                 "--format", "json", *MATCH))
    by = {r["config"]: r for r in records if r["kind"] == "config"}
    assert {d["key"]: (d["reference"], d["other"]) for d in by["anon-long"]["differs"]} \
        == {"model": (QWEN, GPT), "cache_mb": ("3000", "2000"), "tokens": ("1,354", "74")}
    assert by["ahwb-long"]["differs"] == []
    # the terminal says it too
    out = orch_ok("compare", "-s", "1", "-s", "2", "--db", sessions, *MATCH)
    assert "≠ These configs" in out and "cache_mb 3000 vs 2000" in out


def _run(i: int, flags: str = "", imported: bool = False, settings: dict | None = None,
         model: str = "m") -> SimpleNamespace:
    return SimpleNamespace(id=i, flags=flags, imported=imported, settings=settings,
                           model=model, engine="bmoe", build=None)


def test_flags_parse_as_the_import_writes_settings():
    assert flag_settings("--cache-mb 4000 --overlap -t 4 --dense-weights=ahwb --x -1") == {
        "cache_mb": "4000", "overlap": "1", "t": "4", "dense_weights": "ahwb", "x": "-1"}


def test_tokens_alone_differ_beyond_a_tenth():
    figures = {1: RunFigures(n=1350, tokens=1350), 2: RunFigures(n=256, tokens=256),
               3: RunFigures(n=1300, tokens=1300)}
    same = "--cache-mb 4000 --overlap"
    got = differences([_run(1, same)], [_run(2, same)], figures)
    assert [(d.key, d.reference, d.other) for d in got] == [("tokens", "1,350", "256")]
    assert differences([_run(1, same)], [_run(3, same)], figures) == []    # within 10%
    # a flag one live side typed and the other did not: not set there
    got = differences([_run(1, same)], [_run(3, "--cache-mb 2000")], figures)
    assert [(d.key, d.reference, d.other) for d in got] == [
        ("cache_mb", "4000", "2000"), ("overlap", "1", "not set")]
    # an import's full settings against typed flags: only the keys both give
    full = {"cache_mb": 4000, "overlap": 1, "threads": 4, "model": "x.gguf"}
    got = differences([_run(1, imported=True, settings=full)], [_run(3, "--cache-mb 2000")],
                      figures)
    assert [d.key for d in got] == ["cache_mb"]


# ---- the table: session names, nine columns, --columns ---------------------------------------

def test_headers_by_session_name_in_nine_columns_and_columns_option(sessions):
    out = orch_ok("compare", "-s", "1", "-s", "2", "--db", sessions, "--format", "md", *MATCH)
    header = table_lines(out)[0].strip("|").split(" | ")
    assert len(header) <= 9, header
    assert "nodesign/2026-07-21-pinned-dense-ab ratio" in [h.strip() for h in header]
    assert "(session" not in table_lines(out)[0]
    out = orch_ok("compare", "-s", "1", "-s", "2", "--db", sessions, "--format", "md",
                  "--columns", "config,ratio,p", *MATCH)
    assert [h.strip() for h in table_lines(out)[0].strip("|").split("|")] == [
        "Config", "nodesign/2026-07-21-pinned-dense-ab ratio",
        "nodesign/2026-07-21-pinned-dense-ab p"]
    code, out = orch("compare", "-s", "1", "-s", "2", "--db", sessions, "--columns",
                     "config,nosuch", *MATCH)
    assert code == 2 and "unknown column(s) nosuch" in out
    assert all(k in out for k in ("tps", "runs", "ratio", "p_holm", "verdict"))


# ---- devices side by side ------------------------------------------------------------------

def test_devices_facts_and_every_headline_figure_beside_the_ratios(devices, tmp_path):
    out_file = tmp_path / "cmp" / "devices.md"
    orch_ok("compare", "-d", "OnePlus 15R", "-d", "celeron", "--db", devices,
            "-o", str(out_file))
    text = out_file.read_text(encoding="utf-8")
    facts = text.split("**Devices**", 1)[1].split("\n\n", 2)[1]
    assert "| SoC / CPU | Snapdragon 8 Elite | Intel Celeron N5105 |" in facts
    assert "| RAM | 11.4 GiB | 16.0 GiB |" in facts
    assert "| storage | UFS 4.0 | eMMC |" in facts and "| OS | Android 16 | Debian 12 |" in facts
    assert "| facts from | the design file (session 1) | the design file (session 2) |" in facts
    figures = text.split("**Headline figures**", 1)[1]
    for header in ("prefill (tok/s)", "TTFT (s)", "p95 (tok/s)", "peak RSS (GiB)"):
        assert header in figures
    assert f"| {QWEN} | anon-long | 1.60 → 1.60 (1.00×) |" in figures    # prefill, same files
    # the figure, written beside the document and linked
    png = out_file.parent / "devices_files" / "comparison.png"
    assert png.stat().st_size > 10_000 and "](devices_files/comparison.png)" in text
    records = json.loads(orch_ok("compare", "-d", "OnePlus 15R", "-d", "celeron",
                                 "--db", devices, "--format", "json"))
    rec = next(r for r in records if r["kind"] == "config" and r["config"] == "anon-long")
    for key in ("prefill_tps", "ttft_s", "p95", "peak_rss_gib"):
        assert rec[f"{key}_ratio"] == pytest.approx(1.0), key
        assert rec[f"{key}_reference"] == rec[f"{key}_other"]
    device = [r for r in records if r["kind"] == "device"]
    assert [(d["device"], d["source"]) for d in device] == [("OnePlus 15R", "design file"),
                                                            ("celeron", "design file")]
    # the report's comparison section: the same, its figure beside the report
    report = tmp_path / "rep" / "r.md"
    orch_ok("report", "--compare", "-d", "OnePlus 15R", "-d", "celeron", "--db", devices,
            "-o", str(report))
    section = report.read_text(encoding="utf-8").split("## Comparison", 1)[1]
    assert "Intel Celeron N5105" in section and "peak RSS (GiB)" in section
    assert (report.parent / "r_files" / "comparison.png").exists()


def test_figures_compare_with_intervals_and_temperatures_as_differences():
    def config(values: list[tuple[float, float, float]]) -> object:
        return combine([RunResult(i, "ok", RunFigures(mean=m, prefill_tps=p, cpu_temp_max_c=t))
                        for i, (m, p, t) in enumerate(values)])

    a = config([(10.0, 50.0, 40.0), (11.0, 52.0, 42.0), (12.0, 54.0, 41.0)])
    b = config([(5.0, 100.0, 45.0), (5.5, 104.0, 47.0), (6.0, 108.0, 46.0)])
    got = {fc.figure.key: fc for fc in figure_comparisons(a, b)}
    assert set(got) == {"mean", "prefill_tps", "cpu_temp_max_c"}
    assert got["prefill_tps"].value == pytest.approx(2.0, rel=1e-3)
    assert got["prefill_tps"].change.low < 2.0 < got["prefill_tps"].change.high
    assert got["cpu_temp_max_c"].value == pytest.approx(5.0)
    assert got["cpu_temp_max_c"].change == difference([40, 42, 41], [45, 47, 46])
    assert got["cpu_temp_max_c"].change.low < 5.0 < got["cpu_temp_max_c"].change.high
    assert difference([40.0], [45.0]).low is None        # one run a side: no interval
