"""Cells of the within-run columns (report/format/columns.py LATENCY) and the trim's words in
captions: formatting only, the figures are stats/within_run.py's and stats/settle.py's."""
from __future__ import annotations

from typing import Any

from orchestrator.report.format.formatters import MINUS, STATS
from orchestrator.stats.trim import trim_words
from orchestrator.stats.values import DASH, is_missing


def steady_cell(mean: Any, note: Any) -> str:
    """The steady-state mean, or why there is none: "not settled (+52% first → last
    quarter)", "too short to tell"."""
    if not is_missing(note) and note:
        return str(note).replace("(-", f"({MINUS}")
    return STATS["steady_mean"].fmt(mean)


def interval_cell(low: Any, high: Any, pattern: str = "%.2f") -> str:
    """A within-run 95% interval, "2.43–2.76"; a dash for a run without one."""
    if is_missing(low) or is_missing(high):
        return DASH
    return f"{pattern % low}–{pattern % high}"


def ms_interval_cell(low: Any, high: Any) -> str:
    return interval_cell(low, high, "%.1f")


def pct_cell(value: Any) -> str:
    return DASH if is_missing(value) else f"{value:.0f}%"


TRIMMED_MEAN = "mean_after_trim"     # the column whose header names the trim


def trim_header(key: str, header: str, trim: int) -> str:
    """A column's header with the trim it is over: "mean after trim 50" (others unchanged)."""
    return f"{header} {trim}" if key == TRIMMED_MEAN and trim else header


def with_trim(caption: str, trim: int) -> str:
    """A caption of per-token figures stating the trim: "**Throughput** (...):" becomes
    "**Throughput** (...; per-token figures: first 50 tokens left out, decode mean over every
    token):". Unchanged for trim 0, so the published tables' captions stay as they were."""
    if not trim or not caption:
        return caption
    words = f"per-token figures: {trim_words(trim)}, decode mean over every token"
    if caption.endswith("):"):
        return f"{caption[:-2]}; {words}):"
    return f"{caption} ({words})"
