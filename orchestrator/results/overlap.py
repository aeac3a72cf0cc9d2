"""Whether a run's flash I/O ran beside its compute (bmoe `--overlap`), and what that changes
in its figures.

With overlap the read lanes work while the CPU computes: the engine's I/O figure sums the
lanes' busy time, so compute + I/O does not add up to the wall time, and the wall time lost to
flash is the stall. A serial run (streaming without `--overlap`) waits for every read, so all
its I/O is stall; the engine reports no overlapped stall for it, and a 0 there would read as
"no I/O cost": the views show "—" instead.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from orchestrator.db.runs import RunRow

STALL = "stall_ms_per_token"


def overlapped(row: RunRow) -> bool | None:
    """True for an overlap run, False for a serial bmoe run, None when the run does not say
    (another engine, or an import whose settings have no `overlap=`)."""
    settings = row.settings
    if settings is not None:        # an import: the CSV preamble's `overlap=0|1`
        value = settings.get("overlap")
        return None if value is None else str(value).strip() not in ("0", "", "False")
    words = [str(a) for a in row.argv] if isinstance(row.argv, list) else []
    words += (row.flags or "").split()
    if "--overlap" in words:
        return True
    return False if row.engine == "bmoe" else None


def serial(rows: Iterable[RunRow]) -> bool:
    """Whether every one of these runs (a config's) is serial."""
    flags = [overlapped(r) for r in rows]
    return bool(flags) and all(f is False for f in flags)


def without_serial_stall(values: Mapping[str, Any], rows: Iterable[RunRow]) -> dict[str, Any]:
    """`values` (a run's or a config's statistics) with the stall left out when its runs are
    serial."""
    out = dict(values)
    if serial(rows):
        out[STALL] = None
    return out
