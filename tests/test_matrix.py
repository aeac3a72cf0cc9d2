"""Matrix files: validation messages with file, line and key path; cell planning and order."""
from __future__ import annotations

import textwrap

import pytest

from orchestrator.config.matrix import load_matrix
from orchestrator.config.plan import plan_cells
from orchestrator.config.yamlfile import ConfigError


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
    with pytest.raises(ConfigError, match=r"pairs.0: 'zz' is not one of the configs"):
        load_matrix(write(tmp_path, base + "pairs: [[a, zz]]\n"))
