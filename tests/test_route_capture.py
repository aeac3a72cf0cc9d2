"""Route traces captured by orch's own engines: moe-probe's routing (a
per-layer popularity skew, a token-to-token locality) written as `# route_trace v1`, the
adapters' `--route-trace PATH`, and `orch run` storing a traced cell's rows for `orch routes`.
llama-token's capture from llama.cpp is tested with the other llama.cpp engines
(test_llama_engine.py), where the build and the tiny model are.
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from cli_helpers import orch

from orchestrator.db.runs import Runs
from orchestrator.db.store import Store
from orchestrator.engines.base import CellSpec
from orchestrator.engines.bmoe import BmoeAdapter
from orchestrator.engines.llama_token import LlamaTokenAdapter
from orchestrator.engines.moe_probe import MoeProbeAdapter
from orchestrator.record import load_record
from orchestrator.engines.route_trace import RouteTrace, read_route_trace
from orchestrator.results.routes import routing_figures

PROBE = Path(__file__).resolve().parents[1] / "agent" / "moe_probe.py"
L, E, K, SIZE = 6, 64, 4, 64 * 1024
PROMPT = "one two three four five six"        # moe-probe: one prefill pass per word
GEOMETRY = ["--layers", str(L), "--experts", str(E), "--top-k", str(K), "--expert-mb", "0.0625",
            "--compute-kb", "1", "-p", PROMPT]


def probe(tmp_path: Path, name: str, *flags: str, tokens: int = 60,
          trace: bool = True) -> tuple[RouteTrace | None, Path, str]:
    """(parsed trace, per-token CSV, generated text) of one moe-probe run."""
    out = tmp_path / name
    argv = [sys.executable, str(PROBE), "--cache-dir", str(tmp_path / "cache"), *GEOMETRY,
            "-n", str(tokens), "--csv", str(out.with_suffix(".csv")), *flags]
    if trace:
        argv += ["--route-trace", str(out.with_suffix(".route.csv"))]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 0, r.stderr
    parsed = read_route_trace(out.with_suffix(".route.csv")) if trace else None
    return parsed, out.with_suffix(".csv"), r.stdout.split("\n\n")[0]  # the text, no timings


def csv_read_bytes(path: Path) -> list[int]:
    lines = path.read_text().splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("step,"))
    return [int(line.split(",")[5]) for line in lines[header + 1:] if not line.startswith("#")]


# -- moe-probe's trace ------------------------------------------------------------------------

def test_probe_trace_format_order_weights_and_residency(tmp_path):
    trace, csv, _ = probe(tmp_path, "t", "--cache-mb", "4", "--skew", "1", tokens=20)
    assert trace is not None
    assert trace.preamble["arch"] == "moe-probe"
    assert trace.preamble["model"] == f"experts-L{L}-E{E}-64k.bin"
    assert (trace.preamble["n_layer"], trace.n_expert, trace.top_k) == (L, E, K)
    assert trace.layer_bytes == {layer: (SIZE, 0) for layer in range(L)}
    rows = trace.rows
    n_prompt = len(PROMPT.split())
    assert len(rows) == (n_prompt + 20) * L * K           # one row per routed expert
    # prefill first, in (layer, step, slot) order; then decode in (step, layer, slot) order
    phases = rows["phase"].tolist()
    assert phases == sorted(phases)
    prefill, decode = rows[rows["phase"] == 0], rows[rows["phase"] == 1]
    order = ["layer", "step", "slot"]
    assert prefill[order].equals(prefill.sort_values(order)[order])
    assert decode[["step", "layer", "slot"]].equals(
        decode.sort_values(["step", "layer", "slot"])[["step", "layer", "slot"]])
    assert sorted(prefill["step"].unique()) == list(range(n_prompt))
    assert sorted(decode["step"].unique()) == list(range(n_prompt, n_prompt + 20))
    cells = rows.groupby(["phase", "step", "layer"])
    assert (cells["expert"].nunique() == K).all()          # k distinct experts per cell
    assert ((cells["weight"].sum() - 1).abs() < 1e-5).all()  # weights sum to 1 per cell
    assert (cells["weight"].apply(lambda w: w.is_monotonic_decreasing)).all()  # rank order
    # residency is the LRU's: a miss reads the expert, a hit nothing; per decode step the
    # bytes the trace charges are the bytes the per-token CSV says were read
    assert ((rows["residency"] == 0) == (rows["expert_bytes"] == SIZE)).all()
    assert ((rows["residency"] == 1) == (rows["expert_bytes"] == 0)).all()
    assert (rows["residency"] == 1).any() and (rows["residency"] == 0).any()
    per_step = decode.groupby("step")["expert_bytes"].sum().tolist()
    assert per_step == csv_read_bytes(csv)


def test_more_skew_concentrates_routing(tmp_path):
    figures = [routing_figures(probe(tmp_path, f"s{s}", "--skew", s)[0])
               for s in ("0", "0.8", "1.6")]
    top8 = [f["top8_share_mean_pct"] for f in figures]
    for_80 = [f["experts_for_80pct_median"] for f in figures]
    assert top8 == sorted(top8) and top8[0] < top8[-1] - 15, top8
    assert for_80 == sorted(for_80, reverse=True) and for_80[0] > for_80[-1] + 8, for_80
    # the skew concentrates popularity; the locality stays what --keep-frac says
    for f in figures:
        assert 26 < f["pred_temporal_pct"] < 46, f["pred_temporal_pct"]


def test_keep_frac_sets_the_token_to_token_overlap(tmp_path):
    low = routing_figures(probe(tmp_path, "k1", "--keep-frac", "0.1", "--skew", "1")[0])
    high = routing_figures(probe(tmp_path, "k7", "--keep-frac", "0.7", "--skew", "1")[0])
    assert low["pred_temporal_pct"] < 25 and high["pred_temporal_pct"] > 60
    assert low["overlap_lag1_pct"] < high["overlap_lag1_pct"]


@pytest.mark.slow
def test_routing_deterministic_and_tracing_changes_nothing(tmp_path):
    a, _, text_a = probe(tmp_path, "a", "--skew", "1.2", "--seed", "3")
    _, _, text_b = probe(tmp_path, "b", "--skew", "1.2", "--seed", "3")
    assert (tmp_path / "a.route.csv").read_text() == (tmp_path / "b.route.csv").read_text()
    _, _, untraced = probe(tmp_path, "c", "--skew", "1.2", "--seed", "3", trace=False)
    assert text_a == text_b == untraced                   # the trace observes, never routes
    _, _, no_flag = probe(tmp_path, "d", "--seed", "3", trace=False)
    _, _, zero = probe(tmp_path, "e", "--seed", "3", "--skew", "0", trace=False)
    assert no_flag == zero != untraced                    # skew 0 is the old routing
    seed4, _, _ = probe(tmp_path, "f", "--skew", "1.2", "--seed", "4")
    assert not seed4.rows["expert"].equals(a.rows["expert"])


def test_skew_out_of_range_is_a_usage_error(tmp_path):
    r = subprocess.run([sys.executable, str(PROBE), "--skew", "-1"], capture_output=True,
                       text=True, timeout=30, check=False)
    assert r.returncode == 2 and "--skew" in r.stderr


# -- adapters ---------------------------------------------------------------------------------

@pytest.mark.parametrize("adapter", [MoeProbeAdapter(), LlamaTokenAdapter(), BmoeAdapter()])
def test_adapters_add_route_trace_only_when_asked(adapter):
    spec = CellSpec(binary="/b", model_path="/m.gguf", prompt="p", tokens=4, flags=["-t", "1"],
                    csv_path="/j/tokens.csv", extra={"workdir": "/w"})
    assert "--route-trace" not in adapter.build_argv(spec)
    spec.route_trace_path = "/j/route.csv"
    argv = adapter.build_argv(spec)
    assert argv[argv.index("--route-trace") + 1] == "/j/route.csv"
    assert argv.count("--route-trace") == 1


# -- orch run ---------------------------------------------------------------------------------

GEOM = "--layers 4 --experts 32 --expert-mb 0.0625 --top-k 4 --compute-kb 1 --cache-mb 1"


def run_matrix(workspace: Path, body: str) -> tuple[int, str, Store, dict]:
    path = workspace / "m.yaml"
    path.write_text(textwrap.dedent(body))
    code, out = orch("run", str(path))
    store = Store.open("orch.db")
    return code, out, store, {r.config: r for r in Runs(store).current()}


@pytest.mark.slow
def test_orch_run_stores_traces_and_orch_routes_reads_them(workspace):
    code, out, store, runs = run_matrix(workspace, f"""\
        name: traced
        engine: moe-probe
        prompt: one two three
        tokens: 40
        cooldown: 0
        sample_interval: 0.2s
        route_trace: true
        configs:
          uniform: --skew 0 {GEOM}
          skewed: --skew 1.5 {GEOM}
          plain: {{flags: "--skew 1.5 {GEOM}", route_trace: false}}
        """)
    assert code == 0, out
    assert all(r.status == "ok" for r in runs.values()), out
    assert not [w for r in runs.values() for w in r.warnings or [] if w.startswith("route")]
    figures = {}
    for config in ("uniform", "skewed"):
        run = runs[config]
        rows = store.route_frame(run.id)
        assert len(rows) == (3 + 40) * 4 * 4
        meta = load_record(run.summary).route_trace
        assert meta["preamble"]["arch"] == "moe-probe" and meta["preamble"]["n_expert"] == 32
        code, text = orch("routes", str(run.id), "--format", "json")
        assert code == 0, text
        figures[config] = json.loads(text)
        assert figures[config]["decode_tokens"] == 40 and figures[config]["top_k"] == 4
        assert figures[config]["summary_tok_s"] > 0                  # with its `# summary`
    assert figures["skewed"]["top8_share_mean_pct"] > figures["uniform"]["top8_share_mean_pct"]
    assert (figures["skewed"]["experts_for_80pct_median"]
            < figures["uniform"]["experts_for_80pct_median"])
    # a config's own `route_trace: false` wins over the matrix's: no trace, the same routing
    assert store.route_frame(runs["plain"].id).empty
    assert runs["plain"].text == runs["skewed"].text
    assert "--route-trace" not in runs["plain"].argv and "--route-trace" in runs["skewed"].argv


def test_missing_or_unparsable_trace_is_a_warning_not_a_lost_run(workspace):
    fake = workspace / "fake_bmoe.sh"
    (workspace / "tracing_bmoe.sh").write_text(textwrap.dedent(f"""\
        #!/bin/sh
        # fake_bmoe, which writes no trace; with --garbage-trace a file that is none
        trace=""; garbage=""; prev=""
        for a in "$@"; do
          [ "$prev" = --route-trace ] && trace=$a
          [ "$a" = --garbage-trace ] && garbage=1
          prev=$a
        done
        [ -n "$garbage" ] && echo "not a route trace" > "$trace"
        exec sh {fake} "$@"
        """))
    code, out, store, runs = run_matrix(workspace, """\
        name: traced-bmoe
        engine: bmoe
        binary: {local: tracing_bmoe.sh}
        models: {m: /m.gguf}
        prompt: p
        tokens: 4
        cooldown: 0
        sample_interval: 0.2s
        route_trace: true
        configs:
          none: --delay 0.001
          garbage: --delay 0.001 --garbage-trace
        """)
    assert code == 0, out
    for config, says in (("none", "wrote no"), ("garbage", "line 1: expected")):
        run = runs[config]
        assert run.status == "ok" and load_record(run.summary).tokens == 4
        assert any(w.startswith("route trace:") and says in w for w in run.warnings), run.warnings
        assert store.route_frame(run.id).empty
        assert "route_trace" not in load_record(run.summary).extra


@pytest.mark.slow
def test_example_matrix_traces_every_config(workspace):
    """matrices/routes.yaml, as shipped: both configs traced, and it runs in seconds."""
    matrix = Path(__file__).resolve().parents[1] / "matrices" / "routes.yaml"
    code, out = orch("run", str(matrix))
    assert code == 0, out
    store = Store.open("orch.db")
    runs = {r.config: r for r in Runs(store).current()}
    assert set(runs) == {"uniform", "skewed"}
    figures = {c: routing_figures(RouteTrace.from_stored(
        load_record(r.summary).route_trace, store.route_frame(r.id)))
        for c, r in runs.items()}
    assert figures["skewed"]["top8_share_mean_pct"] > figures["uniform"]["top8_share_mean_pct"]
