"""Text and legend placement shared by the report's figures (plots.py, routing_plots.py,
session_plots.py)."""
from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import Any


def wrap(text: str, width: int) -> str:
    """Wrapped, never cut; "$" escaped (mathtext would read "$...$" in a name as a formula)."""
    text = " ".join(str(text).split()).replace("$", r"\$")
    return "\n".join(textwrap.wrap(text, width, break_on_hyphens=False)) or text


def legend_outside(ax: Any, handles: Sequence[Any] | None = None, **kw: Any) -> None:
    if handles is not None:
        kw["handles"] = handles
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0,
              fontsize="small", frameon=False, **kw)
