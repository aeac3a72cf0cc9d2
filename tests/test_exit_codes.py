"""Each exit code is what the README's "Exit codes" table says: the error classes carry the
codes (orchestrator/errors.py), the CLI's handler (cli/handler.py) prints one line and exits
with them, and the commands give them: `orch show 999` on an empty store exits 3, a session
or import held by another orch exits 4 (tests/test_lifecycle.py, test_import_atomic.py)."""
from __future__ import annotations

import re

import click
import pytest
from cli_helpers import orch
from click.testing import CliRunner
from conftest import REPO

from orchestrator import errors
from orchestrator.cli.handler import friendly
from orchestrator.db.session_lock import DeviceTaken, ImportBusy, SessionBusy
from orchestrator.db.store import Store
from orchestrator.run.lifecycle import DeviceBusy
from orchestrator.transports.base import TransportError


def _documented() -> dict[str, int]:
    """Class name -> exit code, from the README's table."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    table = text[text.index("#### Exit codes"):]
    classes: dict[str, int] = {}
    for code, names in re.findall(r"^\| (\d+) \|[^|]*\| ([^|]*) \|$", table, re.MULTILINE):
        for name in filter(None, (n.strip() for n in names.split(","))):
            classes[name] = int(code)
    return classes


def test_the_readme_table_is_the_classes_codes():
    documented = _documented()
    assert documented == {
        "Failed": 1, "DeviceError": 1, "BuildError": 1, "StoreWriteError": 1,
        "ConfigError": 2, "StoreError": 2, "NotFound": 3, "Busy": 4, "Regression": 5,
        "Interrupted": 130}
    for name, code in documented.items():
        cls = getattr(errors, name)
        assert issubclass(cls, errors.OrchError)
        made = cls("x", 2) if cls is errors.Interrupted else cls("x")
        assert made.exit_code == code, name


def _exit(exc: BaseException) -> tuple[int, str]:
    @click.command()
    @friendly
    def fail() -> None:
        raise exc
    result = CliRunner().invoke(fail, [], catch_exceptions=False)
    return result.exit_code, result.output


@pytest.mark.parametrize(("exc", "code", "line"), [
    (errors.Failed("it broke"), 1, "error: it broke"),
    (errors.ConfigError("bad"), 2, "error: bad"),
    (errors.StoreError("no store"), 2, "error: no store"),
    (errors.NotFound("no run 9"), 3, "error: no run 9"),
    (errors.Regression("1 of 2 comparisons slower"), 5, "regression: 1 of 2 comparisons slower"),
    (SessionBusy("session 7 is being run"), 4, "error: session 7 is being run"),
    (ImportBusy("another import"), 4, "error: another import"),
    (DeviceTaken("device d is served"), 4, "error: device d is served"),
    (DeviceBusy("local: another orch job runs"), 4, "device error: local: another orch job runs"),
    (TransportError("gone"), 1, "device error: gone"),
    (errors.StoreWriteError("disk full"), 1, "error: disk full"),
    (errors.Interrupted("orch x: stopped by SIGTERM", 15), 143, "orch x: stopped by SIGTERM"),
    (KeyboardInterrupt(), 130, "interrupted"),
    (errors.Failed(), 1, ""),    # reported already: the code only
])
def test_the_handler_prints_one_line_and_exits_with_the_code(exc, code, line):
    got, output = _exit(exc)
    assert (got, output.strip()) == (code, line)


def test_build_errors_are_build_errors():
    from orchestrator.tools.llamacpp_build import BuildError
    from orchestrator.tools.probe_build import ProbeBuildError

    assert BuildError is errors.BuildError and issubclass(ProbeBuildError, errors.BuildError)


@pytest.mark.parametrize(("args", "line"), [
    (("show", "999"), "error: no run 999 in "),
    (("tokens", "999"), "error: no run 999 in "),
    (("table", "9"), "error: no session 9 in "),
    (("export", "9"), "error: no session 9 in "),
    (("routes", "999"), "error: run 999: no such run"),
])
def test_not_found_exits_3_with_one_line(args, line, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ORCH_DB", raising=False)
    Store.open(str(tmp_path / "orch.db"))       # an empty store
    code, output = orch(*args)
    assert code == 3 and len(output.strip().splitlines()) == 1, output
    assert output.startswith(line), output
