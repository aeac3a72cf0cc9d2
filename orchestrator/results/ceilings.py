"""Stored hardware ceilings (`orch ceilings`): read them and judge a config against them
(the terminal tables are report/terminal/ceilings.py, the report's section report/document/ceilings.py).

The verdict follows the two studies: a config whose read rate reaches IO_BOUND_SHARE (80%) of
the device's I/O ceiling is I/O-bound (flash cannot deliver much more); one whose decode rate
reaches COMPUTE_BOUND_SHARE (80%) of the dense-model compute ceiling is compute-bound; below
both it is neither (the engine leaves both resources idle: stalls, management, a poor overlap).
The I/O ceiling is the best storage rate measured (the lanes x size sweep's best cell, or the
sequential median when that is higher): an engine with parallel read lanes can reach it, as the
phone study's 2-lane flash saturation shows. The ideal tok/s if I/O were free is 1 / compute
seconds per token (the phone study's figure), when the record has compute time per token.
"""
from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum
from typing import Any

from orchestrator.db.ceilings import ceiling_rows
from orchestrator.db.store import Store
from orchestrator.stats.values import is_missing

IO_BOUND_SHARE = 0.80
COMPUTE_BOUND_SHARE = 0.80


class Bound(Enum):
    """A ceiling a config reaches (IO_BOUND_SHARE, COMPUTE_BOUND_SHARE of it)."""

    IO = "io"
    COMPUTE = "compute"


@dataclass
class Judgement:
    """One config against its device's ceilings; None where a figure is missing."""

    decode_tps: float | None
    compute_tps: float | None
    read_mibps: float | None
    io_mibps: float | None
    ideal_tps: float | None

    @property
    def compute_share(self) -> float | None:
        return _share(self.decode_tps, self.compute_tps)

    @property
    def io_share(self) -> float | None:
        return _share(self.read_mibps, self.io_mibps)

    @property
    def bounds(self) -> tuple[Bound, ...] | None:
        """What bounds the config (none, one or both), in that order; None when neither
        share is known. The words are the view's (report/document/ceilings.py)."""
        io, comp = self.io_share, self.compute_share
        if io is None and comp is None:
            return None
        return tuple(bound for bound, share, limit in ((Bound.IO, io, IO_BOUND_SHARE),
                                                       (Bound.COMPUTE, comp,
                                                        COMPUTE_BOUND_SHARE))
                     if share is not None and share >= limit)


def _share(value: float | None, ceiling: float | None) -> float | None:
    if is_missing(value) or is_missing(ceiling) or not ceiling:
        return None
    return float(value) / float(ceiling)


def io_ceiling(row: Any) -> float | None:
    """The I/O ceiling of a stored row: the best storage rate it measured (MiB/s)."""
    figures = [x for x in (row.best_mibps, row.seq_mibps) if not is_missing(x)]
    return max(figures) if figures else None


def judge(values: dict[str, Any], row: Any) -> Judgement:
    """A config's aggregated statistics (results/report_data.py ConfigAgg.values: mean tok/s,
    read_mib_per_token, compute_s_per_token) against a ceiling row."""
    tps = values.get("mean")
    per_token = values.get("read_mib_per_token")
    read = None if is_missing(per_token) or is_missing(tps) else float(per_token) * float(tps)
    compute_s = values.get("compute_s_per_token")
    ideal = None if is_missing(compute_s) or not compute_s else 1.0 / float(compute_s)
    return Judgement(None if is_missing(tps) else float(tps), row.compute_tps, read,
                     io_ceiling(row), ideal)


def latest(store: Store, device_names: Iterable[str] | None = None) -> dict[str, Any]:
    """device name -> its newest ceiling row."""
    out: dict[str, Any] = {}
    for row in ceiling_rows(store, device_names):
        out.setdefault(row.device, row)
    return out


def _aware(t: dt.datetime) -> dt.datetime:
    return t if t.tzinfo is not None else t.replace(tzinfo=dt.UTC)


def nearest(store: Store, device: str, when: dt.datetime | None) -> Any | None:
    """The device's ceiling row measured closest in time to `when` (its newest without one):
    a device's ceilings change with firmware, fill level and host load."""
    rows = ceiling_rows(store, [device])
    if not rows or when is None:
        return rows[0] if rows else None
    return min(rows, key=lambda r: abs(_aware(r.measured_at) - _aware(when)))
