"""The report's "against the ceilings" table: each config of a (model, device) group next to
the device's measured hardware ceilings (`orch ceilings`, results/ceilings.py).

Per config: decode tok/s and its share of the compute ceiling, read MiB/s (read MiB per token
x tok/s, i.e. bytes read / decode time) and its share of the I/O ceiling, the ideal tok/s if
I/O were free (1 / compute s per token) and the verdict. A group whose device has no stored
ceilings gets no table (and no words)."""
from __future__ import annotations

from typing import Any

from orchestrator.report.document.request import SectionRequest
from orchestrator.report.format.cells import id_list
from orchestrator.report.format.formatters import STATS
from orchestrator.report.format.markdown import Table, md_escape
from orchestrator.results.ceilings import (
    COMPUTE_BOUND_SHARE,
    IO_BOUND_SHARE,
    Bound,
    io_ceiling,
)
from orchestrator.results.report_data import Group, ReportData
from orchestrator.stats.values import DASH, is_missing


def _f(value: Any, pattern: str) -> str:
    return DASH if is_missing(value) else pattern % value


# tok/s as every table prints it (formatters.STATS: three significant figures under 1 tok/s)
_TPS = STATS["mean"].fmt


def _share(value: float | None) -> str:
    return DASH if value is None else "%.0f%%" % (100 * value)


def caption(row: Any) -> str:
    """What the ceilings are, where from, and the verdict's thresholds."""
    io = io_ceiling(row)
    knee = (f"; knee {row.knee_lanes} lane(s) at {row.knee_read_kib} KiB reads"
            if row.knee_lanes is not None else "")
    mode = "O_DIRECT" if row.direct else "buffered reads: O_DIRECT was not honoured"
    compute = (f"{row.compute_tps:.2f} tok/s ({row.compute_note})"
               if row.compute_tps is not None else f"not measured ({row.compute_note})")
    return "**Against the device's ceilings** " + md_escape(
        f"(orch ceilings on {row.device}, {row.day}): I/O "
        f"{_f(io, '%.0f')} MiB/s (best of the sequential median {_f(row.seq_mibps, '%.0f')} "
        f"MiB/s and the lanes x read-size sweep, {mode}{knee}), DRAM "
        f"{_f(row.dram_gibps, '%.1f')} GiB/s, compute {compute}. Verdict: I/O-bound when the "
        f"read rate reaches {IO_BOUND_SHARE:.0%} of the I/O ceiling, compute-bound when tok/s "
        f"reaches {COMPUTE_BOUND_SHARE:.0%} of the compute ceiling, else neither; ideal tok/s "
        f"= 1 / compute s per token (I/O free):")


BOUND_WORDS = {Bound.IO: "I/O-bound", Bound.COMPUTE: "compute-bound"}


def verdict_words(bounds: tuple[Bound, ...] | None) -> str:
    """"I/O-bound", "compute-bound", both joined by "and", "neither", or "—" (no share known)."""
    if bounds is None:
        return DASH
    return " and ".join(BOUND_WORDS[b] for b in bounds) if bounds else "neither"


def table(group: Group, row: Any) -> Table:
    out = Table(["Config", "tok/s", "of compute ceiling", "read MiB/s", "of I/O ceiling",
                 "ideal tok/s (I/O free)", "verdict", "runs"],
                ["---", "---:", "---:", "---:", "---:", "---:", "---", "---"])
    for agg in group.configs:
        if not agg.runs:
            continue
        j = group.judgements[agg.config]
        out.rows.append([md_escape(agg.label or agg.config), _TPS(j.decode_tps),
                         _share(j.compute_share), _f(j.read_mibps, "%.1f"), _share(j.io_share),
                         _TPS(j.ideal_tps), verdict_words(j.bounds), id_list(agg.ids)])
    for note in row.notes or []:
        out.notes.append(f"⚠ {md_escape(note)}")
    return out


TEMPLATE = "ceilings.md.j2"


def group_context(group: Group, data: ReportData, request: SectionRequest) -> dict[str, Any]:
    """`ceilings` (a Table or None) and `ceilings_caption` for group.md.j2: the device's
    ceilings measured nearest in time to the group's first run (results/report_data.py)."""
    row = group.ceilings
    if row is None or not any(a.runs for a in group.configs):
        return {"ceilings": None, "ceilings_caption": None}
    return {"ceilings": table(group, row), "ceilings_caption": caption(row)}
