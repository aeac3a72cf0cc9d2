"""What a device, an engine or a file wrote reaches the terminal and markdown with its control
characters made visible (`\\x1b` as four characters), and names are refused at the door:
grid-built config names follow the name rule (a full match: "x\\n" too), `orch import
--device/--name` as well."""
from __future__ import annotations

import sqlite3
import textwrap
from pathlib import Path

import pytest
from cli_helpers import orch

from orchestrator.config.matrix import _NAME
from orchestrator.escape import visible

ESC = "\x1b"

ENGINE = """\
name: esc
engine: generic
binary: /bin/sh
engine_options:
  argv: ["{binary}", "-c", "printf 'tail\\\\033[2J\\\\033]0;pwned\\\\007\\\\n' >&2; exit 3", "sh"]
prompt: p
cooldown: 0
sample_interval: 0.1s
configs:
  a: ""
"""


def test_visible() -> None:
    assert visible("a\x1b[2Jb") == "a\\x1b[2Jb"
    assert visible("t\tn\n\x07\x7f\x9b") == "t\tn\n\\x07\\x7f\\x9b"
    assert visible("t\tn\n", keep="") == "t\\x09n\\x0a"
    assert visible("grüße — ok") == "grüße — ok"


def test_the_name_rule_is_a_full_match() -> None:
    assert _NAME.fullmatch("a,b=1+c") and not _NAME.fullmatch("x\n")


@pytest.mark.parametrize("value", ["\\x1b]0;pwned\\x07", "a b", "1\\n"])
def test_a_grid_value_that_names_badly_is_refused_at_load(tmp_path: Path, monkeypatch,
                                                          value: str) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "m.yaml").write_text(textwrap.dedent(f"""\
        name: g
        engine: generic
        binary: /bin/true
        prompt: p
        grid:
          --x: [1, "{value}"]
        """))
    code, output = orch("run", "m.yaml")
    assert code == 2, output
    assert "grid" in output and "--x" in output, output
    assert ESC not in output


@pytest.mark.parametrize("option", ["--device", "--name"])
@pytest.mark.parametrize("value", ["a\nb", "x\x1b[2J", "ok\n"])
def test_import_device_and_name_follow_the_rule(tmp_path: Path, monkeypatch, option: str,
                                                value: str) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "study").mkdir()
    code, output = orch("import", "study", option, value)
    assert code == 2, output
    assert ESC not in output
    assert not (tmp_path / "orch.db").exists() or "session" not in output


def test_show_runs_and_table_print_escapes_visibly(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "m.yaml").write_text(ENGINE)
    code, output = orch("run", "m.yaml")
    assert code == 1, output
    assert ESC not in output
    code, output = orch("show", "1")
    assert code == 0, output
    assert "engine stderr" in output and "tail\\x1b[2J\\x1b]0;pwned\\x07" in output, output
    assert ESC not in output and "\x07" not in output
    # a config name with an escape, put in the store behind orch's back
    with sqlite3.connect(tmp_path / "orch.db") as db:
        db.execute("UPDATE run SET config = ?", ("c\x1b]0;pwned\x07",))
    for args in (["runs"], ["show", "1"], ["table"], ["table", "--format", "md"]):
        code, output = orch(*args)
        assert ESC not in output and "\x07" not in output, (args, output)
    code, output = orch("runs")
    assert "c\\x1b]0;pwned\\x07" in output.replace("\n", "") or "\\x1b" in output, output


def test_the_progress_board_shows_data_as_text() -> None:
    """Names and device messages on the run's board: control characters visible, rich markup
    in them (`[red]`) printed as text, on a terminal (the live bar) and off it."""
    import io

    from rich.console import Console

    from orchestrator.run.progress import Board

    class Cell:
        model, config, repeat = "m[bold]", "c\x1b[2J", 0

    for terminal in (False, True):
        board = Board(Console(file=io.StringIO(), force_terminal=terminal, width=200))
        device = board.device("dev[red]x")
        device.start("dev", 1, 0)
        device.cell_started(0, Cell())
        device.cell_running(Cell(), 10)
        device.note("hi [red]there\x07")
        device.cell_done("ok", 0)
        board.close()
        shown = board.console.file.getvalue()
        assert "dev[red]x" in shown and "m[bold]" in shown and "[red]there\\x07" in shown, shown
        assert "c\\x1b[2J" in shown and "\x07" not in shown
        assert ESC not in shown or terminal   # a terminal's own colour codes are rich's
