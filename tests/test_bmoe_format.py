"""bmoe artifact parsers against the real BigMoeOnEdge fixtures (tests/fixtures/bigmoe)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from orchestrator.engines.base import CellSpec, TokenRow
from orchestrator.engines.bmoe import BmoeAdapter, BmoeRunParser
from orchestrator.engines.bmoe_format import (
    BmoeCsvParser,
    match_summary_line,
    parse_metrics_sidecar,
    parse_summary_lines,
    split_log,
    split_sections,
)

FIX = Path(__file__).parent / "fixtures" / "bigmoe"
# bmoe per-token CSVs; the route trace (`*.route.csv`, another format: docs/routes.md §1) and
# its folder's engine stderr log are tested in tests/test_routes.py
ROUTE_TRACE = FIX / "2026-07-15-route-trace"
ALL_CSV = sorted(p for p in FIX.rglob("*.csv") if not p.name.endswith(".route.csv"))
PROMPT_17 = ("Write a long detailed essay about the history of computing including its origins "
             "its key milestones the people involved and the future directions of the field")


def read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def parse_csv_text(text: str) -> tuple[BmoeCsvParser, list[TokenRow]]:
    p = BmoeCsvParser()
    rows = [r for line in text.splitlines(keepends=True) if (r := p.feed(line)) is not None]
    p.finish()
    return p, rows


def test_fixtures_copied_locally() -> None:
    assert len(ALL_CSV) == 59
    for d in ("2026-07-12-pr23", "2026-07-13", "2026-07-14", "2026-07-17", "2026-07-14-warmup",
              "2026-07-20-cache-replay", "2026-07-21-pinned-dense-ab"):
        assert (FIX / d).is_dir()
    assert (FIX / "README.md").is_file()


@pytest.mark.parametrize("path", ALL_CSV, ids=lambda p: str(p.relative_to(FIX)))
def test_every_fixture_csv_parses_cleanly(path: Path) -> None:
    p, rows = parse_csv_text(read(path))
    assert p.errors == []
    assert p.complete and len(p.trailers) == 1
    assert len(p.columns) in (9, 22)
    assert p.n_rows == len(rows) == p.trailers[0]["tokens"]
    # steps: the tokens asked for; a run that met end-of-generation stopped before (67 of 2048)
    assert p.steps_target >= p.n_rows
    assert [r.step for r in rows] == list(range(1, len(rows) + 1))
    # the engine's own aggregate agrees with the rows: tok/s = n / sum(wall)
    wall = sum(r.wall_ms for r in rows)
    assert p.trailers[0]["tok/s"] == pytest.approx(len(rows) / (wall / 1000), abs=0.0006)


def test_22_column_csv_keeps_extras_and_preamble() -> None:
    p, rows = parse_csv_text(read(FIX / "2026-07-17" / "gemma_k6.csv"))
    assert p.version == 1
    s = p.settings
    assert s["cache_mb"] == 4000 and s["io_threads"] == 4 and s["overlap"] == 1
    assert s["n_expert_used"] == 6 and s["n_layer"] == 30 and s["moe_stream"] == 1
    assert s["model"] == "google_gemma-4-26B-A4B-it-Q4_K_M.gguf" and s["dense_weights"] == "anon"
    first = rows[0]
    assert first.majflt == 75244.0 and first.cpu_ms == 2087.762 and first.mgmt_ms == 35.858
    assert first.read_bytes == 252379136 and isinstance(first.read_bytes, int)
    assert first.extra["dense_resident_frac"] == -1.0          # sentinel kept as given
    assert first.extra["rss_mib"] == 6147.4 and first.extra["swap_free_mib"] == 9250.1
    assert p.steps_target == 256 and "steps" not in first.extra and first.turn == 0
    assert set(first.extra) == {"dense_resident_frac", "majflt_mib",
                                "cache_budget_mib", "rss_mib", "rss_anon_mib", "rss_file_mib",
                                "swap_mib", "mem_available_mib", "mem_free_mib", "swap_free_mib"}
    tr = p.trailers[-1]
    assert tr["s/tok"] == 0.264 and tr["majflt/tok"] == 1003.71 and tr["cache_resizes"] == 0
    assert isinstance(tr["tokens"], int) and tr["layer_demand_MiB"] == 24.8
    p2, _ = parse_csv_text(read(FIX / "2026-07-17" / "gpt_c2000_l8_k2.csv"))
    assert p2.settings["io_threads"] == 8 and p2.settings["n_expert_used"] == 2
    assert p2.settings["cache_mb"] == 2000


def test_nine_column_csv_sentinels_and_mmap() -> None:
    p, rows = parse_csv_text(read(FIX / "2026-07-14" / "gptoss_mmap_k2.csv"))
    assert p.settings == {} and p.version is None
    assert all(r.cache_hit_pct == -1.0 and r.io_ms == 0 and r.compute_ms == r.wall_ms
               for r in rows)
    assert rows[0].majflt is None and rows[0].extra is None and p.steps_target == 24


def test_columns_are_looked_up_by_name() -> None:
    text = ("step,wall_ms,steps,newcol,cache_hit_pct\n"
            "1,100.5,2,7,-1.00\n2,0,2,8,50\n# summary tokens=2 tok/s=19.9\n")
    p, rows = parse_csv_text(text)
    assert p.errors == [] and p.complete
    assert rows[0].wall_ms == 100.5 and rows[0].extra == {"newcol": 7}
    assert rows[1].wall_ms == 0.0 and rows[1].cache_hit_pct == 50.0 and rows[1].io_ms is None


def test_bom_is_tolerated() -> None:
    text = "\ufeff" + read(FIX / "2026-07-13" / "qwen_sg_ov.csv")
    p, rows = parse_csv_text(text)
    assert p.errors == [] and len(rows) == 256 and p.complete


def test_truncated_csv_is_incomplete_and_keeps_rows(tmp_path: Path) -> None:
    lines = read(FIX / "2026-07-17" / "qwen_kdef.csv").splitlines(keepends=True)
    cut = tmp_path / "killed.csv"
    cut.write_text("".join(lines[:-41]), encoding="utf-8")     # last 40 rows + the trailer
    p, rows = parse_csv_text(read(cut))
    assert not p.complete and p.trailers == []
    assert len(rows) == 216 and rows[-1].step == 216
    assert p.settings["n_expert_used"] == 8
    assert len(p.errors) == 1 and "no '# summary' trailer" in p.errors[0]


def test_binary_garbage_gives_errors_not_exceptions() -> None:
    blob = bytes(range(256)) * 40 + b"\x00\x01\xff\xfe" * 100
    text = blob.decode("utf-8", errors="replace")
    p, rows = parse_csv_text(text)
    assert rows == [] and not p.complete
    assert any("binary garbage" in e for e in p.errors)
    assert any("no header row" in e for e in p.errors)
    # garbage in the middle of a good file: the good rows survive
    good = read(FIX / "2026-07-13" / "qwen_base_ov.csv").splitlines(keepends=True)
    mixed = "".join(good[:100]) + "\x00\x00PK\x03\x04\ufffd\n" + "".join(good[100:])
    p, rows = parse_csv_text(mixed)
    assert len(rows) == 256 and p.complete and len(p.errors) == 1


def test_header_only() -> None:
    p, rows = parse_csv_text("step,steps,wall_ms,io_ms,compute_ms,read_bytes,cache_hit_pct\n")
    assert rows == [] and not p.complete
    assert p.errors == ["line 1: header but no data rows"]


def test_wrong_column_count_non_numeric_and_huge_line() -> None:
    good = read(FIX / "2026-07-12-pr23" / "qwen_base.csv").splitlines(keepends=True)
    bad = (good[:10] + ["11,256,1.0,2.0\n"]                       # short row
           + ["12,256,abc,1,1,1,1,1,1\n"]                         # non-numeric
           + ["9" * (1024 * 1024) + "\n"]                          # a 1 MB line
           + good[10:])
    p, rows = parse_csv_text("".join(bad))
    assert len(rows) == 256 and p.complete
    assert len(p.errors) == 3
    assert "wrong column count (expected 9, got 4)" in p.errors[0]
    assert "non-numeric value 'abc' in column 'wall_ms'" in p.errors[1]
    assert "line too long" in p.errors[2]


def test_data_before_header_and_error_cap() -> None:
    p = BmoeCsvParser()
    for _ in range(1000):
        assert p.feed("1,2,3\n") is None
    assert p.error_count == 1000 and len(p.errors) == 200
    assert "data before the header" in p.errors[0]


# ---- summary lines -------------------------------------------------------------------------

SPEC_EXAMPLE = """generation: 256 tokens, 0.288 s/token (3.469 tok/s)
prefill: 34 tokens, 10.845 s (3.1 tok/s) | model load 18.009 s | TTFT 28.853 s
moe-stream: read 57509.4 MiB (224.65 MiB/token), decode 0.288 s/token (compute 0.161 + flash I/O 0.127 s/token, 1763 MiB/s)
moe-cache: 76.5% hit, resident 3997.9 MiB
moe-overlap: stall 0.058 s/token (flash reads overlapped with FFN compute)
moe-prefetch: 12.3 MiB speculative, 40/100 experts useful (40%)
"""


def test_spec_example_lines() -> None:
    out = parse_summary_lines(SPEC_EXAMPLE.splitlines())
    assert out["generation"] == {"tokens": 256, "s_per_token": 0.288, "tok_per_s": 3.469}
    assert out["prefill"] == {"tokens": 34, "s": 10.845, "tok_per_s": 3.1, "load_s": 18.009,
                              "ttft_s": 28.853}
    assert out["moe_stream"]["mgmt_s_per_token"] is None
    assert out["moe_stream"]["io_s_per_token"] == 0.127 and out["moe_stream"]["mib_per_s"] == 1763
    assert out["moe_cache"] == {"hit_pct": 76.5, "resident_mib": 3997.9, "budget_mib": None,
                                "budget_auto": None, "resizes": None}
    assert out["moe_overlap"] == {"stall_s_per_token": 0.058}
    assert out["moe_prefetch"] == {"spec_mib": 12.3, "useful": 40, "experts": 100,
                                   "useful_pct": 40.0}
    assert out["text"] == ""


def test_newer_line_variants() -> None:
    cache = match_summary_line(
        "moe-cache: 85.2% hit, resident 4608.3 MiB, budget 4610 MiB (auto, resized 0×)")
    assert cache[1]["budget_mib"] == 4610 and cache[1]["budget_auto"] and cache[1]["resizes"] == 0
    plain = match_summary_line("moe-cache: 81.5% hit, resident 4675.3 MiB, budget 4675 MiB (auto)")
    assert plain[1]["budget_auto"] is True and plain[1]["resizes"] is None
    comp = match_summary_line("compute: 80.4% CPU occupancy (0.8478 cpu-s/token over 4 threads),"
                              " 1003.71 major faults/token")
    assert comp[1] == {"cpu_pct": 80.4, "cpu_s_per_token": 0.8478, "threads": 4,
                       "majflt_per_token": 1003.71}
    gate = match_summary_line("moe-spec-gate: 63% router prediction recall "
                              "(auto-disabled below 75%)")
    assert gate[1] == {"recall_pct": 63.0, "auto_disabled": True, "auto_off_below_pct": 75.0}


def test_glued_prefix_rule() -> None:
    # stderr glued before a complete summary line: accepted, the head is reported
    hit = match_summary_line("llama_perf: warmup doneprefill: 34 tokens, 6.604 s (5.1 tok/s)"
                             " | model load 17.224 s | TTFT 23.828 s")
    assert hit[0] == "prefill" and hit[2] == "llama_perf: warmup done"
    # prose that merely contains a prefix is not a summary line
    assert match_summary_line("The compute: part of this essay covers 4 threads") is None
    assert match_summary_line("next-generation: 256 tokens, of course") is None
    # a correct summary line followed by more text is not accepted either (anchored at EOL)
    assert match_summary_line("generation: 256 tokens, 0.288 s/token (3.469 tok/s) and more") is None
    out = parse_summary_lines(["the answer is 391", "more textgeneration: 24 tokens, 1.455 "
                               "s/token (0.687 tok/s)"])
    assert out["generation"]["tokens"] == 24 and out["text"] == "the answer is 391\nmore text"


OUT_17 = sorted((FIX / "2026-07-17").glob("*.out"))


@pytest.mark.parametrize("path", OUT_17, ids=lambda p: p.name)
def test_full_out_logs_match_their_csv(path: Path) -> None:
    out = parse_summary_lines(read(path).splitlines())
    p, rows = parse_csv_text(read(path.with_suffix(".csv")))
    tr = p.trailers[-1]
    assert out["generation"]["tokens"] == tr["tokens"] == len(rows)
    assert out["generation"]["s_per_token"] == tr["s/tok"]
    assert out["prefill"]["load_s"] == tr["load_s"] and out["prefill"]["s"] == tr["prefill_s"]
    assert out["moe_stream"]["read_mib"] == tr["read_MiB"]
    assert out["moe_stream"]["mgmt_s_per_token"] == tr["mgmt_s/tok"]
    assert out["moe_overlap"]["stall_s_per_token"] == tr["stall_s/tok"]
    assert out["compute"]["cpu_s_per_token"] == tr["cpu_s/tok"]
    if tr["cache_hit_pct"] < 0:                     # cache 0: the engine prints no cache line
        assert "moe_cache" not in out
    else:
        assert out["moe_cache"]["hit_pct"] == tr["cache_hit_pct"]
    text = out["text"]
    assert text.startswith(PROMPT_17) and not text.endswith("\n")
    assert "generation:" not in text and len(text) > len(PROMPT_17) + 100
    stripped = parse_summary_lines(read(path).splitlines(), prompt=PROMPT_17)["text"]
    assert stripped == text[len(PROMPT_17):]


def test_gptoss_matrix_out_sections() -> None:
    sections = split_sections(read(FIX / "2026-07-14" / "gptoss-matrix.out"))
    tags = [t for t, _ in sections]
    assert len(tags) == 14 and tags[0] == "k2_io4_pf0" and tags[-2:] == ["mmap_k4", "mmap_k2"]
    by = {t: parse_summary_lines(body.splitlines()) for t, body in sections}
    assert by["k2_io4_pf0"]["generation"]["tokens"] == 24
    assert by["k2_io4_pf0"]["moe_cache"]["budget_mib"] == 3000
    assert by["k3_io8_pf4"]["moe_prefetch"] == {"spec_mib": 4513.2, "useful": 53,
                                                "experts": 358, "useful_pct": 15.0}
    assert "moe_prefetch" not in by["k4_io8_pf0"]
    assert "Canberra" in by["k2_io4_pf0"]["text"]
    for tag in ("mmap_k4", "mmap_k2"):     # plain mmap: only generation and prefill lines
        assert set(by[tag]) == {"generation", "prefill", "text"}
    assert by["mmap_k2"]["generation"]["s_per_token"] == 11.24


@pytest.mark.parametrize("path", sorted(p for p in FIX.rglob("*.log") if p.parent != ROUTE_TRACE),
                         ids=lambda p: p.name)
def test_logs_split(path: Path) -> None:
    text = read(path)
    if path.parent.name == "2026-07-20-cache-replay":     # driver logs: a run per section
        runs = [(t, split_log(b)) for t, b in split_sections(text) if t and t != "DONE"]
        assert len(runs) == 2 and all(log["lines"]["generation"]["tokens"] == 256
                                      for _, log in runs)
        return
    if path.name.startswith("driver-"):
        sections = [(t, b) for t, b in split_sections(text) if t != "DONE"]
        assert sections
        for tag, body in sections:
            log = split_log(body)
            sidecar = parse_metrics_sidecar(read(path.parent / f"{tag}.metrics"))
            assert log["metrics"] == sidecar
            assert log["lines"]["generation"]["tokens"] == 256
            assert any(o.startswith("bmoe: expert streaming ON") for o in log["other"])
        return
    assert text.startswith("\ufeff")                 # PowerShell wrote a BOM
    log = split_log(text)
    assert log["other"] == []
    assert log["metrics"] == parse_metrics_sidecar(read(path.with_suffix(".metrics")))
    assert len(log["metrics"]) == 9
    p, rows = parse_csv_text(read(path.with_suffix(".csv")))
    tr = p.trailers[-1]
    assert log["lines"]["generation"]["tok_per_s"] == tr["tok/s"]
    assert log["lines"]["moe_cache"]["hit_pct"] == tr["cache_hit_pct"]


def test_metrics_sidecar_empty_value_and_bom() -> None:
    m = parse_metrics_sidecar("\ufeffpeak_rss_kb=6344268\r\ncpu_temp_max_mC=\nbatt_temp_max_dC=391\n")
    assert m == {"peak_rss_kb": 6344268, "cpu_temp_max_mC": None, "batt_temp_max_dC": 391}


# ---- adapter -------------------------------------------------------------------------------

def test_build_argv() -> None:
    cell = CellSpec(binary="/data/local/tmp/bmoe-cli", model_path="/sdcard/m.gguf",
                    prompt="it's \"quoted\"\nand $HOME", tokens=256,
                    flags=["--moe-stream", "--cache-mb", "4000", "--overlap"],
                    csv_path="/data/local/tmp/job/tokens.csv")
    a = BmoeAdapter()
    assert a.name == "bmoe" and a.writes_csv
    assert a.build_argv(cell) == [
        "/data/local/tmp/bmoe-cli", "-m", "/sdcard/m.gguf", "-p", "it's \"quoted\"\nand $HOME",
        "-n", "256", "--moe-stream", "--cache-mb", "4000", "--overlap",
        "--csv", "/data/local/tmp/job/tokens.csv"]
    with pytest.raises(ValueError):
        a.build_argv(CellSpec("b", None, "p", 1, [], "c.csv"))


def test_run_parser_stream() -> None:
    parser = BmoeAdapter().new_parser()
    assert isinstance(parser, BmoeRunParser)
    d = FIX / "2026-07-17"
    rows = []
    for i in range(70):
        parser.feed("E", f"print_info: line {i}")
    parser.feed("E", "bmoe: warning: O_DIRECT unsupported on this filesystem, using buffered")
    for line in read(d / "gemma_k6.csv").splitlines():
        rows += parser.feed("C", line)
    for line in read(d / "gemma_k6.out").splitlines():
        assert parser.feed("O", line) == []
    r = parser.record()
    assert len(rows) == 256 and r.complete and r.errors == []
    assert r.settings["n_expert_used"] == 6
    assert r.decode_tps == r.extra["trailer"]["tok/s"] == 3.792
    assert r.extra["lines"]["compute"]["threads"] == 4 and "text" not in r.extra["lines"]
    assert r.cpu_s_per_token == r.extra["trailer"]["cpu_s/tok"]
    assert r.text.startswith(PROMPT_17) and r.text.endswith("*   Hook")
    assert len(r.stderr_tail) == 50 and r.stderr_tail[-1].startswith("bmoe: warning")
    assert r.stderr_tail[0] == "print_info: line 21"
    assert parser.warnings() == [
        "bmoe: warning: O_DIRECT unsupported on this filesystem, using buffered"]


def test_run_parser_killed_run() -> None:
    parser = BmoeRunParser()
    lines = read(FIX / "2026-07-13" / "gemma_sg_ov.csv").splitlines()[:-41]
    for line in lines:
        parser.feed("C", line)
    r = parser.record()
    assert not r.complete and r.extra["trailer"] is None and r.text is None
    assert r.extra["lines"] == {} and len(r.errors) == 1 and r.decode_tps is None
    assert parser.record().errors == r.errors       # record() may be called again


def test_no_shared_paths_in_tests() -> None:
    here = Path(__file__).parent
    for t in ("test_bmoe_format.py", "test_analysis_oracle.py"):
        assert "/work/" + "shared" not in (here / t).read_text()
    assert os.path.commonpath([FIX, here]) == str(here)
