"""Text, legend placement and the trim's mark shared by the report's figures (plots.py,
trajectory_plot.py, routing_plots.py, session_plots.py)."""
from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import Any

from orchestrator.stats.trim import trim_words

TRIM_GID = "trim"           # the shaded span of the tokens a trim leaves out
TRIM_COLOR, TRIM_ALPHA = "0.55", 0.18


def wrap(text: str, width: int) -> str:
    """Wrapped, never cut; "$" escaped (mathtext would read "$...$" in a name as a formula)."""
    text = " ".join(str(text).split()).replace("$", r"\$")
    return "\n".join(textwrap.wrap(text, width, break_on_hyphens=False)) or text


def legend_outside(ax: Any, handles: Sequence[Any] | None = None, **kw: Any) -> None:
    if handles is not None:
        kw["handles"] = handles
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0,
              fontsize="small", frameon=False, **kw)


def trim_caption(trim: int) -> str:
    """How every per-token caption states the trim, 0 included (docs/report.md, Figures)."""
    if not trim:
        return "trim 0: every token is in the statistics"
    return (f"trim {trim}: the first {trim} token{'s' if trim != 1 else ''} of each run are "
            f"left out of the statistics")


def shade_trim(ax: Any, trim: int) -> None:
    """The tokens 1..trim shaded on an axes whose x is the token number (nothing at trim 0);
    the axes keeps its x range: a trim longer than the runs shades all of it."""
    if not trim:
        return
    lo, hi = ax.get_xlim()
    ax.axvspan(0.5, trim + 0.5, color=TRIM_COLOR, alpha=TRIM_ALPHA, lw=0, zorder=0,
               gid=TRIM_GID)
    ax.set_xlim(lo, hi)


def trim_handle(trim: int) -> Any:
    """The legend entry of the shaded span: "first 50 tokens left out (trim 50)"."""
    from matplotlib.patches import Patch

    return Patch(color=TRIM_COLOR, alpha=TRIM_ALPHA, lw=0,
                 label=wrap(f"shaded: {trim_words(trim)} (trim {trim})", 30))
