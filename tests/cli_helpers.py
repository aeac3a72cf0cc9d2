"""Running the `orch` CLI in-process from tests."""
from __future__ import annotations

from click.testing import CliRunner

from orchestrator.cli import main


def orch(*args: str, input: str | None = None) -> tuple[int, str]:
    """(exit code, stdout+stderr) of `orch ARGS...`."""
    result = CliRunner().invoke(main, list(args), input=input, catch_exceptions=False)
    return result.exit_code, result.output


def orch_ok(*args: str) -> str:
    """The output of `orch ARGS...`, which must exit 0."""
    code, output = orch(*args)
    assert code == 0, output
    return output
