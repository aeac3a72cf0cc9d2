"""llama.cpp engines against the REAL binaries: llama-completion, llama-bench and
orch's per-token llama-token, run through `orch run` on a local device with a tmp inventory.

They need `scripts/build-llama` (llama.cpp built into the cache, the bindings in the venv, the
`gguf` package). Without it they skip, except under CI=true, where a missing build FAILS: the
CI script builds first, and a green CI must mean these ran.

Over 400 lines on purpose: each llama.cpp engine end to end, sharing the built binaries and
model fixtures.
"""
from __future__ import annotations

import os
import re
import signal
import statistics
import textwrap
import threading
from pathlib import Path

import pytest
from ci import IN_CI, require_extra, unavailable
from cli_helpers import orch
from sqlalchemy import select
from waiting import wait_until

from orchestrator.db import schema
from orchestrator.db.runs import Runs
from orchestrator.db.store import Store
from orchestrator.record import load_record
from orchestrator.stats.divergence import divergence
from orchestrator.tools import llamacpp_build as lb

REPO = Path(__file__).resolve().parent.parent
PROMPT = "Hello experts, route this"


def need(what: str, ok: bool) -> None:
    if ok:
        return
    unavailable(f"{what} is missing: run scripts/build-llama")


@pytest.fixture(scope="module")
def build() -> lb.LlamaBuild:
    found = lb.find_build()
    need(f"llama.cpp {lb.LLAMA_CPP_VERSION} build in {lb.cache_dir()}", found is not None)
    assert found is not None
    return found


@pytest.fixture(scope="module")
def bindings(build: lb.LlamaBuild) -> None:
    need(f"llama-cpp-python {build.version} in this venv", lb.bindings_version() == build.version)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    require_extra("llama")   # gguf writes the model
    from orchestrator.tools.moe_model import make_moe

    return make_moe("tiny", tmp_path_factory.mktemp("models") / "tiny.gguf")


@pytest.fixture(scope="module")
def medium(tmp_path_factory) -> Path:
    require_extra("llama")   # gguf writes the model
    from orchestrator.tools.moe_model import make_moe

    return make_moe("medium", tmp_path_factory.mktemp("models") / "medium.gguf")




def run_matrix(workspace: Path, body: str, name: str = "m.yaml") -> tuple[int, str, dict]:
    path = workspace / name
    path.write_text(textwrap.dedent(body))
    code, out = orch("run", str(path))
    store = Store.open("orch.db")
    sessions = store.fetch(select(schema.session.c.id).order_by(schema.session.c.id.desc()))
    runs = {r.config: r for r in Runs(store).current(sessions[0].id)} if sessions else {}
    return code, out, runs


def completion_matrix(build: lb.LlamaBuild, model: Path, tokens: int = 24) -> str:
    kv = "--override-kv qwen3moe.expert_used_count=int:"
    return f"""\
        name: llama-completion-tiny
        engine: llama-completion
        binary: {build.binary('llama-completion')}
        models: {{tiny: {model}}}
        prompt: "{PROMPT}"
        tokens: {tokens}
        cooldown: 0
        configs:
          k1: -no-cnv --temp 0 -t 1 {kv}1
          k2: -no-cnv --temp 0 -t 1 {kv}2
          k2-t2: -no-cnv --temp 0 -t 2 {kv}2
        """


def token_matrix(model: Path, tokens: int = 24) -> str:
    return f"""\
        name: llama-token-tiny
        engine: llama-token
        engine_options: {{python: orch}}
        models: {{tiny: {model}}}
        prompt: "{PROMPT}"
        tokens: {tokens}
        cooldown: 0
        sample_interval: 0.2s
        configs:
          k1: --top-k-experts 1 -t 1
          k2: --top-k-experts 2 -t 1
          k2-t2: --top-k-experts 2 -t 2
          k2-nommap: --top-k-experts 2 -t 1 --no-mmap
        """


def printable(text: str) -> bool:
    return bool(text) and all(0x20 <= ord(c) < 0x7F for c in text)


# -- the adapters on the real binaries -------------------------------------------------------

def test_llama_completion_adapter(workspace, build, tiny):
    code, out, runs = run_matrix(workspace, completion_matrix(build, tiny))
    assert code == 0, out
    for run in runs.values():
        assert run.status == "ok" and run.engine == "llama-completion"
        r = load_record(run.summary)
        # eval runs = generated tokens - 1 (the first token comes out of the prompt eval)
        assert r.tokens == 23 and r.decode_tps > 0 and r.load_s > 0
        assert r.prompt_tokens >= len(PROMPT.split()) and r.prefill_tps > 0
        # this build logs no `build:` line during a run: the build comes from `--version`,
        # asked once per device ("0c1e570 (1, 0.5.0-dev)")
        assert r.complete is True and run.engine_build == r.engine_build
        assert re.fullmatch(r"[0-9a-f]{7,} \(\d+, \S+\)", run.engine_build), run.engine_build
        assert printable(run.text), run.text
    # greedy: threads change nothing in the text, top-k changes it
    assert divergence(runs["k2"].text, runs["k2-t2"].text) is None
    assert divergence(runs["k1"].text, runs["k2"].text) is not None


def test_llama_bench_adapter(workspace, build, tiny):
    code, out, runs = run_matrix(workspace, f"""\
        name: llama-bench-tiny
        engine: llama-bench
        binary: {build.binary('llama-bench')}
        models: {{tiny: {tiny}}}
        tokens: 16
        cooldown: 0
        configs:
          t1: -t 1 -r 3
          t1-pp: -t 1 -r 2 -p 32
        """)
    assert code == 0, out
    tg = load_record(runs["t1"].summary)
    assert runs["t1"].status == "ok" and tg.complete is True
    assert tg.tokens == 16 and tg.decode_tps > 0
    assert len(tg.extra["repetitions"]) == 3 and all(x > 0 for x in tg.extra["repetitions"])
    assert tg.engine_build and runs["t1"].engine_build == tg.engine_build
    pp = load_record(runs["t1-pp"].summary)
    assert pp.prompt_tokens == 32 and pp.prefill_tps > 0 and pp.decode_tps > 0


@pytest.mark.slow
def test_llama_token_engine(workspace, build, bindings, tiny):
    code, out, runs = run_matrix(workspace, token_matrix(tiny))
    assert code == 0, out
    store = Store.open("orch.db")
    for run in runs.values():
        assert run.status == "ok" and run.engine == "llama-token"
        assert len(store.frame("token", [run.id])) == 24
        r = load_record(run.summary)
        assert r.complete is True and r.errors == []
        assert r.tokens == 24 and r.decode_tps > 0
        assert r.extra["trailer"]["llama_n_eval"] == 24          # llama.cpp's own counters agree
        assert r.extra["lines"]["generation"]["tokens"] == 24
        assert r.settings["arch"] == "qwen3moe" and r.settings["n_expert"] == 8
        assert run.engine_build.startswith("llama-token (llama-cpp-python ")
        assert printable(run.text), run.text
        samples = store.fetch(select(schema.sample).where(schema.sample.c.run_id == run.id))
        assert samples, "the agent sampled the engine's pressure"
    assert runs["k1"].summary["settings"]["n_expert_used"] == 1
    assert runs["k2-nommap"].summary["settings"]["mmap"] == 0
    texts = {c: r.text for c, r in runs.items()}
    div = {config: divergence(texts["k2"], text) for config, text in texts.items()}
    assert div["k2-t2"] is None and div["k2-nommap"] is None
    assert isinstance(div["k1"], int)
    code, out = orch("show", str(runs["k2"].id))
    assert code == 0 and "mean tok/s" in out


@pytest.mark.slow
def test_llama_token_route_trace(workspace, build, bindings, tiny):
    """route_trace: true captures llama.cpp's real routing (its ffn_moe_topk tensors through
    the graph evaluation callback): one row per routed expert, k per (phase, step, layer)."""
    code, out, runs = run_matrix(workspace, f"""\
        name: llama-token-routes
        engine: llama-token
        engine_options: {{python: orch}}
        models: {{tiny: {tiny}}}
        prompt: "{PROMPT}"
        tokens: 12
        cooldown: 0
        sample_interval: 0.2s
        route_trace: true
        configs:
          k2: --top-k-experts 2 -t 1
          k3-b4: --top-k-experts 3 -t 1 -b 4
          plain: {{flags: --top-k-experts 2 -t 1, route_trace: false}}
        """)
    assert code == 0, out
    store = Store.open("orch.db")
    for config, k in (("k2", 2), ("k3-b4", 3)):
        run = runs[config]
        assert run.status == "ok", run.cause
        assert not [w for w in run.warnings or [] if w.startswith("route trace")], run.warnings
        record = load_record(run.summary)
        meta = record.route_trace["preamble"]
        assert (meta["arch"], meta["n_layer"], meta["n_expert"], meta["n_expert_used"]) == \
            ("qwen3moe", 4, 8, k)
        one_expert = 3 * 256 * 128 * 2             # gate + up + down of one f16 expert
        assert record.route_trace["layer_bytes"] == {
            str(layer): [one_expert, record.route_trace["layer_bytes"]["0"][1]]
            for layer in range(4)}
        rows = store.route_frame(run.id)
        cells = rows.groupby(["phase", "step", "layer"])
        assert (cells.size() == k).all() and (cells["expert"].nunique() == k).all()
        assert rows["expert"].between(0, 7).all()
        assert set(rows["layer"]) == {0, 1, 2, 3} and (rows["residency"] == 0).all()
        decode = rows[rows["phase"] == 1]
        sums = decode.groupby(["step", "layer"])["weight"].sum()
        assert ((sums - 1).abs() < 1e-3).all(), sums
        n_pre = int(record.prompt_tokens) - 1          # the prompt but its last token
        assert sorted(decode["step"].unique()) == list(range(n_pre, n_pre + 12))
        assert (decode.groupby("step")["layer"].nunique() == 4).all()
        assert (decode["expert_bytes"] == one_expert).all()
        prefill = rows[rows["phase"] == 0]
        assert sorted(prefill.loc[prefill["layer"] == 0, "step"].unique()) == list(range(n_pre))
        # the last layer keeps only each prefill batch's output token (its last)
        batches = 1 if config == "k2" else -(-n_pre // 4)
        assert prefill.loc[prefill["layer"] == 3, "step"].nunique() == batches
        code, text = orch("routes", str(run.id), "--format", "json")
        assert code == 0, text
        assert '"decode_tokens": 12' in text and f'"top_k": {k}' in text
    assert store.route_frame(runs["plain"].id).empty
    assert runs["plain"].text == runs["k2"].text    # the callback observes, never changes


@pytest.mark.slow
def test_llama_token_text_matches_llama_completion(workspace, build, bindings, tiny):
    """The same greedy decoding through the bindings and through llama-completion."""
    _, out1, comp = run_matrix(workspace, completion_matrix(build, tiny), "c.yaml")
    _, out2, tok = run_matrix(workspace, token_matrix(tiny), "t.yaml")
    assert comp["k1"].status == tok["k1"].status == "ok", out1 + out2
    assert divergence(comp["k1"].text, tok["k1"].text) is None
    assert divergence(comp["k2"].text, tok["k2"].text) is None


# -- speed follows the experts used ----------------------------------------------------------

@pytest.mark.slow
def test_tok_s_falls_as_top_k_rises(workspace, build, bindings, medium):
    code, out, _ = run_matrix(workspace, f"""\
        name: topk-speed
        engine: llama-token
        engine_options: {{python: orch}}
        models: {{medium: {medium}}}
        prompt: "{PROMPT}"
        tokens: 48
        repeat: 2
        order: interleaved
        cooldown: 0
        configs:
          k1: --top-k-experts 1 -t 1
          k8: --top-k-experts 8 -t 1
        """)
    assert code == 0, out
    store = Store.open("orch.db")
    tps: dict[str, list[float]] = {"k1": [], "k8": []}
    for run in Runs(store).current():
        rows = store.fetch(select(schema.token.c.wall_ms).where(schema.token.c.run_id == run.id))
        tps[run.config] += [1000.0 / r.wall_ms for r in rows if r.wall_ms]
    k1, k8 = statistics.median(tps["k1"]), statistics.median(tps["k8"])
    # 8 experts do 8x the expert work of 1; measured about 5x here. Ask for 1.5x: robust to a
    # busy machine, still far above run-to-run noise.
    assert k1 > 1.5 * k8, (k1, k8)


# -- failures are recorded with the engine's stderr ------------------------------------------

def test_corrupt_model_fails_with_stderr_tail(workspace, build, bindings, tiny):
    broken = workspace / "broken.gguf"
    broken.write_bytes(tiny.read_bytes()[:100_000])   # header fine, tensor data cut
    bounds = "not within the file bounds"   # llama.cpp's loader error
    for engine, binary, says in (
            ("llama-completion", f"binary: {build.binary('llama-completion')}", bounds),
            # llama-bench silences llama.cpp's log and prints only its own line
            ("llama-bench", f"binary: {build.binary('llama-bench')}", "failed to load model"),
            ("llama-token", "engine_options: {python: orch}", bounds)):
        code, out, runs = run_matrix(workspace, f"""\
            name: broken-{engine}
            engine: {engine}
            {binary}
            models: {{broken: {broken}}}
            prompt: hi
            tokens: 8
            configs:
              only: -t 1
            """, f"{engine}.yaml")
        assert code == 1, out
        run = runs["only"]
        assert run.status == "failed" and run.rc not in (0, None), engine
        tail = "\n".join(run.summary["stderr_tail"])
        assert says in tail, (engine, tail)
        assert run.summary["complete"] is False
        assert "†" in out


def _kill_when(predicate, timeout: float) -> int | None:
    """SIGKILL the engine of the first job whose files satisfy predicate(jobdir), once that
    happens within `timeout` s; its pid (None: it never did)."""
    killed: list[int] = []

    def kill() -> bool:
        for pid_file in Path("dev-local").glob("runs/*/engine.pid"):
            pid = pid_file.read_text().strip()
            if pid and predicate(pid_file.parent):
                os.kill(int(pid), signal.SIGKILL)
                killed.append(int(pid))
                return True
        return False
    wait_until(kill, timeout)
    return killed[0] if killed else None


def _csv_rows(jobdir: Path) -> int:
    csv = jobdir / "tokens.csv"
    return csv.read_text().count("\n") - 4 if csv.exists() else 0


def test_llama_token_killed_mid_way(workspace, build, bindings, tiny):
    killed: list[int | None] = []
    t = threading.Thread(target=lambda: killed.append(
        _kill_when(lambda d: _csv_rows(d) >= 20, 60)))
    t.start()
    code, out, runs = run_matrix(workspace, f"""\
        name: killed-token
        engine: llama-token
        engine_options: {{python: orch}}
        models: {{tiny: {tiny}}}
        prompt: hi
        tokens: 20000
        timeout: 120s
        configs:
          victim: -t 1
        """)
    t.join()
    assert killed and killed[0], "the engine was never seen running"
    assert code == 1, out
    run = runs["victim"]
    assert run.status == "killed" and run.signal == 9
    n = len(Store.open("orch.db").frame("token", [run.id]))
    assert 20 <= n < 20000                          # the rows before the kill are kept
    s = run.summary
    assert s["complete"] is False and any("no '# summary' trailer" in e for e in s["errors"])
    assert any("llama-token: loaded" in line for line in s["stderr_tail"])


def test_llama_completion_killed_mid_way(workspace, build, tiny):
    def generating(jobdir: Path) -> bool:
        out = jobdir / "stdout"
        return out.exists() and out.stat().st_size >= 50

    killed: list[int | None] = []
    t = threading.Thread(target=lambda: killed.append(
        _kill_when(generating, 60)))
    t.start()
    code, out, runs = run_matrix(workspace, f"""\
        name: killed-completion
        engine: llama-completion
        binary: {build.binary('llama-completion')}
        models: {{tiny: {tiny}}}
        prompt: hi
        tokens: 30000
        timeout: 120s
        configs:
          victim: -no-cnv --temp 0 -t 1 -c 32768
        """)
    t.join()
    assert killed and killed[0], "llama-completion never printed text"
    assert code == 1, out
    run = runs["victim"]
    assert run.status == "killed" and run.signal == 9
    s = run.summary
    assert s["complete"] is False and s["errors"]
    assert s["stderr_tail"], "llama.cpp's log before the kill is kept"
    assert run.text and printable(run.text)


# -- the acceptance path: what the README says, end to end -----------------------------------

@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_llama_local_matrix_end_to_end(workspace):
    """`orch engines build llama.cpp`, `orch models make-moe --size medium`, then
    `orch run matrices/llama-local.yaml` on `local`. Outside CI it skips when llama.cpp was
    never built (the build takes minutes); under CI=true it builds if needed and must pass."""
    if lb.find_build() is None and not IN_CI:
        pytest.skip("llama.cpp not built: run scripts/build-llama")
    require_extra("llama")   # gguf writes the model
    code, out = orch("engines", "build", "llama.cpp")
    assert code == 0, out
    code, out = orch("models", "make-moe", "--size", "medium")
    assert code == 0, out
    code, out = orch("run", str(REPO / "matrices" / "llama-local.yaml"))
    assert code == 0, out
    store = Store.open("orch.db")
    runs = Runs(store).current()
    assert len(runs) == 16 and all(r.status == "ok" for r in runs)
    assert all(len(store.frame("token", [r.id])) == 128 for r in runs)
    texts = {r.config: r.text for r in runs}
    base = texts["mmap+top-k-experts=4,t=2"]
    div = {config: divergence(base, text) for config, text in texts.items()}
    for config, where in div.items():
        if "top-k-experts=4," in config:
            assert where is None, (config, where)       # threads and mmap: the same text
        else:
            assert isinstance(where, int), (config, where)  # another k: departs somewhere
    tps = {r.config: load_record(r.summary).decode_tps for r in runs}
    assert tps["mmap+top-k-experts=1,t=1"] > tps["mmap+top-k-experts=8,t=1"]
    # the report: tok/s per config, the divergence column against the baseline
    code, out = orch("report", "-o", "llama.md", "--no-plots")
    assert code == 0, out
    report = Path("llama.md").read_text()
    assert "text departs at" in report and "| identical |" in report
    # every config also answered the quality probes (random weights: wrong)
    assert "**Quality beside speed**" in report
    code, out = orch("quality", "--matrix", "llama-local")
    assert code == 0 and len(re.findall(r"\(\d/3\) \|", out)) == 16, out
    # llama-bench's own repetitions give the spread next to its mean
    code, out = orch("run", str(REPO / "matrices" / "llama-bench-local.yaml"))
    assert code == 0, out
    code, out = orch("report", "--matrix", "llama-bench-local", "-o", "bench.md", "--no-plots")
    assert code == 0, out
    assert "(n=5 repetitions)" in Path("bench.md").read_text()
