"""Engines and device kinds from an installed plugin package (tests/plugins/orch_testplugin):
no orch file names them, its entry points alone make them known (docs/plugins.md)."""
from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import textwrap
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest
from ci import unavailable

from orchestrator import plugins
from orchestrator.db.runs import Runs
from orchestrator.db.store import Store

PLUGIN = Path(__file__).resolve().parent / "plugins" / "orch_testplugin"
ORCH = Path(sys.executable).with_name("orch")


def _builds_wheels_offline() -> bool:
    """setuptools builds a wheel by itself from 70.1 on, before that with `wheel` beside it."""
    import setuptools

    major, minor = (int(p) for p in setuptools.__version__.split(".")[:2])
    return (major, minor) >= (70, 1) or importlib.util.find_spec("wheel") is not None


@pytest.fixture(scope="module")
def plugin_path(tmp_path_factory) -> Path:
    """The plugin installed with pip into a directory of its own (--target), never into the
    venv: put it on PYTHONPATH and its entry points are there. Built from a copy, so that the
    build leaves nothing in the source tree."""
    work = tmp_path_factory.mktemp("plugin")
    source, target = work / "src", work / "site"
    shutil.copytree(PLUGIN, source)
    argv = [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check",
            "--no-deps", "--target", str(target)]
    if _builds_wheels_offline():
        argv += ["--no-build-isolation", "--no-index"]
    # else pip fetches setuptools for an isolated build (the test extra brings `wheel`)
    done = subprocess.run(argv + [str(source)], capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        unavailable(f"cannot install the test plugin: {done.stderr.strip()[-800:]}")
    return target


def orch_cli(cwd: Path, *args: str, plugin: Path | None = None) -> tuple[int, str]:
    """`orch ARGS` as a subprocess: entry points are read once per process."""
    env = {k: v for k, v in os.environ.items() if k not in ("ORCH_DB", "PYTHONPATH")}
    if plugin is not None:
        env["PYTHONPATH"] = str(plugin)
    done = subprocess.run([str(ORCH), *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)
    return done.returncode, done.stdout + done.stderr


@pytest.fixture
def workspace(tmp_path) -> Path:
    (tmp_path / "devices.yaml").write_text(textwrap.dedent(f"""\
        devices:
          box:
            kind: directory
            root: {tmp_path}/box
            description: a directory device from orch-testplugin
        """))
    (tmp_path / "m.yaml").write_text(textwrap.dedent("""\
        name: plugin-engine
        engine: shbench
        prompt: unused
        tokens: 5
        cooldown: 0
        sample_interval: 0.2s
        configs:
          light: --work 100
          heavy: --work 3000
        """))
    return tmp_path


@pytest.mark.slow
def test_plugin_engine_and_device_kind_run_a_matrix(workspace, plugin_path):
    code, out = orch_cli(workspace, "run", "m.yaml", "--device", "box", plugin=plugin_path)
    assert code == 0, out
    store = Store.open(str(workspace / "orch.db"))
    runs = Runs(store).current()
    assert sorted(r.config for r in runs) == ["heavy", "light"]
    assert {(r.status, r.engine, r.device) for r in runs} == {("ok", "shbench", "box")}
    for run in runs:
        assert len(store.frame("token", [run.id])) == 5
        assert run.remote_dir.startswith(f"{workspace}/box/orch-box/")
    assert store.device_by_name("box").kind == "directory"

    code, out = orch_cli(workspace, "devices", plugin=plugin_path)
    assert code == 0, out
    (line,) = [x for x in out.splitlines() if "box" in x and "directory" in x]
    assert f"directory {workspace}/box" in out and "a directory device from" in line


@pytest.mark.slow
def test_without_the_plugin_its_names_are_unknown(workspace):
    code, out = orch_cli(workspace, "devices")
    assert code == 2
    assert "devices.box.kind: unknown device kind 'directory' (known: adb, local, ssh" in out
    (workspace / "devices.yaml").write_text("devices: {}\n")
    code, out = orch_cli(workspace, "run", "m.yaml")
    assert code == 2
    assert "m.yaml:2: engine: unknown engine 'shbench' (known: bmoe, " in out


def test_a_broken_plugin_names_its_entry_point(monkeypatch):
    broken = EntryPoint(name="broken", value="orch_no_such_module:Adapter", group=plugins.ENGINES)
    monkeypatch.setattr(plugins, "_registry", lambda group: {"broken": broken})
    plugins.load.cache_clear()
    try:
        with pytest.raises(plugins.PluginError) as info:
            plugins.get_adapter("broken")
    finally:
        plugins.load.cache_clear()
    message = str(info.value)
    assert "orch.engines entry point broken = orch_no_such_module:Adapter" in message
    assert "ModuleNotFoundError" in message
