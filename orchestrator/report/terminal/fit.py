"""A rich table that fits the terminal: columns dropped by priority, never a value cut.

Rich shrinks a table wider than the terminal by cutting its cells ("4…", "42…"), which
leaves a number unreadable. Here each column says how readily it goes (`drop`, higher goes
first; None: it stays; columns of one priority go together), the table loses columns until
its natural width fits, and what must stay is wrapped (text folded, numbers kept whole)
rather than cut with "…"."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from rich.cells import cell_len
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table


@dataclass(frozen=True)
class FitColumn:
    header: str
    cells: Sequence[str]
    justify: str = "left"            # "right": a number, never wrapped
    drop: int | None = None          # None: always shown
    extra: dict = field(default_factory=dict)   # more rich Column options (style, ...)


def fitted_table(console: Console, columns: Sequence[FitColumn], title: str | None = None,
                 width: int | None = None) -> tuple[Table, list[str]]:
    """The table for `width` columns (the console's by default), and the headers of the
    columns left out to make it fit (a view names them, so the user knows to widen the
    terminal or ask for them)."""
    width = width or console.width
    shown = list(columns)
    while True:
        table = _table(shown, title)
        natural = Measurement.get(console, console.options.update(width=10_000), table).maximum
        levels = [c.drop for c in shown if c.drop is not None]
        if natural <= width or not levels:
            break
        # columns of one priority go together (each device's interval, not the first's)
        shown = [c for c in shown if c.drop != max(levels)]
    left_out = [c.header.replace("\n", " ") for c in columns
                if not any(c is s for s in shown)]
    return table, left_out


def _table(columns: Sequence[FitColumn], title: str | None) -> Table:
    table = Table(title=title, title_justify="left")
    for col in columns:
        number = col.justify == "right"
        widest = max((cell_len(text) for text in col.cells), default=0)
        table.add_column(col.header, justify=col.justify,  # type: ignore[arg-type]
                         overflow="fold", no_wrap=number,
                         min_width=widest if number else None, **col.extra)
    for i in range(max((len(c.cells) for c in columns), default=0)):
        table.add_row(*(c.cells[i] if i < len(c.cells) else "" for c in columns))
    return table
