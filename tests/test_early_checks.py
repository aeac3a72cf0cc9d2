"""Bad input found before anything is written: engine_options keys moe-probe and bmoe do not
read, an inventory `env` an exec cannot carry, a `{local: FILE}` model that does not exist.
Each ends with one `file:line: key: ...` line, exit 2, and no store file."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from cli_helpers import orch

MATRIX = """\
name: early
engine: moe-probe
prompt: hello
tokens: 2
cooldown: 0
configs:
  a: --layers 2 --experts 4 --expert-mb 0.0625 --top-k 1
"""


def _run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, files: dict[str, str],
         *args: str) -> str:
    """`orch run ...` in tmp_path; it must exit 2 with one line and write nothing."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ORCH_DB", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    before = set(os.listdir(tmp_path))
    code, output = orch("run", *args)
    lines = [line for line in output.splitlines() if line.strip()]
    assert code == 2, output
    assert "Traceback" not in output, output
    assert len(lines) == 1, output
    assert set(os.listdir(tmp_path)) == before, output   # no orch.db, nothing else
    return lines[0]


def test_moe_probe_misspelt_option(tmp_path, monkeypatch):
    matrix = MATRIX + "engine_options:\n  python: python3\n  cach_dir: /tmp/x\n"
    line = _run(tmp_path, monkeypatch, {"m.yaml": matrix}, "m.yaml")
    assert line.endswith("m.yaml:10: engine_options.cach_dir: unknown option for moe-probe "
                         "(known: python, cache_dir)"), line


def test_moe_probe_known_options_still_accepted():
    from orchestrator.plugins import get_adapter
    adapter = get_adapter("moe-probe", {"python": "python3", "cache_dir": "/tmp/c"})
    assert adapter.options.cache_dir == "/tmp/c"


def test_bmoe_any_option_is_unknown(tmp_path, monkeypatch):
    matrix = (MATRIX.replace("moe-probe", "bmoe") + "binary: /bin/true\n"
              "models:\n  m: /data/m.gguf\nengine_options: {thread: 4}\n")
    line = _run(tmp_path, monkeypatch, {"m.yaml": matrix}, "m.yaml")
    assert line.endswith("m.yaml:11: engine_options.thread: unknown option for bmoe "
                         "(known: none)"), line


@pytest.mark.parametrize(("env", "where"), [
    ('{"A=B": x}', "devices.box.env.A=B: a variable name"),
    ('{GOOD: "a\\0b"}', "devices.box.env.GOOD: the value contains a NUL byte"),
])
def test_inventory_env_refused_at_load(tmp_path, monkeypatch, env, where):
    inventory = f"devices:\n  box:\n    kind: local\n    env: {env}\n"
    line = _run(tmp_path, monkeypatch, {"m.yaml": MATRIX, "devices.yaml": inventory},
                "m.yaml", "-d", "box")
    assert f"devices.yaml:4: {where}" in line, line


def test_missing_local_model_refused_at_load(tmp_path, monkeypatch):
    matrix = (MATRIX.replace("moe-probe", "bmoe") + "binary: /bin/true\n"
              "models:\n  m: {local: nothere.gguf}\n")
    line = _run(tmp_path, monkeypatch, {"m.yaml": matrix}, "m.yaml")
    assert line.endswith("m.yaml:10: models.m.local: nothere.gguf does not exist"), line
