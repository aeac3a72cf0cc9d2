"""What a user sees while a matrix runs: a live bar on a terminal, plain lines otherwise."""
from __future__ import annotations

import time
from typing import Any

from rich.console import Console
from rich.progress import (BarColumn, MofNCompleteColumn, Progress as RichProgress, TextColumn,
                           TimeElapsedColumn)


class Progress:
    """Silent base: every hook is a no-op (tests, library use)."""

    def start(self, device: str, cells: int, skipped: int) -> None: ...
    def cell_started(self, index: int, cell: Any) -> None: ...
    def cell_running(self, cell: Any, tokens: int) -> None: ...
    def token(self, row: Any, count: int) -> None: ...
    def cooldown(self, seconds: float) -> None: ...
    def cell_done(self, status: str, tokens: int) -> None: ...
    def note(self, message: str) -> None: ...
    def finish(self) -> None: ...


class ConsoleProgress(Progress):
    """Per cell: config name, tokens so far, current and mean tok/s. On a terminal a rich bar
    redrawn in place; when piped, one line per cell so logs stay readable."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console(stderr=True)
        self.live = self.console.is_terminal
        self._bar: RichProgress | None = None
        self._task: Any = None
        self._prefix = ""
        self._total = 0
        self._wall = 0.0
        self._count = 0
        self._cur = 0.0
        self._started = 0.0

    def start(self, device: str, cells: int, skipped: int) -> None:
        self.device, self.cells = device, cells
        extra = f" ({skipped} already ok, skipped)" if skipped else ""
        self.console.print(f"[bold]{device}[/]: {cells} cell(s) to run{extra}")
        if self.live:
            self._bar = RichProgress(TextColumn("{task.description}"), BarColumn(),
                                     MofNCompleteColumn(), TextColumn("{task.fields[rate]}"),
                                     TimeElapsedColumn(), console=self.console, transient=True)
            self._bar.start()

    def cell_started(self, index: int, cell: Any) -> None:
        model = "" if cell.model == "-" else f"{cell.model} "
        rep = f" #{cell.repeat + 1}" if cell.repeat else ""
        self._prefix = f"[{index + 1}/{self.cells}] {model}{cell.config}{rep}"

    def cell_running(self, cell: Any, tokens: int) -> None:
        self._total, self._wall, self._count, self._cur = tokens, 0.0, 0, 0.0
        self._started = time.monotonic()
        if self._bar is not None:
            self._task = self._bar.add_task(self._prefix, total=tokens, rate="")

    def token(self, row: Any, count: int) -> None:
        wall = getattr(row, "wall_ms", None) or 0.0
        self._count = count
        if wall > 0:
            self._wall += wall
            self._cur = 1000.0 / wall
        if self._bar is not None and self._task is not None:
            mean = self._count / (self._wall / 1000.0) if self._wall else 0.0
            self._bar.update(self._task, completed=count,
                             rate=f"{self._cur:6.2f} tok/s now, {mean:6.2f} mean")

    def cooldown(self, seconds: float) -> None:
        if not self.live:
            self.console.print(f"  cooldown {seconds:g} s")

    def cell_done(self, status: str, tokens: int) -> None:
        if self._bar is not None and self._task is not None:
            self._bar.remove_task(self._task)
            self._task = None
        mean = tokens / (self._wall / 1000.0) if self._wall else 0.0
        colour = "green" if status == "ok" else "red"
        took = time.monotonic() - self._started
        self.console.print(f"{self._prefix}: [{colour}]{status}[/] {tokens} tokens, "
                           f"{mean:.2f} tok/s mean ({took:.1f} s)")

    def note(self, message: str) -> None:
        self.console.print(f"  [yellow]{message}[/]")

    def finish(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
