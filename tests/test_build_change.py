"""Regressions where the user looks: `orch run` ends with a line when the device's previous
session of the matrix measured another engine build and the two builds differ significantly;
`--builds` and `-b` take a unique prefix, and exit 2 listing the choices otherwise."""
from __future__ import annotations

import textwrap

import pytest
from cli_helpers import orch, orch_ok
from test_builds import OK3, add_session

from orchestrator.db.store import Store

TESTS_ENGINE = "fake_bmoe.sh"


def install_build(workspace, version: str, base_ms: int) -> str:
    """fake_bmoe.sh as build `version` of the build cache's layout (…/llama.cpp/V/bin/…, so
    the run's build label is V), `base_ms` per token."""
    path = workspace / "llama.cpp" / version / "bin" / "bmoe"
    path.parent.mkdir(parents=True)
    path.write_text((workspace / TESTS_ENGINE).read_text().replace(
        "$((90 + i + slow))", f"$(({base_ms} + i + slow))"))
    path.chmod(0o755)
    return str(path)


def run_with(workspace, binary: str) -> str:
    for name in ("a", "b"):        # each session's spread starts afresh (--slowdown)
        (workspace / name).unlink(missing_ok=True)
    (workspace / "m.yaml").write_text(textwrap.dedent(f"""\
        name: bench
        engine: bmoe
        binary: {binary}
        models: {{m: /m.gguf}}
        prompt: p
        tokens: 8
        repeat: 3
        cooldown: 0
        configs:
          a: --delay 0 --slowdown {workspace}/a
          b: --delay 0 --slowdown {workspace}/b
        """))
    code, out = orch("run", "m.yaml")
    assert code == 0, out
    return out


@pytest.mark.slow
def test_run_ends_with_the_build_change(workspace):
    old, new = install_build(workspace, "0.1", 90), install_build(workspace, "0.2", 190)
    assert "engine build changed" not in run_with(workspace, old)     # no earlier session
    out = run_with(workspace, new)
    line = next(x for x in out.splitlines() if "engine build changed" in x)
    assert line.startswith("engine build changed since session 1 (0.1 → 0.2): −")
    assert line.endswith("% on 2 of 2 configs (orch compare --builds 0.1 0.2 -d local "
                         "-m bench)")
    # the command it names shows the same two builds, both configs slower
    text = orch_ok("compare", "--builds", "0.1", "0.2", "-d", "local", "-m", "bench",
                   "--summary", "-")
    assert text.startswith("### ❌ orch: 2 regressions")
    assert "engine build changed" not in run_with(workspace, new)     # same build again


@pytest.fixture
def builds_db(tmp_path) -> str:
    db = str(tmp_path / "orch.db")
    store = Store.open(db)
    add_session(store, 0, {"base-k8": OK3, "t1": OK3, "t2": OK3}, "0.3.30")
    add_session(store, 1, {"base-k8": OK3, "t1": OK3, "t2": OK3}, "0.3.36")
    add_session(store, 2, {"base-k8": OK3, "t1": OK3, "t2": OK3}, "0.4.1")
    return db


def test_builds_by_prefix(builds_db):
    out = orch_ok("compare", "--db", builds_db, "--builds", "0.3.30", "0.4", "--format", "json")
    assert '"other": "build 0.4.1"' in out
    code, out = orch("compare", "--db", builds_db, "--builds", "0.3", "0.4")
    assert code == 2 and "--builds 0.3: names several builds: 0.3.36, 0.3.30" in out
    code, out = orch("compare", "--db", builds_db, "--builds", "0.3.30", "1.0")
    assert code == 2 and "--builds 1.0: no build of that name or prefix (known builds, " \
        "newest first: 0.4.1, 0.3.36, 0.3.30)" in out


def test_baseline_by_prefix(builds_db):
    out = orch_ok("table", "--db", builds_db, "3", "-t", "ab", "-b", "base")
    assert "base-k8" in out
    code, out = orch("table", "--db", builds_db, "3", "-t", "ab", "-b", "t")
    assert code == 2 and "-b t: 't' begins several configs: t1, t2" in out
    code, out = orch("table", "--db", builds_db, "3", "-t", "ab", "-b", "x")
    assert code == 2 and "no config 'x' in session 3 (configs: base-k8, t1, t2)" in out
