"""Whether a run's flash I/O ran beside its compute (bmoe `--overlap`), and what that changes
in its figures.

With overlap the read lanes work while the CPU computes: the engine's I/O figure sums the
lanes' busy time, so compute + I/O does not add up to the wall time, and the wall time lost to
flash is the stall. A serial run (streaming without `--overlap`) waits for every read, so all
its I/O is stall; the engine reports no overlapped stall for it, and a 0 there would read as
"no I/O cost": its stall figure is therefore not measured (statistics.compute applies this to
RunFigures.stall_ms_per_token, so every view shows "—").
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def overlapped(settings: Mapping[str, Any] | None, argv: Any, flags: str | None,
               engine: str | None) -> bool | None:
    """True for an overlap run, False for a serial bmoe run, None when the run does not say
    (another engine, or an import whose settings have no `overlap=`). `settings`: an imported
    run's resolved settings (None for a live run, whose argv and flags say it)."""
    if settings is not None:        # an import: the CSV preamble's `overlap=0|1`
        value = settings.get("overlap")
        return None if value is None else str(value).strip() not in ("0", "", "False")
    words = [str(a) for a in argv] if isinstance(argv, list) else []
    words += (flags or "").split()
    if "--overlap" in words:
        return True
    return False if engine == "bmoe" else None


def all_same(flags: Iterable[bool | None]) -> bool | None:
    """A config's overlap from its runs': their common value, None when they differ or none
    says."""
    seen = set(flags)
    return seen.pop() if len(seen) == 1 else None
