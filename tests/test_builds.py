"""Engine builds as first-class: the build cache records each version's llama.cpp commit, a
matrix names a cached build (`binary: {build: llama.cpp@V}`), `orch compare --builds A B`
compares two builds config by config (failed vs never run told apart), the report's
regressions section, and the real thing: one llama-bench matrix on two llama.cpp builds."""
from __future__ import annotations

import datetime as dt
import hashlib
import json
import textwrap
from pathlib import Path

import pytest
from ci import unavailable
from cli_helpers import orch, orch_ok

from orchestrator.config.matrix import load_matrix
from orchestrator.db.runs import Runs
from orchestrator.errors import ConfigError
from orchestrator.db import schema
from orchestrator.db.store import Store
from orchestrator.tools import llamacpp_build as lb

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
CHANGELOG = """\
# Changelog

## [Unreleased]

## [0.3.31]

- fix: something without a llama.cpp update

## [0.3.30]

- feat: update llama.cpp to ggml-org/llama.cpp@e3a74b299
- feat: add Pyodide wheel support

## [0.3.29]

- feat: update llama.cpp to ggml-org/llama.cpp@f05cf4676
"""


def test_changelog_commit():
    assert lb.changelog_commit(CHANGELOG, "0.3.30") == "e3a74b299"
    assert lb.changelog_commit(CHANGELOG, "0.3.31") == "e3a74b299"   # inherited
    assert lb.changelog_commit(CHANGELOG, "0.3.29") == "f05cf4676"
    assert lb.changelog_commit(CHANGELOG, "9.9.9") is None


def test_matrix_names_a_cached_build(tmp_path, monkeypatch):
    monkeypatch.setenv("ORCH_LLAMA_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "m.yaml"
    path.write_text("name: m\nengine: llama-bench\nbinary: {build: llama.cpp@0.3.30}\n"
                    "models: {m: /x.gguf}\nconfigs: {a: -t 1}\n")
    assert load_matrix(path).matrix.binary.device == \
        str(tmp_path / "cache" / "0.3.30" / "bin" / "llama-bench")
    path.write_text(path.read_text().replace("llama-bench\n", "llama-cli\n", 1))
    assert load_matrix(path).matrix.binary.device.endswith("/0.3.30/bin/llama-completion")
    for bad, says in (("llama.cpp0.3.30", "expected llama.cpp@VERSION"),
                      ("llama.cpp@../x", "expected llama.cpp@VERSION")):
        path.write_text(f"name: m\nengine: llama-bench\nbinary: {{build: '{bad}'}}\n"
                        "configs: {a: -t 1}\n")
        with pytest.raises(ConfigError, match=says):
            load_matrix(path)
    path.write_text("name: m\nengine: bmoe\nbinary: {build: llama.cpp@0.3.30}\n"
                    "configs: {a: -t 1}\n")
    with pytest.raises(ConfigError, match="has no binary in a llama.cpp build"):
        load_matrix(path)


def add_session(store: Store, k: int, runs: dict[str, list[tuple[float, str]]], build: str,
                matrix: str = "bench", device: str = "d") -> int:
    """Session `k` on `device` whose runs have constant per-token times (mean tok/s exactly
    as given) and the binary of the build cache's version `build`."""
    dev = store.upsert_device(device, "local")
    sid = store.create_session(kind="run", name=f"s{k}", matrix_name=matrix,
                               started_at=T0 + dt.timedelta(hours=k))
    for config, values in runs.items():
        for rep, (tps, status) in enumerate(values):
            rid = store.create_run(
                uid=f"{device}-{k}-{config}-{rep}", session_id=sid, device_id=dev,
                cell_key=f"m|{config}|{rep}", model="m", config=config, repeat_index=rep,
                order_index=rep, status=status, engine="llama-bench", superseded=False,
                binary_path=f"/c/llama.cpp/{build}/bin/llama-bench",
                engine_build=f"{build}-commit (0)")
            if status == "ok":
                with store.engine.begin() as conn:
                    conn.execute(schema.token.insert(), [
                        {"run_id": rid, "seq": i, "step": i + 1, "wall_ms": 1000.0 / tps}
                        for i in range(4)])
    return sid


OK3 = [(10.0, "ok"), (10.2, "ok"), (9.9, "ok")]


def test_compare_builds(tmp_path):
    db = str(tmp_path / "orch.db")
    store = Store.open(db)
    add_session(store, 0, {"t1": OK3, "t2": OK3, "t3": OK3}, "0.3.30")
    add_session(store, 1, {"t1": [(8.5, "ok"), (8.6, "ok"), (8.4, "ok")],
                           "t2": [(0, "failed"), (0, "timeout")]}, "0.3.36")
    data = json.loads(orch_ok("compare", "--db", db, "--builds", "0.3.30", "0.3.36",
                              "--format", "json"))
    [t1] = [r for r in data if r["kind"] == "config" and r["config"] == "t1"]
    assert t1["reference"] == "build 0.3.30" and t1["other"] == "build 0.3.36"
    assert t1["ratio"] == pytest.approx(8.5 / 10.03, rel=0.01)
    assert t1["ci_low"] < t1["ratio"] < t1["ci_high"] and t1["significant"] is True
    absent = {(r["config"], r["side"]): r for r in data if r["kind"] == "absent"}
    assert absent["t2", "build 0.3.36"]["why"] == "failed"
    assert len(absent["t2", "build 0.3.36"]["failed_runs"]) == 2
    assert absent["t3", "build 0.3.36"]["why"] == "never run"
    [summary] = [r for r in data if r["kind"] == "summary"]
    assert summary["configs"] == 1 and summary["ratio"] == pytest.approx(t1["ratio"])
    out = orch_ok("compare", "--db", db, "--builds", "0.3.30", "0.3.36")
    assert "Only on build 0.3.30: m t2, m t3" in out
    assert "Failed on build 0.3.36, not missing (the others above never ran there): m t2 " \
        "(runs" in out
    code, out = orch("compare", "--db", db, "--builds", "0.3.30", "0.2.1")
    assert code == 2 and "--builds 0.2.1: no build of that name or prefix" in out
    code, out = orch("compare", "--db", db, "--builds", "0.3.30", "0.3.36", "-s", "1")
    assert code == 2 and "--builds" in out


def test_report_regressions_section(tmp_path):
    db = str(tmp_path / "orch.db")
    store = Store.open(db)
    add_session(store, 0, {"t1": OK3, "t2": OK3}, "0.3.30")
    add_session(store, 1, {"t1": OK3, "t2": OK3}, "0.3.30")
    add_session(store, 2, {"t1": [(8.5, "ok"), (8.6, "ok"), (8.4, "ok")], "t2": OK3}, "0.3.36")
    add_session(store, 3, {"t1": OK3}, "0.3.30", matrix="other")
    text = orch_ok("report", "--db", db, "3", "--no-plots")
    assert "## Regressions" in text
    assert "Against session 2 (0.3.30) and session 1 (0.3.30)" in text
    moved = text.split("Moved beyond its interval:")[1].split("\n\n")[0]
    assert "t1 (m): -15" in moved and "since session 2" in moved and "since session 1" in moved
    assert "t2" not in moved
    # the first session of a matrix has no earlier one: no section
    assert "## Regressions" not in orch_ok("report", "--db", db, "1", "--no-plots")
    assert "## Regressions" not in orch_ok("report", "--db", db, "4", "--no-plots")


# ---- the real thing: one llama-bench matrix on two llama.cpp builds -----------------------

BENCH = """\
    name: bench-builds
    engine: llama-bench
    binary: {{build: llama.cpp@{version}}}
    models:
      tiny: {model}
    tokens: 8
    repeat: 2
    cooldown: 0
    timeout: 120s
    configs:
      t1: -t 1 -r 3 -p 8
      t2: -t 2 -r 3 -p 8
    """


@pytest.fixture(scope="module")
def two_builds() -> tuple[str, str]:
    versions = (lb.PREVIOUS_VERSION, lb.LLAMA_CPP_VERSION)
    for v in versions:
        if lb.find_build(v) is None:
            unavailable(f"llama.cpp {v} build in {lb.cache_dir(v)} is missing: run "
                        f"scripts/build-llama")
    return versions


@pytest.mark.slow
def test_one_matrix_on_two_builds(workspace, two_builds):
    from orchestrator.tools.moe_model import default_model_path

    model = Path(default_model_path("tiny"))
    if not model.is_file():
        unavailable(f"{model} is missing: run scripts/build-llama")
    old, new = two_builds
    for version in (old, new):
        (workspace / "m.yaml").write_text(textwrap.dedent(BENCH.format(version=version,
                                                                       model=model)))
        code, out = orch("run", "m.yaml")
        assert code == 0, out
    store = Store.open(str(workspace / "orch.db"))
    builds = {r.binary_path.split("/")[-3]: r.engine_build for r in Runs(store).current()}
    assert set(builds) == {old, new} and builds[old] != builds[new]   # told apart
    _compare_shows_ratios(old, new)
    hist = json.loads(orch_ok("history", "--matrix", "bench-builds", "--order", "build",
                              "--format", "json"))
    assert [p["build"] for p in hist["points"] if p["config"] == "t1"] == [old, new]


BUILDS = """\
    name: builds-sweep
    engine: llama-bench
    builds: [llama.cpp@{old}, llama.cpp@{new}]
    models:
      tiny: {model}
    tokens: 8
    repeat: 2
    order: interleaved
    cooldown: 0
    timeout: 120s
    configs:
      t1: -t 1 -r 3 -p 8
      t2: -t 2 -r 3 -p 8
    """


@pytest.mark.slow
def test_one_session_sweeps_two_builds(workspace, two_builds):
    """`builds:` as a grid dimension: one session runs every config on both builds (named
    CONFIG@VERSION, builds alternating), each run with its own binary and engine build, and
    `orch compare --builds` / `orch history --order build` read that one session."""
    from orchestrator.tools.moe_model import default_model_path

    model = Path(default_model_path("tiny"))
    if not model.is_file():
        unavailable(f"{model} is missing: run scripts/build-llama")
    old, new = two_builds
    (workspace / "m.yaml").write_text(textwrap.dedent(BUILDS.format(old=old, new=new,
                                                                    model=model)))
    code, out = orch("run", "m.yaml")
    assert code == 0, out
    store = Store.open(str(workspace / "orch.db"))
    runs = Runs(store).current(1)
    assert [r.config for r in runs[:4]] == [f"t1@{old}", f"t1@{new}", f"t2@{old}", f"t2@{new}"]
    assert len(runs) == 8 and all(r.status == "ok" for r in runs)
    engine_builds: dict[str, set[str | None]] = {}
    for r in runs:    # provenance per run: its build's binary, hash and reported build
        build = r.config.split("@")[1]
        binary = lb.cache_dir(build) / "bin" / "llama-bench"
        assert r.binary_path == str(binary)
        assert r.binary_sha256 == hashlib.sha256(binary.read_bytes()).hexdigest()
        engine_builds.setdefault(build, set()).add(r.engine_build)
    assert all(len(v) == 1 and None not in v for v in engine_builds.values())
    assert engine_builds[old] != engine_builds[new]
    _compare_shows_ratios(old, new)
    hist = json.loads(orch_ok("history", "--matrix", "builds-sweep", "-c", "t1", "--order",
                              "build", "--format", "json"))
    assert [(p["config"], p["build"]) for p in hist["points"]] == [("t1", old), ("t1", new)]
    code, out = orch("run", "m.yaml", "--resume")      # every cell is known by its build
    assert code == 0, out
    assert len(Runs(Store.open(str(workspace / "orch.db"))).current(1)) == 8


def _compare_shows_ratios(old: str, new: str) -> None:
    """`orch compare --builds OLD NEW`: both configs, two runs a side, a ratio inside its
    interval."""
    data = json.loads(orch_ok("compare", "--builds", old, new, "--format", "json"))
    rows = [r for r in data if r["kind"] == "config"]
    assert {r["config"] for r in rows} == {"t1", "t2"}
    for r in rows:
        assert r["n_reference"] == 2 and r["n_other"] == 2
        assert r["ratio"] > 0 and r["ci_low"] <= r["ratio"] <= r["ci_high"]
