"""`orch run` in the terminal (issue 36, "In the terminal"): the live line and the closing
tables fit 80 columns without cutting the device, config, tok/s or ETA; the closing table is
per config with the devices side by side; without a terminal a line per cell start and end
and a heartbeat a minute; a cooldown shows its target and the temperature; the Ctrl-C hint
resumes with every option that was given. Views are tested on recorded rich consoles at 80
and 160 columns, with a clock the test moves (nothing sleeps)."""
from __future__ import annotations

import io
import re
import shlex
import textwrap

import pytest
from cli_helpers import SMALL_PROBE_MATRIX, orch
from rich.console import Console

from orchestrator.run.progress import Board, _BoardView

DEVICE = "oneplus-12-pro"
MODEL = "qwen3-30b-a3b-instruct-2507-q4_k_m"
CONFIG = "stream-c0-l4-overlap-cache4000"
WIDTHS = (80, 160)


class Cell:
    model, config, repeat = MODEL, CONFIG, 1


class Token:
    wall_ms = 200.0          # 5.00 tok/s


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def board(width: int, terminal: bool = False) -> tuple[Board, Clock]:
    """A board on a recorded console (not a live one: no refresh thread in a unit test;
    the live view is rendered by printing it, as the refresh does)."""
    clock = Clock()
    return Board(Console(file=io.StringIO(), record=True, width=width,
                         force_terminal=terminal), clock=clock), clock


def rendered(b: Board, width: int) -> str:
    """The live board as a terminal `width` columns wide shows it."""
    console = Console(file=io.StringIO(), record=True, width=width)
    console.print(_BoardView(b))
    return console.export_text()


def running(b: Board, clock: Clock, tokens: int = 300) -> None:
    device = b.device(DEVICE)
    device.start(DEVICE, 4, 0)
    device.cell_started(1, Cell())
    device.cell_running(Cell(), 1000)
    for i in range(tokens):
        device.token(Token(), i + 1)
    device.sample({"cpu_temp_mC": 51234, "mem_avail_kb": 4_000_000})
    clock.now += 60


@pytest.mark.parametrize("width", WIDTHS)
def test_live_line_keeps_device_config_tok_s_and_eta(width):
    b, clock = board(width)
    running(b, clock)
    text = rendered(b, width)
    lines = text.splitlines()
    assert all(len(line.rstrip()) <= width for line in lines), text
    assert "…" not in text, text
    for needed in (DEVICE, CONFIG, "5.00 tok/s", "ETA 12m20s"):
        assert needed in text, (needed, text)
    if width == 80:   # before: `[2/4] qwe…` and nothing else of the cell
        assert len(lines) == 1, text
    else:             # a wide terminal has room for what gave way at 80
        assert MODEL in text and "rep 2" in text and "51.2 °C" in text and "cells 0/4" in text


@pytest.mark.parametrize("width", (30, 50))
def test_a_too_narrow_terminal_wraps_the_line_and_cuts_nothing(width):
    b, clock = board(width)
    running(b, clock)
    text = rendered(b, width)
    assert "…" not in text
    assert all(len(line.rstrip()) <= width for line in text.splitlines())
    joined = text.replace("\n", "")
    for needed in (DEVICE, "5.00 tok/s", "ETA"):
        assert needed in text, (needed, text)
    assert CONFIG in joined.replace(" ", "") or CONFIG in text


@pytest.mark.parametrize("width", WIDTHS)
def test_cooldown_shows_target_and_temperature_not_the_last_cells_figures(width):
    """Before: the line kept the previous cell's tok/s and a frozen ETA while cooling."""
    b, clock = board(width)
    running(b, clock)
    device = b.devices[0]
    device.cell_done("ok", 1000)
    device.cell_started(2, Cell())
    device.cooldown(120, 80, 52.3, 45.0)
    first = rendered(b, width)
    assert "52.3→≤45.0 °C" in first and "1m20s left" in first, first
    assert "tok/s" not in first and "…" not in first, first
    assert DEVICE in first and CONFIG in first
    eta = re.search(r"ETA (\S+)", first)
    assert eta is not None, first
    clock.now += 30
    device.cooldown(120, 50, 49.0, 45.0)
    later = rendered(b, width)
    assert "49.0→≤45.0 °C" in later and "50s left" in later
    assert re.search(r"ETA (\S+)", later).group(1) != eta.group(1), later   # counting down


def test_without_a_terminal_a_line_per_cell_start_and_end_and_a_heartbeat_a_minute():
    b, clock = board(200)
    device = b.device(DEVICE)
    device.start(DEVICE, 2, 0)
    device.cell_started(0, Cell())
    device.cooldown(30)
    device.cell_running(Cell(), 1000)
    for i in range(10):
        device.token(Token(), i + 1)
    clock.now += 59
    device.token(Token(), 11)              # under a minute: no heartbeat yet
    clock.now += 2
    device.token(Token(), 12)              # a minute since the start line: one
    device.token(Token(), 13)              # ...and only one
    clock.now += 61
    device.sample({"cpu_temp_mC": 50000})  # no token for a minute (a long prefill): samples
    device.cell_done("ok", 13)
    lines = b.console.export_text().splitlines()
    label = f"{DEVICE} [1/2] {MODEL} {CONFIG} rep 2"
    assert lines[1] == f"{label}: cooldown, up to 30 s", lines
    assert lines[2] == f"{label}: started (1000 tokens)", lines
    beats = [line for line in lines if ": running " in line]
    # the ETA before a cell has ended: this cell's time per token for both cells' tokens
    assert beats == [f"{label}: running 1m01s: 12/1000 tokens, 5.00 tok/s mean, "
                     f"ETA 2h48m",
                     f"{label}: running 2m02s: 13/1000 tokens, 5.00 tok/s mean, "
                     f"ETA 5h10m"], lines
    assert lines[-1].startswith(f"{label}: ok 13 tokens, 5.00 tok/s mean"), lines


def test_without_a_terminal_a_long_cooldown_has_its_heartbeat_too():
    b, clock = board(200)
    device = b.device(DEVICE)
    device.start(DEVICE, 1, 0)
    device.cell_started(0, Cell())
    device.cooldown(600, 600, 60.0, 45.0)
    for left in range(599, 400, -1):
        clock.now += 1
        device.cooldown(600, left, 55.0, 45.0)
    lines = b.console.export_text().splitlines()
    assert lines[1].endswith("cooldown to ≤ 45.0 °C, up to 600 s"), lines
    beats = [line for line in lines if "cooling" in line]
    assert len(beats) == 3 and beats[0].endswith("cooling 55.0→≤45.0 °C, 9m00s left"), lines


def _comparison(devices: list[str], models: tuple[str, ...] = (MODEL, "gemma-3n-e4b")):
    """What results/run_end.py reads for `models` on `devices` (the view's input)."""
    from orchestrator.results.comparison import ConfigRow, SideComparison
    from orchestrator.results.listings import Listing
    from orchestrator.results.query import Side
    from orchestrator.results.run_end import RunEnd
    from orchestrator.stats.uncertainty import Comparison, Interval

    rows = []
    for model in models:
        for k, config in enumerate(("mmap", CONFIG)):
            means = [Interval(4.25 + k + i, 4.01 + k + i, 4.49 + k + i, 3)
                     for i, _ in enumerate(devices)]
            vs = [Comparison(1.2345, 1.1, 1.3, 0.01, "welch", 3, 3) for _ in devices[1:]]
            rows.append(ConfigRow(model, config, means, [[1, 2, 3]] * len(devices), vs,
                                  [[]] * len(devices), [None] * len(devices)))
    sides = [Side(d, d, None, []) for d in devices]
    listings = {d: Listing([], {}, "", i + 1) for i, d in enumerate(devices)}
    return RunEnd(listings, SideComparison(sides, rows, [None], [0], []))


@pytest.mark.parametrize("width", WIDTHS)
def test_closing_table_of_two_devices_is_side_by_side_per_config(width):
    """Before: one table per device, one row per run, no model column, and at 80 columns
    cells cut to `4…`."""
    from orchestrator.report.terminal.run_end import print_run_end

    end = _comparison([DEVICE, "celeron"])
    console = Console(file=io.StringIO(), record=True, width=width)
    print_run_end(console, end)
    text = console.export_text()
    assert "…" not in text, text
    assert all(len(line.rstrip()) <= width for line in text.splitlines()), text
    header = text.split("┡")[0]
    assert DEVICE in header and "celeron" in header and "model" in header, header
    assert "celeron/" in header   # the ratio of the second device to the first
    body = [line for line in text.splitlines() if "×" in line]
    assert len(body) == 4, text   # one row per (model, config), not per run
    first = body[0]
    assert "4.25" in first and "5.25" in first and "1.23×" in first, first
    assert "gemma-3n-e4b" in body[2]      # the model column (a long name folds, whole)
    first_column = "".join(line.split("│")[1].strip() for line in text.splitlines()
                           if line.startswith("│"))
    assert first_column.startswith(MODEL + MODEL), text   # folded over lines, not cut
    if width == 160:
        assert "4.01–4.49" in first and "5.01–5.49" in first, first
    else:
        assert "left out to fit 80 columns" in text and "95% CI" in text


def test_closing_table_has_a_model_column_for_several_models_else_a_title():
    from orchestrator.report.terminal.run_end import config_columns, title

    two = _comparison(["local"])
    assert [c.header for c in config_columns(two)] == ["model", "config", "tok/s", "95% CI",
                                                       "runs"]
    assert MODEL not in title(two)
    one = _comparison(["local"], (MODEL,))
    assert [c.header for c in config_columns(one)][0] == "config"
    assert f"model {MODEL}" in title(one)


def test_the_per_run_table_drops_columns_rather_than_cut_them():
    from orchestrator.report.terminal.fit import FitColumn, fitted_table

    columns = [FitColumn("device", [DEVICE]), FitColumn("config", [CONFIG]),
               FitColumn("decode mean", ["42.31"], "right")]
    columns += [FitColumn(f"figure {i}", ["1234.56"], "right", i) for i in range(1, 12)]
    left = {}
    for width in (80, 160, 400):
        console = Console(file=io.StringIO(), record=True, width=width)
        table, left[width] = fitted_table(console, columns)
        console.print(table)
        text = console.export_text()
        assert "…" not in text and DEVICE in text and CONFIG in text and "42.31" in text
        assert all(len(line) <= width for line in text.splitlines())
        # the highest `drop` goes first
        assert left[width] == [f"figure {i}" for i in range(12 - len(left[width]), 12)]
    assert len(left[80]) > len(left[160]) > len(left[400]) == 0


def test_resume_hint_round_trips_every_option_given():
    """Before: `orch run X --resume`, without the --device it needed (exit 2)."""
    from orchestrator.cli.run import _given, resume_command, run

    typed = ["my matrix.yaml", "-d", "oneplus", "--device", "celeron", "--db", "s.db",
             "-i", "inv.yaml", "--link-grace", "30", "--force", "--runs"]
    ctx = run.make_context("run", list(typed))
    hint = resume_command("my matrix.yaml", _given(ctx))
    words = shlex.split(hint)
    assert words[:2] == ["orch", "run"]
    again = run.make_context("run", words[2:]).params
    assert again["resume"] is True
    for name, value in ctx.params.items():
        if name != "resume":
            assert again[name] == value, (name, hint)
    plain = run.make_context("run", ["m.yaml"])
    assert resume_command("m.yaml", _given(plain)) == "orch run m.yaml --resume"


@pytest.mark.slow
def test_orch_run_on_two_devices_without_a_terminal(workspace):
    """End to end on the two local devices, output not a terminal (CliRunner): a start and
    an end line per cell, and one table per config with both devices side by side."""
    (workspace / "m.yaml").write_text(textwrap.dedent(SMALL_PROBE_MATRIX))
    code, out = orch("run", "m.yaml", "-d", "local", "-d", "other")
    assert code == 0, out
    for device in ("local", "other"):
        for config in ("c0", "c1"):
            assert re.search(rf"^{device} \[\d/2\] {config} rep 1: started \(12 tokens\)$",
                             out, re.M), out
            assert re.search(rf"^{device} \[\d/2\] {config} rep 1: ok 12 tokens, [\d.]+ tok/s",
                             out, re.M), out
    table = out[out.index("decode tok/s per config"):]
    header = table.split("┡")[0]
    assert "local" in header and "other" in header and "other/" in header, table
    assert len([line for line in table.splitlines() if line.startswith("│")]) == 2, table
    assert "│ run │" not in out          # the per-run table is behind --runs
    code, out = orch("run", "m.yaml", "-d", "local", "--resume", "--runs")
    assert code == 0 and "2 already ok, skipped" in out and "┃ run ┃" in out, out


def test_a_warm_up_run_is_named_and_no_cell_of_the_count():
    """A decided session's warm-up run (repeat -1) shows as `[warm-up]`, and the cells
    after it are counted and timed as if it had not run."""
    class WarmUp(Cell):
        repeat = -1

    b, clock = board(200)
    device = b.device(DEVICE)
    device.cell_started(-1, WarmUp())
    device.cell_running(WarmUp(), 16)
    clock.now += 5
    device.cell_done("ok", 16)
    device.start(DEVICE, 2, 0)
    device.cell_started(0, Cell())
    lines = b.console.export_text().splitlines()
    assert lines[0].startswith(f"{DEVICE} [warm-up] {MODEL} {CONFIG}: started (16 tokens)"), lines
    assert any(line.startswith(f"{DEVICE} [warm-up] {MODEL} {CONFIG}: ok") for line in lines)
    assert (device.done, device.cell_times) == (0, [])
    assert device.label(markup=False) == f"[1/2] {MODEL} {CONFIG} rep 2"
