"""The report's Routing section: one part per traced run with the published Gemma figures
(docs/routes.md §4), the replay table (§5), figures as PNG files (markdown) or embedded
(HTML), and measured cache hits of the same model as markers over the replay."""
from __future__ import annotations

import base64
import re
import shutil
from pathlib import Path

import pytest
from cli_helpers import orch_ok
from test_analysis_oracle import FIX

from orchestrator.db.runs import Runs
from orchestrator.db.store import Store
from orchestrator.report.document import routing
from orchestrator.results import report_data as context

TRACE_DIR = FIX / "2026-07-15-route-trace"
CACHE_DIR = FIX / "2026-07-13"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
KINDS = ("steps", "popularity", "lags", "replay")


def _is_png(data: bytes) -> bool:
    # the signature, then the IHDR chunk with a non-empty image
    if not data.startswith(PNG_MAGIC) or data[12:16] != b"IHDR":
        return False
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    return width > 100 and height > 100 and data.endswith(b"IEND\xaeB`\x82")


@pytest.fixture(scope="module")
def traced(tmp_path_factory) -> dict:
    """The Gemma trace imported, its report written as markdown and as HTML."""
    root = tmp_path_factory.mktemp("traced")
    db = str(root / "orch.db")
    orch_ok("import", str(TRACE_DIR), "--db", db)
    doc, page = root / "doc.md", root / "page.html"
    orch_ok("report", "--db", db, "-o", str(doc))
    orch_ok("report", "--db", db, "--format", "html", "-o", str(page))
    return {"db": db, "doc": doc, "md": doc.read_text(encoding="utf-8"),
            "html": page.read_text(encoding="utf-8"), "root": root}


def _routing_part(text: str) -> str:
    start = text.index("## Routing")
    return text[start:text.index("## Left out", start)]


def _row(text: str, first_cell: str) -> list[str]:
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells and cells[0] == first_cell:
            return cells
    raise AssertionError(f"no table row starting {first_cell!r}")


@pytest.mark.slow   # makes the `traced` document: 12 s
def test_markdown_routing_section_has_the_published_figures(traced):
    part = _routing_part(traced["md"])
    (run,) = Runs(Store.open(traced["db"])).current()
    # the trace names the model file: the run's model is its name without `.gguf`
    assert f"### Run {run.id}: gemma — google_gemma-4-26B-A4B-it-Q4_K_M on imported" in part
    # headline (docs/routes.md §4 at its printed precision) under the §3 names
    assert "67 (52–97) of 128" in part and "`distinct_experts_mean" in part
    assert "53% (7576 of 14429 MiB)" in part
    assert _row(part, "token cycle T (k experts in every layer)")[1] == "676 MiB"
    assert _row(part, "decode hit in the trace (its residency column)")[1] == "81.9% at 4000 MiB"
    # predictors
    assert {name: _row(part, name)[2] for name in
            ("random", "temporal", "static", "prompt-static")} == \
        {"random": "4.7", "temporal": "35.7", "static": "39.6", "prompt-static": "26.8"}
    assert "2.64 GiB" in _row(part, "prompt-static k24")[3]
    # lag profile: lag 1 is the temporal predictor; random k/n last
    lags = _row(part, "35.7")
    assert len(lags) == 9 and lags[-1] == "4.7"
    # per-layer table: one row per MoE layer, layer 0 as `orch routes` gives it
    assert _row(part, "0")[1:5] == ["4.14", "78", "42.2", "32"]
    assert "experts for 80% median 24.5, min 17, max 49" in part
    # replay (the published curve, docs/routes.md §4): belady and layerlfu at 1000 MiB, LRU's
    # collapse under T
    assert _row(part, "1000")[1] == "65.699 / 35567.3"
    assert _row(part, "1000")[5] == "47.726 / 51305.9"
    assert _row(part, "250 (< T)")[2] == "0.000 / 92362.0"
    budgets = [line.split("|")[1].strip().split()[0] for line in part.splitlines()
               if re.match(r"\| \d+( \(< T\))? \| \d+\.\d{3} / ", line)]
    assert budgets == ["250", "500", "750", "1000", "1500", "2000", "2500", "3000", "4000",
                       "6000", "8000"]
    # the traced run is its own measured point, n said
    measured = part[part.index("**Measured cache hits**"):]
    assert _row(measured, "1")[1:6] == ["gemma (the traced run)", "4000", "76.8", "1", "76.8"]
    assert "deterministic" in part and "one measurement" in part


@pytest.mark.extra("plots")
@pytest.mark.slow   # shares the `traced` document (12 s to make) with the test above
def test_markdown_figures_are_valid_pngs_next_to_the_document(traced):
    part = _routing_part(traced["md"])
    links = re.findall(r"!\[[^\]]*\]\(([^)]+routing-run\d+-(\w+)\.png)\)", part)
    assert sorted(kind for _, kind in links) == sorted(KINDS)
    for link, _ in links:
        path = traced["doc"].parent / link
        assert path.parent.name == "doc_files"
        assert _is_png(path.read_bytes()), link
    # every figure has its caption printed under it
    assert "*Decode token × MoE layer: each cell is how many" in part
    assert "replayed offline" in part and "measured on the device in real runs" in part


@pytest.mark.extra("plots")
@pytest.mark.slow   # shares the `traced` document (12 s to make) with the test above
def test_html_embeds_the_routing_figures(traced):
    html = traced["html"]
    assert 'id="routing"' in html
    start = html.index('id="routing"')
    images = re.findall(r'<img src="data:image/png;base64,([^"]+)"', html[start:])
    assert len(images) >= len(KINDS)
    assert all(_is_png(base64.b64decode(data)) for data in images)
    assert "routing-run" not in html          # nothing linked to files beside the page
    assert "65.699 / 35567.3" in html


def test_report_without_traced_runs_has_no_routing_section(tmp_path):
    db = str(tmp_path / "orch.db")
    orch_ok("import", str(CACHE_DIR), "--db", db)
    doc = tmp_path / "doc.md"
    orch_ok("report", "--db", db, "-o", str(doc))
    text = doc.read_text(encoding="utf-8")
    assert "## Routing" not in text and "Cache replay" not in text
    assert not list((tmp_path / "doc_files").glob("routing-*.png"))


def test_a_trace_that_cannot_be_analysed_is_named_and_the_rest_renders(tmp_path,
                                                                       monkeypatch):
    db = str(tmp_path / "orch.db")
    orch_ok("import", str(TRACE_DIR), "--db", db)

    def broken(store, run_id):
        raise ValueError("layers have different numbers of routed experts")

    monkeypatch.setattr(context, "run_figures", broken)
    text = orch_ok("report", "--db", db, "--no-plots")
    part = _routing_part(text)
    assert "its route trace could not be analysed: layers have different numbers" in part
    assert "Cache replay" not in part and "## Provenance" in text


@pytest.mark.slow
def test_markdown_on_stdout_has_the_tables_without_figures(tmp_path):
    db = str(tmp_path / "orch.db")
    orch_ok("import", str(TRACE_DIR), "--db", db)
    for args in ((), ("--no-plots",)):
        part = _routing_part(orch_ok("report", "--db", db, *args))
        assert _row(part, "1000")[1] == "65.699 / 35567.3"
        assert "![" not in part


@pytest.fixture(scope="module")
def mixed(tmp_path_factory) -> tuple[Store, context.ReportData]:
    """One session: the Gemma trace (its own `model=` names it), two gemma runs with a 2000 MiB
    cache whose files name no model (lined up with the trace by --model) and one of another
    model (qwen), all from the fixtures."""
    root = tmp_path_factory.mktemp("mixed")
    folder = root / "gemma-cache"
    folder.mkdir()
    for suffix in (".route.csv", ".metrics", ".log"):
        shutil.copy(TRACE_DIR / f"gemma{suffix}", folder / f"gemma_trace{suffix}")
    for stem in ("gemma_base_ov", "gemma_sg_ov", "qwen_base_ov"):
        for path in CACHE_DIR.glob(f"{stem}.*"):
            shutil.copy(path, folder / path.name)
    db = str(root / "orch.db")
    orch_ok("import", str(folder), "--db", db, "--model",
            "gemma_*_ov.csv=google_gemma-4-26B-A4B-it-Q4_K_M.gguf")
    store = Store.open(db)
    return store, context.build(store, Runs(store).current(), keep_frames=False)


def test_measured_points_are_the_same_models_cache_runs(mixed):
    _store, data = mixed
    (traced,) = routing.traced_runs(data.runs)
    assert traced.row.config == "gemma_trace"
    points = routing.measured_points(data, traced)
    got = [(p.label, p.budget_mib, round(p.hit_pct, 1), p.n, p.traced) for p in points]
    assert got == [("gemma_trace", 4000.0, 76.8, 1, True),
                   ("gemma_base_ov", 2000.0, 58.0, 1, False),
                   ("gemma_sg_ov", 2000.0, 58.0, 1, False)]    # no qwen run
    assert [p.number for p in points] == [1, 2, 3]


@pytest.mark.slow
def test_section_compares_measured_points_with_the_replayed_lru(mixed):
    store, data = mixed
    (traced,) = routing.traced_runs(data.runs)
    section = routing.build_section(data, traced)
    lru = {p.label: round(p.replay_lru_cum, 2) for p in section.measured}
    assert lru == {"gemma_trace": 76.78, "gemma_base_ov": 58.27, "gemma_sg_ov": 58.27}
    table = routing.measured_table(section)
    assert table.column("measured cache hit %") == ["76.8", "58.0", "58.0"]
    assert table.column("n") == ["1", "1", "1"]


def test_runs_of_another_model_are_not_measured_points(mixed):
    _store, data = mixed
    qwen = next(r for r in data.runs if r.row.config == "qwen_base_ov")
    assert routing.model_names(qwen) == {"qwen"}
    (traced,) = routing.traced_runs(data.runs)
    assert "google_gemma-4-26B-A4B-it-Q4_K_M" in routing.model_names(traced)
    assert "google_gemma-4-26B-A4B-it-Q4_K_M.gguf" in routing.model_names(traced)


@pytest.mark.parametrize(("touched", "expect"), [
    (7576.0, [250, 500, 750, 1000, 1500, 2000, 2500, 3000, 4000, 6000, 8000]),
    (3500.0, [250, 500, 750, 1000, 1500, 2000, 2500, 3000, 4000]),
    (20000.0, [250, 500, 750, 1000, 1500, 2000, 2500, 3000, 4000, 6000, 8000, 12000, 16000,
               24000]),
])
def test_default_budgets_follow_what_the_trace_touches(touched, expect):
    assert routing.default_budgets(touched) == [float(b) for b in expect]


def test_default_budgets_scale_down_for_a_small_trace():
    budgets = routing.default_budgets(40.0)        # a tiny model: 40 MiB touched
    assert len(budgets) == 11 and budgets == sorted(budgets) and budgets[0] > 0
    assert budgets[-1] >= 40.0 > budgets[-2]


def test_figure_dir_is_next_to_the_document(tmp_path: Path):
    from orchestrator.report.document.plots import figure_dir

    assert figure_dir(None) is None
    assert figure_dir(tmp_path / "x.md") == tmp_path / "x_files"
    assert (tmp_path / "x_files").is_dir()
