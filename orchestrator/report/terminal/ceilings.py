"""`orch ceilings` and `orch devices --probe` in the terminal: each device's newest stored
ceilings (results/ceilings.py reads and judges them) as rich tables."""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from rich.console import Console
from rich.table import Table


from orchestrator.stats.values import DASH, is_missing


def _f(value: Any, pattern: str) -> str:
    return DASH if is_missing(value) else pattern % value


def summary_table(row: Any, title: str) -> Table:
    """One device's ceilings: storage, knee, memory, compute, notes."""
    table = Table(title=title, title_justify="left", show_header=False)
    table.add_column("ceiling")
    table.add_column("value")
    samples = ", ".join(_f(s.get("mibps"), "%.0f") for s in row.seq_samples or [])
    mode = "O_DIRECT" if row.direct else "buffered (O_DIRECT not used)"
    table.add_row("storage, sequential", f"{_f(row.seq_mibps, '%.1f')} MiB/s median "
                  f"(samples {samples or DASH}; {mode}; {row.path} on {row.fstype or '?'})")
    table.add_row("storage, best lanes x size", f"{_f(row.best_mibps, '%.1f')} MiB/s")
    knee = (f"{row.knee_lanes} lane(s) at {row.knee_read_kib} KiB reads"
            if row.knee_lanes is not None else DASH)
    table.add_row("knee (95% of the best)", knee)
    dram = row.dram or {}
    table.add_row("memory (DRAM read)", f"{_f(row.dram_gibps, '%.2f')} GiB/s median, best "
                  f"{_f(dram.get('best_gibps'), '%.2f')} ({dram.get('threads', '?')} threads)")
    table.add_row("compute (dense decode)", f"{_f(row.compute_tps, '%.2f')} tok/s"
                  f" — {row.compute_note or ''}")
    table.add_row("measured", f"{row.measured_at:%Y-%m-%d %H:%M:%S} UTC, {row.abi} probes "
                  f"{row.probe_sha}")
    for note in row.notes or []:
        table.add_row("note", f"⚠ {note}")
    return table


def lanes_table(row: Any) -> Table | None:
    """Read MiB/s per read size (rows) and lanes (columns)."""
    cells = row.lanes or []
    if not cells:
        return None
    lanes = sorted({c["lanes"] for c in cells})
    sizes = sorted({c["read_kib"] for c in cells})
    at = {(c["read_kib"], c["lanes"]): c["mibps"] for c in cells}
    table = Table(title=f"{row.device}: read MiB/s", title_justify="left")
    table.add_column("read size", justify="right")
    for n in lanes:
        table.add_column(f"{n} lane{'s' if n > 1 else ''}", justify="right")
    for kib in sizes:
        label = f"{kib // 1024} MiB" if kib % 1024 == 0 else f"{kib} KiB"
        table.add_row(label, *(_f(at.get((kib, n)), "%.0f") for n in lanes))
    return table


def print_ceilings(console: Console, found: Mapping[str, Any], names: Iterable[str]) -> None:
    """The newest ceilings of each named device (`found`: results/ceilings.py latest), or how
    to measure them."""
    for name in names:
        row = found.get(name)
        if row is None:
            console.print(f"{name}: no ceilings stored (orch ceilings --device {name})")
            continue
        console.print(summary_table(row, f"{name} ceilings ({row.day})"))
        if (lanes := lanes_table(row)) is not None:
            console.print(lanes)
