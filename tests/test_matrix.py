"""Matrix files: validation messages with file, line and key path; cell planning and order.

Over 400 lines on purpose: one test per matrix rule (validation, planning, order), sharing the
matrix snippets.
"""
from __future__ import annotations

import textwrap

import pytest
from pydantic import ValidationError

from orchestrator.config.inventory import load_inventory
from orchestrator.config.matrix import Matrix, load_matrix
from orchestrator.config.plan import plan_cells
from orchestrator.errors import ConfigError


def write(tmp_path, text: str):
    path = tmp_path / "m.yaml"
    path.write_text(textwrap.dedent(text))
    return path


GOOD = """\
name: probe
engine: moe-probe
prompt: hello
tokens: 8
configs:
  a: --io pread
  b: --io mmap
"""


def test_loads_and_hashes(tmp_path):
    loaded = load_matrix(write(tmp_path, GOOD))
    assert loaded.matrix.name == "probe"
    assert len(loaded.sha256) == 64
    assert loaded.prompt_text == "hello"


def test_wrong_type_names_file_line_and_key(tmp_path):
    path = write(tmp_path, GOOD.replace("b: --io mmap", "c2000: 2000"))
    with pytest.raises(ConfigError) as exc:
        load_matrix(path)
    assert str(exc.value) == f"{path}:7: configs.c2000: expected a string"


def test_unknown_key_and_missing_key(tmp_path):
    path = write(tmp_path, GOOD.replace("tokens: 8", "tokenz: 8").replace("engine: moe-probe\n", ""))
    with pytest.raises(ConfigError) as exc:
        load_matrix(path)
    text = str(exc.value)
    assert f"{path}:3: tokenz: is not a known key" in text
    assert "engine: is required" in text


def test_yaml_syntax_error_has_line(tmp_path):
    path = write(tmp_path, "name: x\nconfigs: [a\n")
    with pytest.raises(ConfigError, match=r"m.yaml:\d+: YAML syntax"):
        load_matrix(path)


def test_bad_baseline_and_duration(tmp_path):
    with pytest.raises(ConfigError, match="baseline: 'zzz' is not one of the configs"):
        load_matrix(write(tmp_path, GOOD + "baseline: zzz\n"))
    with pytest.raises(ConfigError, match=r"m.yaml:8: cooldown.*duration"):
        load_matrix(write(tmp_path, GOOD + "cooldown: soon\n"))


def test_grid_expands_with_readable_names(tmp_path):
    loaded = load_matrix(write(tmp_path, """\
        name: g
        engine: moe-probe
        grid:
          --cache-mb: [0, 8]
          --io-threads: [1, 4]
          --overlap: [false, true]
        """))
    cells = plan_cells(loaded.matrix)
    names = [c.config for c in cells]
    assert names[0] == "cache-mb=0,io-threads=1,overlap=off"
    assert len(names) == 8 and len(set(names)) == 8
    last = cells[-1]
    assert last.argv_flags == ["--cache-mb", "8", "--io-threads", "4", "--overlap"]


def test_orders(tmp_path):
    base = GOOD + "repeat: 3\n"
    as_written = plan_cells(load_matrix(write(tmp_path, base)).matrix)
    assert [c.config for c in as_written] == ["a", "a", "a", "b", "b", "b"]
    inter = plan_cells(load_matrix(write(tmp_path, base + "order: interleaved\n")).matrix)
    assert [c.config for c in inter] == ["a", "b", "a", "b", "a", "b"]
    assert [c.order for c in inter] == list(range(6))
    shuffled = load_matrix(write(tmp_path, base + "order: shuffled\nseed: 7\n")).matrix
    one, two = plan_cells(shuffled), plan_cells(shuffled)
    assert [c.key for c in one] == [c.key for c in two]
    assert sorted(c.key for c in one) == sorted(c.key for c in as_written)


def test_models_are_outer_loop(tmp_path):
    loaded = load_matrix(write(tmp_path, GOOD + "models:\n  q: /m/q.gguf\n  g: /m/g.gguf\n"))
    cells = plan_cells(loaded.matrix)
    assert [(c.model, c.config) for c in cells] == [("q", "a"), ("q", "b"), ("g", "a"), ("g", "b")]
    assert cells[0].model_path == "/m/q.gguf"


def test_prompt_file(tmp_path):
    (tmp_path / "p.txt").write_text("line1\nline2 € 日本\n")
    loaded = load_matrix(write(tmp_path, GOOD.replace("prompt: hello", "prompt_file: p.txt")))
    assert loaded.prompt_text == "line1\nline2 € 日本\n"


def test_pairs_run_back_to_back(tmp_path):
    base = GOOD.replace("  b: --io mmap\n", "  b: --io mmap\n  c: --io odirect\n")
    loaded = load_matrix(write(tmp_path, base + "repeat: 2\norder: interleaved\npairs: [[a, c]]\n"))
    assert [x.config for x in plan_cells(loaded.matrix)] == ["a", "c", "b", "a", "c", "b"]
    with pytest.raises(ConfigError, match=r"m.yaml:9: pairs.0.1: 'zz' is not one of the configs"):
        load_matrix(write(tmp_path, base + "pairs: [[a, zz]]\n"))


ABC = GOOD.replace("  b: --io mmap\n", "  b: --io mmap\n  c: --io odirect\n")  # configs a, b, c


def errors(path) -> list[str]:
    with pytest.raises(ConfigError) as exc:
        load_matrix(path)
    return str(exc.value).splitlines()


def test_cross_key_errors_name_line_and_key_path(tmp_path):
    path = write(tmp_path, ABC + """\
        baseline: mmapp
        pairs:
          - [a, c]
          - [c, b]
          - [b, b]
        """.replace("        ", ""))
    assert errors(path) == [
        f"{path}:9: baseline: 'mmapp' is not one of the configs (a, b, c)",
        f"{path}:12: pairs.1.0: 'c' is already in pair 0",
        f"{path}:13: pairs.2.0: 'b' is already in pair 1",
        f"{path}:13: pairs.2.1: 'b' is already in pair 1",
    ]


def test_a_pair_needs_two_configs(tmp_path):
    path = write(tmp_path, ABC + "pairs:\n  - [a, b]\n  - [c]\n")
    assert errors(path) == [f"{path}:11: pairs.1: needs at least 2 entries"]


def test_prompt_and_prompt_file_exclude_each_other(tmp_path):
    path = write(tmp_path, GOOD.replace("prompt: hello\n", "prompt: hello\nprompt_file: p.txt\n"))
    assert errors(path) == [f"{path}:4: prompt_file: give `prompt` or `prompt_file`, not both"]


def test_configs_or_grid_and_grid_values(tmp_path):
    path = write(tmp_path, "name: n\nengine: moe-probe\n")
    assert errors(path) == [f"{path}:1: (top level): give at least one of `configs` or `grid`"]
    path = write(tmp_path, "name: n\nengine: moe-probe\ngrid:\n  -t: [1]\n  --io: []\n")
    assert errors(path) == [f"{path}:5: grid.--io: needs at least 1 entry"]


def test_grid_values_that_name_one_config_twice(tmp_path):
    path = write(tmp_path, """\
        name: n
        engine: moe-probe
        grid:
          -t: [1, 2, "1"]
          --mlock:
            - true
            - "on"
        """)
    assert errors(path) == [
        f"{path}:4: grid.-t.2: gives the config name 't=1' again (as value 0 does)",
        f"{path}:7: grid.--mlock.1: gives the config name 'mlock=on' again (as value 0 does)",
    ]


def test_configs_and_grid_names_that_meet(tmp_path):
    path = write(tmp_path, """\
        name: n
        engine: moe-probe
        configs:
          a: ""
          a+t=1: ""
        grid:
          -t: [1, "1+t=1"]
        """)
    # a with t=1+t=1, and a+t=1 with t=1: both `a+t=1+t=1`
    assert errors(path) == [f"{path}:3: configs: two configs are named 'a+t=1+t=1'"]


def test_cooldown_condition_and_timer(tmp_path):
    path = write(tmp_path, GOOD + "cooldown: {until: 40C, seconds: 45, min: 20s, max: 10s}\n")
    assert errors(path) == [
        (f"{path}:8: cooldown.seconds: give `seconds` (a fixed wait) or `until` "
         "(a thermal condition), not both"),
        f"{path}:8: cooldown.max: must be at least min (20 s)"]
    path = write(tmp_path, GOOD + "cooldown:\n  seconds: 45\n  sensor: battery\n")
    assert errors(path) == [f"{path}:10: cooldown.sensor: only with `until` (a thermal condition)"]
    path = write(tmp_path, GOOD + "cooldown: {until: 40C, interval: 0s}\n")
    assert errors(path) == [(f"{path}:8: cooldown.interval: the sensor needs an interval "
                             "above 0 between readings")]


def test_cross_key_rules_hold_without_a_file():
    """A Matrix built in code (tests, bench scripts) gets the same checks, at the same keys."""
    data = {"name": "n", "engine": "moe-probe", "configs": {"a": "", "b": "", "c": ""},
            "baseline": "zz", "pairs": [["a", "b"], ["b", "c"]]}
    with pytest.raises(ValidationError) as exc:
        Matrix.model_validate(data)
    assert [(e["loc"], e["msg"]) for e in exc.value.errors()] == [
        (("baseline",), "'zz' is not one of the configs (a, b, c)"),
        (("pairs", 1, 0), "'b' is already in pair 0")]
    with pytest.raises(ValidationError) as exc:
        Matrix.model_validate({"name": "n", "engine": "e", "grid": {"-t": [1, 1]}})
    assert [e["loc"] for e in exc.value.errors()] == [("grid", "-t", 1)]
    with pytest.raises(ValidationError) as exc:
        Matrix.model_validate({**data, "baseline": "a", "pairs": [],
                               "cooldown": {"until": "40C", "min": 5, "max": 1}})
    assert [e["loc"] for e in exc.value.errors()] == [("cooldown", "max")]


def test_duplicate_key_in_a_matrix_names_both_lines(tmp_path):
    path = write(tmp_path, GOOD + "tokens: 16\n")
    assert errors(path) == [f"{path}:8: tokens: duplicate key (first at line 4)"]
    path = write(tmp_path, GOOD + "  a: --io odirect\n")
    assert errors(path) == [f"{path}:8: configs.a: duplicate key (first at line 6)"]


def test_duplicate_device_in_devices_yaml_names_both_lines(tmp_path):
    path = tmp_path / "devices.yaml"
    path.write_text(textwrap.dedent("""\
        devices:
          phone:
            kind: adb
            serial: A
          box:
            kind: local
          phone:
            kind: adb
            serial: B
        """))
    with pytest.raises(ConfigError) as exc:
        load_inventory(str(path))
    assert str(exc.value) == f"{path}:7: devices.phone: duplicate key (first at line 2)"


def test_merge_keys_still_work(tmp_path):
    """`<<` brings in an anchor's keys; the mapping's own key overrides one of them, which is
    not a duplicate. An error in a merged value points at the anchor's line."""
    text = """\
        name: n
        engine: moe-probe
        configs: {a: ""}
        engine_options:
          inner: &opts {x: 1, y: 2}
          outer: {<<: *opts, y: 3}
          slow: &slow
            until: 40C
            min: soon
        cooldown:
          <<: *slow
        """
    path = write(tmp_path, text)
    assert errors(path) == [f"{path}:9: cooldown.min: expected a duration such as 45s, got 'soon'"]
    matrix = load_matrix(write(tmp_path, text + "  min: 5s\n")).matrix
    assert matrix.engine_options["outer"] == {"x": 1, "y": 3}
    assert (matrix.cooldown.until, matrix.cooldown.min) == ("40C", 5.0)
    devices = tmp_path / "devices.yaml"
    devices.write_text(textwrap.dedent("""\
        devices:
          box: &box
            kind: ssh
            host: a.example
            workdir: /tmp/orch-box
          box2:
            <<: *box
            workdir: /tmp/orch-box2
          box3:
            <<: *box
            host: b.example
        """))
    inventory = load_inventory(str(devices))
    assert inventory.workdir("box2") == "/tmp/orch-box2"
    assert inventory.workdir("box3") == "/tmp/orch-box"


def test_baseline_per_model_labels_and_defaults(tmp_path):
    two_models = GOOD.replace("engine: moe-probe", "engine: bmoe\nbinary: /x\nmodels: {q: /q, g: /g}")
    m = load_matrix(write(tmp_path, two_models + "baseline: {g: b}\nlabels: {a: pread reads}\n")).matrix
    assert (m.baseline_for("g"), m.baseline_for("q")) == ("b", "a")   # default: the first config
    assert (m.label("a"), m.label("b")) == ("pread reads", "b")
    bad = write(tmp_path, two_models + "baseline:\n  x: a\n  q: c\nlabels: {z: Z}\n")
    assert [e.replace(f"{tmp_path}/", "") for e in errors(bad)] == [
        "m.yaml:11: baseline.x: 'x' is not one of the models (g, q)",
        "m.yaml:12: baseline.q: 'c' is not one of the configs (a, b)",
        "m.yaml:13: labels.z: 'z' is not one of the configs (a, b)"]


def test_repeat_count_or_adaptive_policy(tmp_path):
    fixed = load_matrix(write(tmp_path, GOOD + "repeat: 3\n")).matrix.repeat
    assert (fixed.min, fixed.max, fixed.adaptive) == (3, 3, False)
    adaptive = load_matrix(write(tmp_path, GOOD + "repeat: {min: 3, max: 10, until: 2%}\n"))
    policy = adaptive.matrix.repeat
    assert (policy.min, policy.max, policy.until, policy.adaptive) == (3, 10, 2.0, True)
    assert len(plan_cells(adaptive.matrix)) == 2 * 3       # min rounds are planned up front
    assert errors(write(tmp_path, GOOD + "repeat: {min: 3, max: 10}\n")) == [
        f"{tmp_path}/m.yaml:8: repeat: give `until: X%` (the interval to reach) for adaptive repeats"]
    assert errors(write(tmp_path, GOOD + "repeat: {min: 5, max: 2, until: 1%}\n")) == [
        f"{tmp_path}/m.yaml:8: repeat: max must be at least min"]


# -- route_trace: per config, or for the whole matrix -------------------------------------------

TRACED = """\
name: traced
engine: moe-probe
prompt: hello
configs:
  a: --io pread
  b: {flags: --io mmap, route_trace: true}
  c: {flags: --io mmap, route_trace: false}
  d: {flags: --io odirect}
"""


def traces(matrix: Matrix) -> dict[str, bool]:
    return {c.config: c.route_trace for c in plan_cells(matrix)}


def test_route_trace_per_config_and_matrix_wide(tmp_path):
    m = load_matrix(write(tmp_path, TRACED)).matrix
    assert traces(m) == {"a": False, "b": True, "c": False, "d": False}
    assert [c.flags for c in plan_cells(m)] == ["--io pread", "--io mmap", "--io mmap",
                                                "--io odirect"]
    # matrix-wide: every config traces, but a config's own value wins
    wide = load_matrix(write(tmp_path, TRACED + "route_trace: true\n")).matrix
    assert traces(wide) == {"a": True, "b": True, "c": False, "d": True}
    # grid-crossed names trace as their config says; a grid alone as the matrix says
    grid = load_matrix(write(tmp_path, TRACED + "grid: {--threads: [1, 2]}\n")).matrix
    assert traces(grid)["b+threads=1"] and traces(grid)["b+threads=2"]
    assert not traces(grid)["a+threads=2"]
    only_grid = load_matrix(write(tmp_path, "name: g\nengine: moe-probe\nroute_trace: true\n"
                                            "grid: {--threads: [1, 2]}\n")).matrix
    assert traces(only_grid) == {"threads=1": True, "threads=2": True}


def test_route_trace_keeps_cell_keys(tmp_path):
    """Turning tracing on must not change a cell's key: --resume finds the earlier cells."""
    plain = load_matrix(write(tmp_path, GOOD)).matrix
    traced = load_matrix(write(tmp_path, GOOD.replace("  b: --io mmap", "  b: {flags: --io mmap, "
                                                     "route_trace: true}") + "route_trace: true\n"))
    assert [c.key for c in plan_cells(plain)] == [c.key for c in plan_cells(traced.matrix)]
    assert all(c.route_trace for c in plan_cells(traced.matrix))


def test_route_trace_refused_with_a_clear_message(tmp_path):
    typo = write(tmp_path, TRACED.replace("route_trace: true}", "route_trace: true, trace: 1}"))
    assert errors(typo) == [f"{typo}:6: configs.b.trace: is not a known key"]
    not_bool = write(tmp_path, TRACED.replace("route_trace: true}", "route_trace: often}"))
    assert errors(not_bool)[0].startswith(f"{not_bool}:6: configs.b.route_trace: ")
    engine = write(tmp_path, TRACED.replace("engine: moe-probe", "engine: llama-bench"))
    assert errors(engine) == [(f"{engine}:6: configs.b.route_trace: engine 'llama-bench' cannot "
                               "write a route trace (only bmoe, llama-token, moe-probe can)")]
    wide = write(tmp_path, GOOD.replace("engine: moe-probe", "engine: generic")
                 + "route_trace: true\n")
    assert errors(wide) == [(f"{wide}:8: route_trace: engine 'generic' cannot write a route "
                             "trace (only bmoe, llama-token, moe-probe can)")]
    # without route_trace, those engines are as welcome as before
    load_matrix(write(tmp_path, GOOD.replace("engine: moe-probe", "engine: generic")))


BUILDS = """\
name: b
engine: llama-bench
builds: [llama.cpp@0.3.30, llama.cpp@0.3.36]
models: {m: /m.gguf}
repeat: 2
order: interleaved
configs:
  t1: -t 1
  t2: -t 2
"""


def fake_builds(tmp_path, monkeypatch, versions=("0.3.30", "0.3.36")) -> None:
    """A build cache (ORCH_LLAMA_CACHE) holding llama-bench of these versions."""
    monkeypatch.setenv("ORCH_LLAMA_CACHE", str(tmp_path / "cache"))
    for v in versions:
        (tmp_path / "cache" / v / "bin").mkdir(parents=True)
        (tmp_path / "cache" / v / "bin" / "llama-bench").write_text("")


def test_builds_are_a_grid_dimension(tmp_path, monkeypatch):
    fake_builds(tmp_path, monkeypatch)
    cells = plan_cells(load_matrix(write(tmp_path, BUILDS)).matrix)
    assert [c.key for c in cells[:4]] == ["m|t1@0.3.30|0", "m|t1@0.3.36|0", "m|t2@0.3.30|0",
                                          "m|t2@0.3.36|0"]    # interleaved: builds alternate
    assert len(cells) == 8 and [c.repeat for c in cells[4:]] == [1] * 4
    assert [(c.build, c.matrix_config) for c in cells[:2]] == [("0.3.30", "t1"), ("0.3.36", "t1")]
    assert cells[1].binary == str(tmp_path / "cache" / "0.3.36" / "bin" / "llama-bench")
    as_written = plan_cells(load_matrix(write(tmp_path, BUILDS.replace("interleaved",
                                                                       "as-written"))).matrix)
    assert [c.config for c in as_written[:4]] == ["t1@0.3.30", "t1@0.3.30", "t1@0.3.36",
                                                  "t1@0.3.36"]
    matrix = load_matrix(write(tmp_path, BUILDS + "labels: {t1: one}\n")).matrix
    assert matrix.baseline_for("m") == "t1@0.3.30"          # the first config on the first build
    assert matrix.label("t1@0.3.36") == "one@0.3.36" and matrix.label("t2@0.3.30") == "t2@0.3.30"


def test_cell_keys_without_builds_are_unchanged(tmp_path):
    """Resume compatibility: a matrix without `builds:` keeps its cells' keys and binary."""
    cells = plan_cells(load_matrix(write(tmp_path, GOOD + "repeat: 2\n")).matrix)
    assert [c.key for c in cells] == ["-|a|0", "-|a|1", "-|b|0", "-|b|1"]
    assert all(c.build is None and c.binary is None and c.matrix_config == c.config
               for c in cells)


def test_builds_refused_with_a_clear_message(tmp_path, monkeypatch):
    fake_builds(tmp_path, monkeypatch, versions=("0.3.30",))
    missing = write(tmp_path, BUILDS)
    assert errors(missing) == [
        (f"{missing}:3: builds: llama.cpp@0.3.36 is not built "
         f"({tmp_path}/cache/0.3.36/bin/llama-bench is missing): run "
         f"`orch engines build llama.cpp --version 0.3.36`")]
    engine = write(tmp_path, BUILDS.replace("llama-bench", "bmoe"))
    assert errors(engine)[0].startswith(f"{engine}:3: builds: ")
    assert "engine 'bmoe' has no binary in a llama.cpp build" in errors(engine)[0]
    both = write(tmp_path, BUILDS + "binary: /x/llama-bench\n")
    assert errors(both) == [(f"{both}:3: builds: give `builds:` or `binary:`, not both (each "
                             "build names its own binary)")]
    bad = write(tmp_path, BUILDS.replace("llama.cpp@0.3.36", "llama.cpp-0.3.36"))
    assert "expected llama.cpp@VERSION" in errors(bad)[0] and f"{bad}:3:" in errors(bad)[0]
    twice = write(tmp_path, BUILDS.replace("0.3.36", "0.3.30"))
    assert errors(twice) == [f"{twice}:3: builds: llama.cpp@0.3.30 is named twice"]
