"""Control characters made visible: what orch prints that came from a device, an engine or a
file (stderr lines, names, paths, messages) can hold an escape sequence that retitles the
window or clears the screen. visible() writes every C0/C1 control and DEL as `\\xHH` (ESC as
the four characters `\\x1b`), keeping only the whitespace the format allows (tab and newline
by default), and every bidirectional override or isolate (U+202A-U+202E, U+2066-U+2069, the
marks U+200E/U+200F/U+061C) as `\\uHHHH`: a label holding U+202E would otherwise print the
rest of its line reversed (a name that reads as another). Used by the terminal views, `orch
run`'s progress, the error lines and markdown. orch's own markup and rich's styles hold no
control character, so a whole composed line can go through it."""
from __future__ import annotations

import re
from typing import Any

_CONTROLS = re.compile(r"[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _shown(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: Any, keep: str = "\t\n") -> str:
    """`text` with each control character except those in `keep` as `\\xHH` (a bidi control
    as `\\uHHHH`)."""
    s = "" if text is None else str(text)
    return _CONTROLS.sub(lambda m: m.group() if m.group() in keep else _shown(m.group()), s)


_BIDI = {c: f"\\u{c:04x}" for c in (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F),
                                     *range(0x2066, 0x206A))}


def bidi_visible(text: str) -> str:
    """`text` with only the bidi controls shown as `\\uHHHH`: what a terminal stream gets
    whoever prints (orchestrator/entry.py), since rich's own escape sequences must pass."""
    return text.translate(_BIDI)
