"""Control characters made visible: what orch prints that came from a device, an engine or a
file (stderr lines, names, paths, messages) can hold an escape sequence that retitles the
window or clears the screen. visible() writes every C0/C1 control and DEL as `\\xHH` (ESC as
the four characters `\\x1b`), keeping only the whitespace the format allows (tab and newline
by default). Used by the terminal views, `orch run`'s progress, the error lines and markdown.
orch's own markup and rich's styles hold no control character, so a whole composed line can
go through it."""
from __future__ import annotations

import re
from typing import Any

_CONTROLS = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def visible(text: Any, keep: str = "\t\n") -> str:
    """`text` with each control character except those in `keep` as `\\xHH`."""
    s = "" if text is None else str(text)
    return _CONTROLS.sub(lambda m: m.group() if m.group() in keep else f"\\x{ord(m.group()):02x}", s)
