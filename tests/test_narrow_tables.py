"""The throughput table keeps the study's columns and fits a page; the engine's detail is a
second table; `--columns` picks; the document's caveats (overlap, serial stall, warnings) and
paper cuts (run ids, per-model config counts), on the imported bigmoe fixtures."""
from __future__ import annotations

import itertools
import re
import shutil
from pathlib import Path

import pytest
from cli_helpers import orch, orch_ok

from orchestrator.report.format.markdown import md_prose

FIX = Path(__file__).parent / "fixtures" / "bigmoe"
DESIGN = Path(__file__).parent / "fixtures" / "designs" / "2026-07-21-pinned-dense-ab.yaml"
STUDY = ["Config", "decode mean", "min", "max", "median", "p5", "p95", "cache hit",
         "flash read/token", "decode: compute + I/O (s/tok)", "run ids"]


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Both fixture studies, imported: session 1 (2026-07-17), session 2 (the pinned A/B)."""
    path = str(tmp_path_factory.mktemp("narrow") / "orch.db")
    orch_ok("import", str(FIX / "2026-07-17"), "--db", path)
    orch_ok("import", str(FIX / "2026-07-21-pinned-dense-ab"), "--db", path, "--design",
            str(DESIGN))
    return path


@pytest.fixture(scope="module")
def reports(db: str) -> dict[str, str]:
    return {sid: orch_ok("report", sid, "--db", db, "--no-plots") for sid in ("1", "2")}


def headers(text: str) -> list[list[str]]:
    """The header row of every markdown table, in order."""
    lines = text.splitlines()
    return [[c.strip() for c in line.strip("|").split("|")]
            for line, nxt in itertools.pairwise(lines) if line.startswith("|") and
            nxt.startswith("|---")]


def table_lines(text: str, first_header: list[str]) -> list[str]:
    """The lines of every table whose header is `first_header`."""
    out, inside = [], False
    for line in text.splitlines():
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            inside = inside or cells == first_header
            if inside:
                out.append(line)
        else:
            inside = False
    return out


# ---- the narrow throughput table and its detail table --------------------------------------

def test_orch_table_throughput_has_the_study_columns(db: str) -> None:
    md = orch_ok("table", "1", "--db", db)
    heads = headers(md)
    assert heads[0] == STUDY and len(STUDY) <= 12
    detail = heads[1]       # right after it: the engine's timing detail
    assert detail == ["Config", "prefill tok/s", "TTFT (s)", "stall ms/tok", "majflt/token"]
    assert "**Prefill & stall**" in md


def test_report_throughput_then_detail(reports: dict[str, str]) -> None:
    heads = headers(reports["1"])
    assert heads[0] == STUDY
    assert heads[1][:5] == ["Config", "prefill tok/s", "TTFT (s)", "stall ms/tok",
                            "majflt/token"]
    assert {"p50 ms", "p90 ms", "p99 ms", "steady-state mean"} <= set(heads[1])
    text = reports["1"]
    assert text.index("**Throughput**") < text.index("**Prefill, stall & warm-up**") \
        < text.index("**Device pressure**")


@pytest.mark.parametrize("sid", ["1", "2"])
def test_no_throughput_line_over_200_characters(db: str, reports: dict[str, str],
                                                sid: str) -> None:
    for text in (orch_ok("table", sid, "--db", db), reports[sid]):
        lines = table_lines(text, STUDY)
        assert lines, "no throughput table"
        assert max(map(len, lines)) <= 200, max(lines, key=len)


def test_columns_picks_by_key(db: str) -> None:
    md = orch_ok("table", "1", "--db", db, "--columns", "mean,p5,stall_ms_per_token")
    assert headers(md)[0] == ["Config", "decode mean", "p5", "stall ms/tok", "run ids"]
    assert "prefill tok/s" not in md            # the detail table gives way to the pick
    text = orch_ok("report", "1", "--db", db, "--no-plots", "--columns",
                   "mean,latency_p99_ms,ttft_s")
    assert headers(text)[0] == ["Config", "decode mean", "p99 ms", "TTFT (s)", "run ids"]
    assert "**Prefill, stall & warm-up**" not in text


def test_columns_leaves_out_what_the_data_lacks(db: str) -> None:
    # spec_read... is no throughput key; majflt is, and these CSVs have it; the 95% CI of a
    # config measured once is empty, so it is left out
    text = orch_ok("report", "1", "--db", db, "--no-plots", "--columns", "mean,mean_ci_low")
    assert headers(text)[0] == ["Config", "decode mean", "run ids"]


@pytest.mark.parametrize("command", ["table", "report"])
def test_unknown_column_exits_2_with_the_valid_keys(db: str, command: str) -> None:
    code, out = orch(command, "1", "--db", db, "--columns", "mean,bogus")
    assert code == 2
    assert "bogus" in out and "compute_s_per_token" in out and "stall_ms_per_token" in out


def test_html_tables_scroll_sideways(db: str, tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    orch_ok("report", "1", "--db", db, "--no-plots", "--format", "html", "-o", str(out))
    page = out.read_text(encoding="utf-8")
    assert page.count('<div class="table-scroll"><table>') == page.count("<table>") > 0
    assert re.search(r"\.table-scroll \{[^}]*overflow-x: auto", page)


def test_an_html_out_file_gets_an_html_page(db: str, tmp_path: Path) -> None:
    """`-o r.html` without --format writes the HTML page (not markdown in an .html file);
    any other name, markdown; --format still decides when given."""
    orch_ok("report", "1", "--db", db, "--no-plots", "-o", str(tmp_path / "r.html"))
    assert (tmp_path / "r.html").read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    orch_ok("report", "1", "--db", db, "--no-plots", "-o", str(tmp_path / "r.md"))
    assert (tmp_path / "r.md").read_text(encoding="utf-8").startswith("# ")
    orch_ok("report", "1", "--db", db, "--no-plots", "--format", "md",
            "-o", str(tmp_path / "plain.html"))
    assert (tmp_path / "plain.html").read_text(encoding="utf-8").startswith("# ")


# ---- caveats in the document ---------------------------------------------------------------

def test_overlap_rows_carry_the_note(reports: dict[str, str]) -> None:
    text = reports["1"]         # every run of 2026-07-17 ran with overlap=1
    assert "0.156 + 1.118 ‡ |" in text
    assert "‡ ran with `--overlap`: flash I/O runs beside compute, so compute + I/O does not " \
           "add up to the wall time" in text


@pytest.fixture(scope="module")
def serial_db(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Two runs of one model: qwen_k6 as measured (overlap), qwen_kdef rewritten serial."""
    root = tmp_path_factory.mktemp("serial")
    folder = root / "2026-07-17"
    folder.mkdir()
    for stem in ("qwen_k6", "qwen_kdef"):
        for f in (FIX / "2026-07-17").glob(f"{stem}.*"):
            shutil.copy(f, folder / f.name)
    csv = folder / "qwen_kdef.csv"
    csv.write_text(csv.read_text(encoding="utf-8").replace(" overlap=1 ", " overlap=0 ", 1),
                   encoding="utf-8")
    path = str(root / "orch.db")
    orch_ok("import", str(folder), "--db", path)
    return path


def _row(text: str, label: str, header: str, after: str) -> str:
    """The `header` cell of `label`'s row in the first table below the line `after`."""
    lines = text[text.index(after):].splitlines()
    i = next(i for i, line in enumerate(lines) if line.startswith("| Config |"))
    heads = [c.strip() for c in lines[i].strip("|").split("|")]
    for line in lines[i + 2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells[0] == label:
            return cells[heads.index(header)]
    raise AssertionError(f"no row {label}")


def test_serial_run_stall_is_a_dash(serial_db: str) -> None:
    md = orch_ok("table", "--db", serial_db)
    assert _row(md, "qwen_kdef", "stall ms/tok", "**Prefill & stall**") == "—"
    assert _row(md, "qwen_k6", "stall ms/tok", "**Prefill & stall**") == "44.2"
    text = orch_ok("report", "--db", serial_db, "--no-plots")
    assert _row(text, "qwen_kdef", "stall ms/tok", "**Prefill, stall & warm-up**") == "—"
    assert _row(text, "qwen_k6", "stall ms/tok", "**Prefill, stall & warm-up**") == "44.2"
    # only the overlap config is marked
    assert _row(text, "qwen_k6", "decode: compute + I/O (s/tok)", "**Throughput**").endswith("‡")
    assert "‡" not in _row(text, "qwen_kdef", "decode: compute + I/O (s/tok)", "**Throughput**")


def test_warnings_keep_their_code_spans(db: str, reports: dict[str, str]) -> None:
    for text in (reports["1"], orch_ok("table", "1", "--db", db)):
        assert "(`cooldown: {until: baseline+2C}`)" in text
        assert "\\`" not in text


def test_prose_escapes_outside_code_spans() -> None:
    assert md_prose("use `--x *y*` for a|b") == "use `--x *y*` for a\\|b"
    assert md_prose("a lone ` tick and *stars*") == "a lone \\` tick and \\*stars\\*"
    assert md_prose("<b>`<i>`") == "&lt;b>`<i>`"


# ---- paper cuts ----------------------------------------------------------------------------

def test_run_ids_header(db: str, reports: dict[str, str]) -> None:
    for text in reports.values():
        heads = headers(text)
        assert not any("runs" in h for h in heads), "a `runs` header is left"
        assert sum("run ids" in h for h in heads) >= 4    # throughput, detail, pressure, A/B
        assert "*run ids* column" in text
    assert headers(orch_ok("table", "1", "--db", db))[0][-1] == "run ids"


def test_header_counts_configs_per_model(reports: dict[str, str]) -> None:
    assert ("engine `bmoe`: 5 configs of gpt-oss-120b-Q4_K_M, 2 of "
            "google_gemma-4-26B-A4B-it-Q4_K_M, 2 of Qwen3-30B-A3B-Q4_K_M — 9 run(s)"
            in reports["1"])
    assert "config(s) ×" not in reports["1"] and "config(s) ×" not in reports["2"]
