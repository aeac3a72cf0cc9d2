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
    (another engine, or an import whose files and flags do not). `settings`: an imported
    run's resolved settings (None for a live run, whose argv and flags say it).

    Wherever the setting came from, it counts: an import's CSV preamble (`overlap=0|1`)
    first, else `--overlap` among its flags (a design file's `flags:`, as a live run's
    matrix flags and argv). A live bmoe run without `--overlap` is serial; an import is
    serial only when its flags say it streamed (`--moe-stream`) without `--overlap`, since a
    design's flags may name only what varies between its configs."""
    if settings is not None:        # an import: the CSV preamble's `overlap=0|1`
        value = settings.get("overlap")
        if value is not None:
            return str(value).strip() not in ("0", "", "False")
    words = [str(a) for a in argv] if isinstance(argv, list) else []
    words += (flags or "").split()
    if "--overlap" in words:
        return True
    if engine != "bmoe":
        return None
    if settings is None:            # a live run: its command line is complete
        return False
    return False if "--moe-stream" in words else None


def all_same(flags: Iterable[bool | None]) -> bool | None:
    """A config's overlap from its runs': their common value, None when they differ or none
    says."""
    seen = set(flags)
    return seen.pop() if len(seen) == 1 else None
