"""What a user sees while a matrix runs: a live board on a terminal (one line per device: cell,
tokens, tok/s now and mean, temperature, free RAM, cooldown countdown, cells done, ETA), and
plain lines when the output is not a terminal, so logs stay readable."""
from __future__ import annotations

import threading
import time
from typing import Any

from rich.console import Console
from rich.markup import escape as markup_escape
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn
from rich.progress import Progress as RichProgress

from orchestrator.escape import visible
from orchestrator.stats.figures import rate
from orchestrator.stats.status import Status


class Progress:
    """Silent base: every hook is a no-op (tests, library use)."""

    def start(self, device: str, cells: int, skipped: int) -> None: ...
    def cell_started(self, index: int, cell: Any) -> None: ...
    def cell_running(self, cell: Any, tokens: int) -> None: ...
    def token(self, row: Any, count: int) -> None: ...
    def sample(self, values: dict[str, int]) -> None: ...
    def cooldown(self, seconds: float, left: float | None = None, temp_c: float | None = None) -> None: ...
    def cell_done(self, status: str, tokens: int) -> None: ...
    def note(self, message: str) -> None: ...
    def finish(self) -> None: ...


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


class Board:
    """The shared display of every device of one `orch run` (devices run concurrently)."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console(stderr=True)
        self.live = self.console.is_terminal
        self.lock = threading.Lock()
        self.bar: RichProgress | None = None
        if self.live:
            self.bar = RichProgress(TextColumn("[bold]{task.fields[device]}[/]"),
                                    TextColumn("{task.description}"), BarColumn(bar_width=20),
                                    MofNCompleteColumn(), TextColumn("{task.fields[status]}"),
                                    console=self.console, transient=False)
            self.bar.start()

    def device(self, name: str) -> "DeviceProgress":
        return DeviceProgress(self, name)

    def print(self, text: str) -> None:
        with self.lock:
            self.console.print(visible(text), highlight=False)   # names, engine messages

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None


def _shown(text: object) -> str:
    """Data (a device, model or config name, a device's message) as the board shows it: its
    control characters made visible and its brackets no rich markup (`[red]` in a name is
    text, not a colour)."""
    return markup_escape(visible(str(text)))


class DeviceProgress(Progress):
    def __init__(self, board: Board, device: str) -> None:
        self.board, self.device = board, _shown(device)
        self.task: Any = None
        self.cells = self.done = 0
        self.prefix = ""
        self.cell_times: list[float] = []
        self._reset()

    def _reset(self) -> None:
        self.total = self.count = 0
        self.wall = self.current = 0.0
        self.temp_c: float | None = None
        self.free_gib: float | None = None
        self.started = time.monotonic()

    # -- helpers -------------------------------------------------------------------------------
    def _status(self, extra: str = "") -> str:
        parts = []
        if self.count:
            mean = rate(self.count, self.wall)
            parts.append(f"{self.current:6.2f} tok/s now, "
                         + (f"{mean:6.2f} mean" if mean is not None else "mean —"))
        if self.temp_c is not None:
            parts.append(f"{self.temp_c:.1f}°C")
        if self.free_gib is not None:
            parts.append(f"{self.free_gib:.2f} GiB free")
        if extra:
            parts.append(extra)
        parts.append(f"cells {self.done}/{self.cells}")
        if self.cell_times and self.done < self.cells:
            per_cell = sum(self.cell_times) / len(self.cell_times)
            parts.append(f"ETA {_duration(per_cell * (self.cells - self.done))}")
        return " · ".join(parts)

    def _update(self, **fields: Any) -> None:
        bar = self.board.bar
        if bar is None:
            return
        if self.task is None:
            self.task = bar.add_task(self.prefix, total=self.total or None, device=self.device,
                                     status="")
        bar.update(self.task, **fields)

    # -- hooks ---------------------------------------------------------------------------------
    def start(self, device: str, cells: int, skipped: int) -> None:
        self.cells = cells
        extra = f" ({skipped} already ok, skipped)" if skipped else ""
        self.board.print(f"[bold]{self.device}[/]: {cells} cell(s) to run{extra}")

    def cell_started(self, index: int, cell: Any) -> None:
        model = "" if cell.model == "-" else f"{_shown(cell.model)} "
        rep = f" #{cell.repeat + 1}" if cell.repeat else ""
        self.prefix = f"\\[{index + 1}/{self.cells}] {model}{_shown(cell.config)}{rep}"
        self._cell_clock = time.monotonic()

    def cell_running(self, cell: Any, tokens: int) -> None:
        self._reset()
        self.total = tokens
        self._update(description=self.prefix, total=tokens, completed=0, status=self._status())

    def token(self, row: Any, count: int) -> None:
        wall = getattr(row, "wall_ms", None) or 0.0
        self.count = count
        if wall > 0:
            self.wall += wall
            self.current = 1000.0 / wall
        self._update(completed=count, status=self._status())

    def sample(self, values: dict[str, int]) -> None:
        if "cpu_temp_mC" in values:
            self.temp_c = values["cpu_temp_mC"] / 1000.0
        if "mem_avail_kb" in values:
            self.free_gib = values["mem_avail_kb"] / 1048576.0
        self._update(status=self._status())

    def cooldown(self, seconds: float, left: float | None = None, temp_c: float | None = None) -> None:
        if temp_c is not None:
            self.temp_c = temp_c
        if self.board.bar is None:
            if left is None:
                self.board.print(f"  {self.device}: cooldown up to {seconds:g} s")
            return
        remaining = seconds if left is None else left
        self._update(description=f"{self.prefix} (cooling)",
                     status=self._status(f"cooldown {_duration(remaining)} left"))

    def cell_done(self, status: str, tokens: int) -> None:
        self.done += 1
        took = time.monotonic() - getattr(self, "_cell_clock", self.started)
        self.cell_times.append(took)
        mean = rate(tokens, self.wall)
        colour = "green" if status == Status.OK else "red"
        shown = (f"{tokens} tokens, " + (f"{mean:.2f} tok/s mean" if mean is not None
                                         else "no decode time recorded") if tokens
                 else "no per-token rows (the engine reports totals)")
        self.board.print(f"{self.device} {self.prefix}: [{colour}]{_shown(status)}[/] {shown} "
                         f"({took:.1f} s)")
        if self.board.bar is not None and self.task is not None:
            self.board.bar.remove_task(self.task)
            self.task = None

    def note(self, message: str) -> None:
        self.board.print(f"  {self.device}: [yellow]{_shown(message)}[/]")

    def finish(self) -> None:
        if self.board.bar is not None and self.task is not None:
            self.board.bar.remove_task(self.task)
            self.task = None
