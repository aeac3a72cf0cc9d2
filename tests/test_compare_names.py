"""`orch compare` across names: sides with no config in common are refused (each side's
configs listed), `--match A=B` pairs them, headers name sessions by name; `orch table --pivot
model` puts the models of one session side by side."""
from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
from cli_helpers import orch
from test_baselines_by_name import DESIGN, FIX, QWEN, store_session

from orchestrator.results.pivot import pivots
from orchestrator.stats.figures import RunFigures


@pytest.fixture
def two(tmp_path: Path) -> str:
    """Session 1: the pinned study with its design (anon-long, ahwb-long, ...); session 2: the
    same files without it (configs named by their settings: dense_weights=anon, ...)."""
    db = str(tmp_path / "orch.db")
    copy = tmp_path / "nodesign"
    shutil.copytree(FIX, copy)
    for args in ((str(FIX), "--design", str(DESIGN)), (str(copy),)):
        code, out = orch("import", *args, "--db", db)
        assert code == 0, out
    return db


def test_no_config_in_common_exits_2_listing_each_sides_configs(two):
    code, out = orch("compare", "-s", "1", "-s", "2", "--db", two, "--format", "md")
    lines = out.strip().splitlines()
    assert code == 2 and len(lines) == 3, out
    assert lines[0].startswith("error: no config in common") and "--match A=B" in lines[0]
    assert lines[1].startswith("  2026-07-21-pinned-dense-ab (session 1): ")
    assert "anon-long" in lines[1] and "ahwb-long" in lines[1]
    assert lines[2].startswith("  nodesign (session 2): ") and "dense_weights=anon" in lines[2]
    assert "geometric mean" not in out


def test_match_pairs_configs_of_other_names(two):
    # without a design the same-setting runs are split by sitting (docs/import.md, "No silent
    # pooling"): the long pair is dense_weights=anon-1354tok / dense_weights=ahwb-1354tok
    match = ("--match", "anon-long=dense_weights=anon-1354tok",
             "--match", "ahwb-long=dense_weights=ahwb-1354tok")
    code, out = orch("compare", "-s", "1", "-s", "2", "--db", two, "--format", "json", *match)
    assert code == 0, out
    rows = {r["config"]: r for r in json.loads(out) if r["kind"] == "config"}
    assert rows["anon-long"]["other_config"] == "dense_weights=anon-1354tok"
    assert rows["anon-long"]["model"] == QWEN
    assert (rows["anon-long"]["n_reference"], rows["anon-long"]["n_other"]) == (1, 1)
    assert rows["ahwb-long"]["ratio"] is not None and rows["ahwb-long"]["n_other"] == 1
    code, out = orch("compare", "-s", "1", "-s", "2", "--db", two, "--format", "md", *match)
    assert "anon-long ↔ dense_weights=anon-1354tok" in out
    # sessions by name (with the id), and the ids column says what it holds
    assert "| nodesign/2026-07-21-pinned-dense-ab ratio |" in out
    assert "- nodesign (session 2): nodesign on imported" in out
    assert "| run ids (2026-07-21-pinned-dense-ab; nodesign) |" in out
    assert "| runs" not in out and " runs |" not in out
    code, out = orch("compare", "-s", "1", "-s", "2", "--db", two, "--match", "nosuch=x")
    assert code == 2 and "--match nosuch=x: want A=B" in out


def test_compare_help_says_there_is_no_baseline():
    code, out = orch("compare", "--help")
    assert code == 0 and "There is no --baseline here" in out and "--match A=B" in out
    code, out = orch("compare", "-s", "1", "-s", "2", "-b", "x")
    assert code == 2                       # refused by click, not silently accepted


# ---- orch table --pivot model --------------------------------------------------------------

def test_pivot_pairs_by_name_then_settings_then_label():
    runs = [SimpleNamespace(id=i, model=m, config=c, device="d", status="ok", flags=f)
            for i, (m, c, f) in enumerate([
                ("q", "same", None), ("g", "same", None),
                ("q", "dense_weights=anon", "model=q.gguf n_layer=40 cache_mb=3000 dw=anon"),
                ("g", "anon-3000", "model=g.gguf n_layer=36 cache_mb=3000 dw=anon"),
                ("q", "x", None), ("g", "y", None), ("g", "alone", None)], 1)]
    stats = {r.id: RunFigures(mean=float(r.id)) for r in runs}
    design = SimpleNamespace(config_label=lambda c: "the long pair" if c in ("x", "y") else None)
    (pivot,) = pivots(runs, stats, design)
    assert pivot.models == ["q", "g"]
    got = {tuple(r.names): (r.matched_by, {m: c.mean for m, c in r.cells.items()})
           for r in pivot.rows}
    assert got == {("same",): ("name", {"q": 1.0, "g": 2.0}),
                   ("dense_weights=anon", "anon-3000"): ("settings", {"q": 3.0, "g": 4.0}),
                   ("x", "y"): ("label", {"q": 5.0, "g": 6.0}),
                   ("alone",): ("", {"g": 7.0})}


TWO = textwrap.dedent("""\
    name: two
    engine: bmoe
    models: {m1: /m1.gguf, m2: /m2.gguf}
    repeat: 2
    configs: {a: --x 1, b: --x 2}
    """)


def test_orch_table_pivot_model(tmp_path):
    db = str(tmp_path / "orch.db")
    store_session(db, TWO, [("m1", "a", 0, 10.0, "ok"), ("m1", "a", 1, 12.0, "ok"),
                            ("m2", "a", 0, 5.0, "ok"), ("m1", "b", 0, 8.0, "ok"),
                            ("m2", "b", 0, 4.0, "ok")])
    code, out = orch("table", "1", "--db", db, "--pivot", "model", "--format", "json")
    assert code == 0, out
    cells = {(r["row"], r["model"]): r["mean"] for r in json.loads(out)}
    assert cells == {("a", "m1"): pytest.approx(11.0), ("a", "m2"): pytest.approx(5.0),
                     ("b", "m1"): pytest.approx(8.0), ("b", "m2"): pytest.approx(4.0)}
    code, out = orch("table", "1", "--db", db, "--pivot", "model")
    assert code == 0 and "| Config | matched by | m1 tok/s | m2 tok/s | run ids |" in out
    assert "| a | name | 11.00 | 5.00 | 1–3 |" in out
