"""`orch table` over a two-model matrix run (csv, json, md), model facts from a GGUF header
and from a bmoe CSV preamble, human-readable labels and the two-flag pivot."""
from __future__ import annotations

import json
import sys
import textwrap
from io import StringIO

import numpy as np
import pandas as pd
import pytest
from ci import require_extra
from cli_helpers import orch_ok
from test_analysis_oracle import FIX, md_cells

from orchestrator.config.matrix import Matrix
from orchestrator.report.format import grid
from orchestrator.results.model_facts import ModelFacts, _read_kv, gguf_header


def write_gguf(path, layers=4, experts=8, used=2) -> None:
    """A small qwen3moe GGUF: the keys the facts need, a vocabulary array of strings and an
    array of numbers before them (the reader must skip both), one tensor."""
    require_extra("llama")   # gguf writes the test's GGUF files
    import gguf

    w = gguf.GGUFWriter(str(path), "qwen3moe")
    w.add_name("tiny")
    w.add_token_list(["a", "bb", "ccc"] * 50)
    w.add_token_types([1] * 150)
    w.add_block_count(layers)
    w.add_expert_count(experts)
    w.add_expert_used_count(used)
    w.add_tensor("t", np.ones(4, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_gguf_header_with_and_without_the_gguf_package(tmp_path, monkeypatch):
    path = tmp_path / "m.gguf"
    write_gguf(path)
    want = {"arch": "qwen3moe", "layers": 4, "experts": 8, "top_k": 2}
    assert gguf_header(path) == want
    monkeypatch.setitem(sys.modules, "gguf", None)          # `import gguf` fails
    assert gguf_header(path) == want
    assert _read_kv(path)["general.name"] == "tiny"
    (tmp_path / "bad.gguf").write_bytes(b"GGML" + bytes(20))
    with pytest.raises(ValueError):
        gguf_header(tmp_path / "bad.gguf")


def test_facts_line():
    facts = ModelFacts("q", size_bytes=18_556_682_240, arch="qwen3moe", layers=48,
                       experts=128, top_k=(8,), ram_kb=11_036_136)
    # both sizes in GiB beside the ratio, so it reads off (the header shows RAM in GiB too)
    assert facts.line() == ("qwen3moe, 48 layers, 128 experts, top-8, 18.6 GB (17.3 GiB); "
                            "≈1.64× device RAM (10.5 GiB)")
    assert ModelFacts("x").line() == "" and ModelFacts("x").as_dict()["ram_ratio"] is None


def test_pivot_of_a_two_flag_grid():
    m = Matrix.model_validate({"name": "g", "engine": "bmoe",
                               "grid": {"--top-k": [2, 4], "--threads": [1, 2, 4]}})
    names = m.config_names()
    means = dict(zip(names, [1.0, 2.0, 3.0, 4.0, None, 6.0]))
    table = grid.pivot(m, means)
    assert table.headers == ["top-k ↓ threads →", "1", "2", "4"]
    assert table.rows == [["2", "1.00", "2.00", "3.00"], ["4", "4.00", "—", "6.00"]]
    assert grid.pivot(m, {}) is None
    one = Matrix.model_validate({"name": "g", "engine": "bmoe", "grid": {"--top-k": [2, 4]}})
    assert grid.pivot(one, {"top-k=2": 1.0}) is None and grid.pivot(None, means) is None


TWO_MODELS = """\
    name: two-models
    engine: bmoe
    binary: {{local: fake_bmoe.sh}}
    models: {{qa: {{local: qa.gguf}}, qb: {{local: qb.gguf}}}}
    prompt: p
    tokens: 24
    cooldown: 0
    sample_interval: 0.2s
    labels: {{"delay=0,x=1": "fast, x1"}}
    grid:
      --delay: [0, 0.001]
      --x: [1, 2]
    """


@pytest.mark.slow
def test_two_models_by_two_configs_csv_json_md(workspace):
    write_gguf(workspace / "qa.gguf", layers=4, experts=8, used=2)
    write_gguf(workspace / "qb.gguf", layers=6, experts=16, used=4)
    (workspace / "m.yaml").write_text(textwrap.dedent(TWO_MODELS.format()))
    orch_ok("run", "m.yaml")

    # csv and json: every run once (this crashed with "Length of values (4) does not match
    # length of index (2)": same config names in two models)
    csv = pd.read_csv(StringIO(orch_ok("table", "--format", "csv")))
    runs = csv[csv.table == "throughput"]
    assert len(runs) == 8 and runs.run_id.is_unique
    assert sorted(zip(runs.model, runs.config)) == sorted(
        (m, c) for m in ("qa", "qb") for c in ("delay=0,x=1", "delay=0,x=2",
                                                "delay=0.001,x=1", "delay=0.001,x=2"))
    assert set(runs[runs.config == "delay=0,x=1"].label) == {"fast, x1"}
    rows = json.loads(orch_ok("table", "--format", "json"))
    tput = [r for r in rows if r["table"] == "throughput"]
    assert len(tput) == 8
    for key in ("p5", "compute_s_per_token", "io_s_per_token"):
        assert all(isinstance(r[key], float) for r in tput), key
    # the stall is in the detail table (prefill, TTFT, stall); moe-probe reads serially, so
    # it reports no overlapped stall: null, never 0
    detail = [r for r in rows if r["table"] == "detail"]
    assert len(detail) == 8 and all(r["stall_ms_per_token"] is None for r in detail)
    lat = [r for r in rows if r["table"] == "latency"]
    assert all(r["latency_p99_ms"] >= r["latency_p90_ms"] >= r["latency_p50_ms"] > 0
               for r in lat)
    # the fake engine gets 1 ms slower every token: it never settles, and no steady state is
    # claimed
    assert all(r["steady_from_token"] is None and r["steady_mean"] is None for r in lat)
    models = {r["model"]: r for r in rows if r["table"] == "model"}
    assert (models["qa"]["arch"], models["qa"]["layers"], models["qa"]["experts"],
            models["qa"]["top_k"]) == ("qwen3moe", 4, 8, [2])
    assert models["qb"]["layers"] == 6 and models["qb"]["size_bytes"] == \
        (workspace / "qb.gguf").stat().st_size
    assert models["qb"]["ram_kb"] > 0 and 0 < models["qb"]["ram_ratio"] < 1e-3

    md = orch_ok("table")
    assert md.count("### qa on local") == 1 and md.count("### qb on local") == 1
    assert "Model: qwen3moe, 6 layers, 16 experts, top-4, " in md
    assert "under 0.01× device RAM" in md and "0.00×" not in md and "0.0 GB" not in md
    cells = md_cells(md)
    assert cells[("qa on local", "fast, x1", "p5")] != "—"
    assert cells[("qb on local", "delay=0.001,x=2", "decode: compute + I/O (s/tok)")] \
        == "0.060 + 0.040"
    # the grid as a pivot, per model: delay down, x across
    assert md.count("**Mean tok/s by delay × x**:") == 2
    assert "| delay ↓ x → | 1 | 2 |" in md
    # the report's model sections open with the same facts and carry the same pivot
    report = orch_ok("report", "--no-plots")
    # the report says where the facts came from (the GGUF header) before them
    assert report.count("(from the GGUF header") == 2
    assert report.count("**Mean tok/s by delay × x**:") == 2


def test_imported_session_facts_from_the_preamble(db_path):
    orch_ok("import", str(FIX / "2026-07-17"), "--db", db_path)
    md = orch_ok("table", "--db", db_path, "-t", "throughput,detail")
    assert "### Qwen3-30B-A3B-Q4_K_M on " in md
    assert "Model: qwen3moe, 48 layers, 128 experts, top-6/8\n" in md
    assert "Model: gpt-oss, 36 layers, 128 experts, top-2/4\n" in md
    # majflt/token is in these CSVs, so its column is shown
    assert "| majflt/token |" in md
    rows = json.loads(orch_ok("table", "--db", db_path, "--format", "json", "-t", "model"))
    assert {r["arch"] for r in rows} == {"qwen3moe", "gemma4", "gpt-oss"}


@pytest.fixture
def db_path(tmp_path):
    return str(tmp_path / "orch.db")
