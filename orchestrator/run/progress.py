"""What a user sees while a matrix runs (docs/reliability.md, "What `orch run` prints").

On a terminal: a live board, one line per device (cell, tokens, tok/s now and mean,
temperature, free RAM, cells done, ETA; during a cooldown its target, the temperature now and
the time left), laid out for the terminal's width by run/progress_line.py. Without one (a log
file, nohup): plain lines, one when a cell starts and one when it ends, and a heartbeat a
minute while it runs or cools down, so a 30-minute cell is not 30 minutes of silence. The
heartbeat is driven by the events the cell already sends (tokens, samples, cooldown
readings), not by a timer thread of its own."""
from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from rich.console import Console, ConsoleOptions, RenderResult
from rich.live import Live
from rich.markup import escape as markup_escape
from rich.text import Text

from orchestrator.escape import visible
from orchestrator.run.progress_line import Part, bar, duration, fit_line
from orchestrator.stats.figures import rate
from orchestrator.stats.status import Status

HEARTBEAT_S = 60.0   # a plain progress line at least this often while a cell runs or cools


class Progress:
    """Silent base: every hook is a no-op (tests, library use)."""

    def start(self, device: str, cells: int, skipped: int) -> None: ...
    def cell_started(self, index: int, cell: Any) -> None: ...
    def cell_running(self, cell: Any, tokens: int) -> None: ...
    def token(self, row: Any, count: int) -> None: ...
    def sample(self, values: dict[str, int]) -> None: ...
    def cooldown(self, seconds: float, left: float | None = None, temp_c: float | None = None,
                 target_c: float | None = None) -> None: ...
    def cell_done(self, status: str, tokens: int) -> None: ...
    def note(self, message: str) -> None: ...
    def finish(self) -> None: ...


class Board:
    """The shared display of every device of one `orch run` (devices run concurrently).
    `clock`: seconds, monotonic (tests pass their own, so a heartbeat needs no waiting)."""

    def __init__(self, console: Console | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 heartbeat_s: float = HEARTBEAT_S) -> None:
        self.console = console or Console(stderr=True)
        self.clock, self.heartbeat_s = clock, heartbeat_s
        self.live = self.console.is_terminal
        self.lock = threading.Lock()          # one printer at a time
        self._listed = threading.Lock()       # the device list; never held while printing
        self.devices: list[DeviceProgress] = []
        self.view: Live | None = None
        # set when the run must stop: the reader of the output went away (`orch run M |
        # head -1`); run_devices makes it the runners' stop (also Ctrl-C's in threads)
        self.stop = threading.Event()
        if self.live:
            self.view = Live(_BoardView(self), console=self.console, refresh_per_second=4,
                             transient=True)
            self.view.start()

    def device(self, name: str) -> DeviceProgress:
        progress = DeviceProgress(self, name)
        with self._listed:
            self.devices.append(progress)
        return progress

    def print(self, text: str) -> None:
        with self.lock:
            try:
                self.console.print(visible(text), highlight=False)   # names, engine messages
            except BrokenPipeError:
                self._reader_gone()

    def _reader_gone(self) -> None:
        """A broken pipe: the runners stop as on a signal (engine stopped, run interrupted,
        session ended) and orch exits 141, 128 + SIGPIPE (cli/run.py, entry.py)."""
        from orchestrator.run.lifecycle import STOPPING

        if STOPPING.signum is None:
            STOPPING.signum = signal.SIGPIPE
        self.stop.set()

    def lines(self, width: int) -> list[Text]:
        """The live lines of every device with a cell under way, for `width` columns."""
        with self._listed:   # the refresh thread renders while a worker prints: no self.lock
            devices = list(self.devices)
        now = self.clock()
        out = []
        for device in devices:
            parts = device.parts(now)
            for line in fit_line(parts, width) if parts else []:
                text = Text(line)
                if line.startswith(device.name):
                    text.stylize("bold", 0, len(device.name))
                out.append(text)
        return out

    def close(self) -> None:
        if self.view is not None:
            self.view.stop()
            self.view = None


class _BoardView:
    """The board as rich renders it: laid out again at every refresh for the width then."""

    def __init__(self, board: Board) -> None:
        self.board = board

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield from self.board.lines(options.max_width)


def _shown(text: object) -> str:
    """Data (a device, model or config name, a device's message) as the board shows it: its
    control characters made visible and its brackets no rich markup (`[red]` in a name is
    text, not a colour)."""
    return markup_escape(visible(str(text)))


def _plain(text: object) -> str:
    """Data on a live line (no markup there): control characters made visible."""
    return visible(str(text))


class DeviceProgress(Progress):
    """One device's part of the board: its state, its hooks, its line."""

    def __init__(self, board: Board, device: str) -> None:
        self.board, self.device, self.name = board, _shown(device), _plain(device)
        self.cells = self.done = 0
        self.cell_times: list[float] = []
        self.cell: tuple[str, str, str, str] | None = None   # [i/n], model, config, rep
        self.warm_up = False
        self.phase = "idle"                         # idle | starting | cooling | running
        self.cell_clock = self.run_clock = self.last_line = board.clock()
        self._reset()

    def _reset(self) -> None:
        """A new cell or cooldown: nothing of the previous cell's figures stays on screen."""
        self.total = self.count = 0
        self.wall = self.current = 0.0
        self.temp_c: float | None = None
        self.free_gib: float | None = None
        self.target_c: float | None = None
        self.cool_left: float | None = None

    # -- what is shown -------------------------------------------------------------------------
    def label(self, markup: bool = True) -> str:
        """"[2/4] qwen stream-c0 rep 2": the cell, as every line about it names it."""
        if self.cell is None:
            return ""
        index, model, config, rep = self.cell
        index = "\\" + index if markup else index
        name = (_shown if markup else _plain)
        return " ".join(x for x in (index, name(model) if model else "", name(config), rep) if x)

    def rate_so_far(self) -> float | None:
        """The cell's tok/s so far (stats/figures.py rate: tokens over their decode time)."""
        return rate(self.count, self.wall) if self.count else None

    def eta(self, now: float) -> float | None:
        """Seconds until the device's last cell ends: the mean time of its cells so far (a
        cooldown included) for those left, less the time this one has run; before a cell has
        ended, from the share of this cell's tokens done. None: not known yet."""
        left = self.cells - self.done
        if left <= 0:
            return None
        elapsed = now - self.cell_clock
        if self.cell_times:
            per_cell = sum(self.cell_times) / len(self.cell_times)
        elif self.phase == "running" and self.total and self.count:
            per_cell = elapsed * self.total / self.count
        else:
            return None
        return max(0.0, per_cell - elapsed) + per_cell * (left - 1)

    def parts(self, now: float) -> list[Part]:
        """The live line's parts, most needed first; [] when no cell is under way."""
        if self.phase == "idle" or self.cell is None:
            return []
        index, model, config, rep = self.cell
        eta = self.eta(now)
        head = [Part(self.name), Part(index, glued=True),
                Part(_plain(model), 2, glued=True) if model else Part(""),
                Part(_plain(config), glued=True), Part(rep, 3, glued=True)]
        tail = [Part(f"cells {self.done}/{self.cells}", 5),
                Part(f"ETA {duration(eta)}" if eta is not None else "ETA —")]
        if self.phase == "starting":
            return _joined(head, [Part("starting")], tail)
        if self.phase == "cooling":
            left = f"{duration(self.cool_left)} left" if self.cool_left is not None else ""
            return _joined(head, [Part(self._cooling()), Part(left, glued=True)], tail)
        mean = self.rate_so_far()
        body = [Part(bar(self.count, self.total), 9),
                Part(f"{self.count}/{self.total} tok" if self.total else f"{self.count} tok", 4),
                Part(f"{self.current:.2f} tok/s" if self.count else "— tok/s"),
                Part(f"mean {mean:.2f}" if mean is not None else "", 7),
                Part(f"{self.temp_c:.1f} °C" if self.temp_c is not None else "", 6),
                Part(f"{self.free_gib:.2f} GiB free" if self.free_gib is not None else "", 8)]
        return _joined(head, body, tail)

    def _cooling(self) -> str:
        """"cooling 52.3→≤45.0 °C": the temperature now and the cooldown's target."""
        now_c, target = self.temp_c, self.target_c
        if target is None:
            return "cooling" + (f" at {now_c:.1f} °C" if now_c is not None else "")
        return (f"cooling {now_c:.1f}→≤{target:.1f} °C" if now_c is not None
                else f"cooling to ≤{target:.1f} °C")

    # -- hooks ---------------------------------------------------------------------------------
    def start(self, device: str, cells: int, skipped: int) -> None:
        self.cells = cells
        extra = f" ({skipped} already ok, skipped)" if skipped else ""
        self.board.print(f"[bold]{self.device}[/]: {cells} cell(s) to run{extra}")

    def cell_started(self, index: int, cell: Any) -> None:
        model = "" if cell.model == "-" else str(cell.model)
        # a warm-up run (repeat -1, run/decisions.py) is no cell of the count or the ETA
        self.warm_up = cell.repeat < 0
        self.cell = (("[warm-up]", model, str(cell.config), "") if self.warm_up else
                     (f"[{index + 1}/{self.cells}]", model, str(cell.config),
                      f"rep {cell.repeat + 1}"))
        self.cell_clock = self.last_line = self.board.clock()
        self.phase = "starting"   # its cooldown, if any, then the engine's start
        self._reset()

    def cell_running(self, cell: Any, tokens: int) -> None:
        self._reset()
        self.phase, self.total = "running", tokens
        self.run_clock = self.board.clock()
        if not self.board.live:
            self._line(f"started ({tokens} tokens)")

    def token(self, row: Any, count: int) -> None:
        wall = getattr(row, "wall_ms", None) or 0.0
        self.count = count
        if wall > 0:
            self.wall += wall
            self.current = 1000.0 / wall
        self._heartbeat()

    def sample(self, values: dict[str, int]) -> None:
        if "cpu_temp_mC" in values:
            self.temp_c = values["cpu_temp_mC"] / 1000.0
        if "mem_avail_kb" in values:
            self.free_gib = values["mem_avail_kb"] / 1048576.0
        self._heartbeat()

    def cooldown(self, seconds: float, left: float | None = None, temp_c: float | None = None,
                 target_c: float | None = None) -> None:
        first = self.phase != "cooling" or self.cool_left is None
        self.phase = "cooling"
        self.temp_c = temp_c if temp_c is not None else self.temp_c
        self.target_c = target_c if target_c is not None else self.target_c
        self.cool_left = seconds if left is None else max(0.0, left)
        if self.board.live:
            return
        if first:
            target = f" to ≤ {target_c:.1f} °C" if target_c is not None else ""
            self._line(f"cooldown{target}, up to {seconds:g} s")
        else:
            self._heartbeat()

    def cell_done(self, status: str, tokens: int) -> None:
        took = self.board.clock() - self.cell_clock
        if not self.warm_up:
            self.done += 1
            self.cell_times.append(took)
        mean = rate(tokens, self.wall)
        colour = "green" if status == Status.OK else "red"
        shown = (f"{tokens} tokens, " + (f"{mean:.2f} tok/s mean" if mean is not None
                                         else "no decode time recorded") if tokens
                 else "no per-token rows (the engine reports totals)")
        self.phase = "idle"
        self.board.print(f"{self.device} {self.label()}: [{colour}]{_shown(status)}[/] {shown} "
                         f"({took:.1f} s)")

    def note(self, message: str) -> None:
        self.board.print(f"  {self.device}: [yellow]{_shown(message)}[/]")

    def finish(self) -> None:
        self.phase = "idle"

    # -- plain lines (no terminal) -------------------------------------------------------------
    def _line(self, what: str) -> None:
        self.last_line = self.board.clock()
        self.board.print(f"{self.device} {self.label()}: {what}")

    def _heartbeat(self) -> None:
        """Without a terminal, a line when a minute has passed since the last one."""
        if self.board.live or self.board.clock() - self.last_line < self.board.heartbeat_s:
            return
        now = self.board.clock()
        eta = self.eta(now)
        tail = f", ETA {duration(eta)}" if eta is not None else ""
        if self.phase == "cooling":
            left = f", {duration(self.cool_left)} left" if self.cool_left is not None else ""
            self._line(f"{self._cooling()}{left}{tail}")
            return
        mean = self.rate_so_far()
        self._line(f"running {duration(now - self.run_clock)}: {self.count}/{self.total} "
                   f"tokens, " + (f"{mean:.2f} tok/s mean" if mean is not None else "no tokens yet")
                   + tail)


def _joined(*groups: list[Part]) -> list[Part]:
    return [p for group in groups for p in group if p.text]
