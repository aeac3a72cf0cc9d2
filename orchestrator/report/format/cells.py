"""The combined cells of the report and `orch table`: run-id lists (under RUN_IDS), the spread of repeated runs and the interval of
their mean, and the cells of a comparison (`orch compare`, the report's regressions).

Single figures are formatted by the one formatter set (orchestrator.report.format.formatters) that
the terminal, `orch table` and `orch compare` use too, so a figure reads the same in every
view and in the published summary.md; which table shows which figure is declared in
orchestrator.report.format.columns; markdown escaping and table layout are in
orchestrator.report.format.markdown.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from orchestrator.report.format.formatters import STATS, ratio
from orchestrator.stats.values import DASH

if TYPE_CHECKING:
    from orchestrator.stats.uncertainty import Comparison, Interval

# report/format/ab_rows.py (pandas, and through results/ab.py scipy) is imported by the cells that
# use it, when they are drawn: the terminal views import this module (report/format/columns.py), and
# `orch runs` / `orch show` draw none of these cells (tests/test_startup.py)


RUN_IDS = "run ids"     # the header of the column of a row's run ids (id_list)

# the overlap caveat, on every table that shows the compute + I/O split (the report's groups,
# `orch table`): beside the figure it concerns, whatever set `--overlap` (a CSV preamble, a
# matrix's or a design file's flags: stats/overlap.py)
OVERLAP_MARK = "‡"         # not †: that marks the runs left out
OVERLAP_NOTE = (f"{OVERLAP_MARK} ran with `--overlap`: flash I/O runs beside compute, so "
                "compute + I/O does not add up to the wall time (the I/O figure is the read "
                "lanes' busy time) and the stall is the I/O's cost.")


def overlap_marked(cell: str, overlapped: bool | None) -> str:
    """The compute + I/O cell with the overlap mark when its row ran with `--overlap` (a dash
    stays a dash: no figure, no caveat)."""
    return f"{cell} {OVERLAP_MARK}" if overlapped is True and cell != DASH else cell


def id_list(ids: Sequence[int]) -> str:
    """Run ids as `3, 5–9`: consecutive repeats collapse to a range, so a config with 50
    repeats still fits a cell; every id stays recoverable."""
    out: list[str] = []
    nums = sorted(set(ids))
    i = 0
    while i < len(nums):
        j = i
        while j + 1 < len(nums) and nums[j + 1] == nums[j] + 1:
            j += 1
        out.append(str(nums[i]) if j == i else f"{nums[i]}–{nums[j]}")
        i = j + 1
    return ", ".join(out) if out else DASH


def spread_cell(spread: Mapping[str, Any] | None) -> str:
    """Spread of repeated runs' means: ± sample stdev, range (n). Empty for a single run."""
    if not spread or spread.get("n", 0) < 2:
        return DASH
    unit = " repetitions" if spread.get("unit") == "repetitions" else ""
    return "±%.2f, %.2f–%.2f (n=%d%s)" % (spread["stdev"], spread["min"], spread["max"],
                                            spread["n"], unit)


def ci_cell(low: float | None, high: float | None,
            spread: Mapping[str, Any] | None = None) -> str:
    """The 95% interval of a config's mean over its runs' means: "12.10–12.52"; over two
    runs, as the A/B table gives it, ± its half-width ("n = 2: ±1.51"): with one degree of
    freedom the range says little and can run below 0 tok/s."""
    from orchestrator.report.format.ab_rows import interval_text

    if spread and spread.get("n") == 2 and low is not None and high is not None:
        return f"n = 2: ±{STATS['mean'].fmt((high - low) / 2)}"
    return interval_text(low, high)


# ---- the cells of a comparison (orch compare, the report's regressions section) -----------
def mean_cell(interval: Interval | None) -> str:
    """A side's mean tok/s with its 95% interval, "12.31 [12.10–12.52]"; the bare mean for
    one run."""
    if interval is None or interval.mean is None:
        return DASH
    from orchestrator.report.format import ab_rows as ab_table

    return ab_table.mean_cell(interval, headline=False)


def interval_cell(c: Comparison | None) -> str:
    from orchestrator.report.format import ab_rows as ab_table

    return DASH if c is None else ab_table.interval_text(c.low, c.high, ratio)


def verdict_cell(c: Comparison | None) -> str:
    """From the Holm-corrected test; a dash where nothing was tested (a single run)."""
    if c is None or c.p_adjusted is None:
        return DASH
    if c.significant and c.ratio is not None and c.ratio != 1.0:
        return "faster" if c.ratio > 1.0 else "slower"
    return "no significant difference"
