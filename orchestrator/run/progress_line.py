"""A device's live line of `orch run`'s board, laid out for the terminal's width: its parts
(device, cell, tok/s, ETA, ...) each with a priority, the optional ones dropped from the
least needed up until the line fits, and what must stay (device, config, tok/s, ETA) wrapped
onto a second line rather than cut. A part is never shortened with "…": a name cut to
`qwe…` tells the user nothing (issue 36, "In the terminal")."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.cells import cell_len

SEPARATOR = " · "


@dataclass(frozen=True)
class Part:
    """One piece of a live line: `drop` orders what goes first when the line is too long
    (higher goes first); None: it always stays (device, config, tok/s, ETA). `glued`: set
    off from the part before by a space, not the separator (the words of one name)."""

    text: str
    drop: int | None = None
    glued: bool = False


def fit_line(parts: Sequence[Part], width: int) -> list[str]:
    """The line's parts in `width` columns: optional parts dropped by priority until it
    fits; if the kept ones still do not, they are wrapped at part boundaries onto more
    lines (a part wider than the terminal is folded, never cut)."""
    shown = [p for p in parts if p.text]
    width = max(1, width)
    while _width(shown) > width:
        droppable = [p for p in shown if p.drop is not None]
        if not droppable:
            break
        shown.remove(max(droppable, key=lambda p: p.drop or 0))
    if _width(shown) <= width:
        return [_joined(shown)]
    return _wrapped(shown, width)


def _joined(parts: Sequence[Part]) -> str:
    return "".join((" " if p.glued else SEPARATOR) + p.text if i else p.text
                   for i, p in enumerate(parts))


def _width(parts: Sequence[Part]) -> int:
    return cell_len(_joined(parts))


def _wrapped(parts: Sequence[Part], width: int) -> list[str]:
    lines: list[str] = []
    line = ""
    for part in parts:
        text = part.text
        joined = f"{line}{' ' if part.glued else SEPARATOR}{text}" if line else text
        if cell_len(joined) <= width:
            line = joined
            continue
        if line:
            lines.append(line)
        line = ""
        for chunk in _fold(text, width):   # a part wider than the terminal: folded
            if line:
                lines.append(line)
            line = chunk
    if line:
        lines.append(line)
    return lines


def _fold(text: str, width: int) -> list[str]:
    chunks, chunk = [], ""
    for ch in text:
        if cell_len(chunk + ch) > width and chunk:
            chunks.append(chunk)
            chunk = ""
        chunk += ch
    return chunks + [chunk] if chunk else chunks


def bar(done: int, total: int, width: int = 20) -> str:
    """A text progress bar ("━━━━━━──────"), empty when the total is unknown."""
    if total <= 0:
        return ""
    filled = min(width, round(width * done / total))
    return "━" * filled + "─" * (width - filled)


def duration(seconds: float) -> str:
    """`12m03s`, `1h04m`, `42s`: a countdown or an ETA."""
    seconds = max(0, int(seconds))
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"
