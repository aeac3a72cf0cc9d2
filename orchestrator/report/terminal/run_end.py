"""What `orch run` prints when its cells are done (docs/reliability.md, "What `orch run`
prints"): one row per (model, config) with its mean decode tok/s and the 95% interval over
its repeats, the devices side by side (a column group per device, and the ratio of the second
to the first when two ran), fitted to the terminal (report/terminal/fit.py); then each
session's notes (failures, warnings, caveats). `--runs` adds the table of every run. The
figures are results/run_end.py's (results/comparison.py's): nothing is computed here."""
from __future__ import annotations

import shlex

from rich.console import Console

from orchestrator.escape import visible
from orchestrator.report.format.cells import ci_cell
from orchestrator.report.format.formatters import STATS, pct, ratio
from orchestrator.report.terminal.fit import FitColumn, fitted_table
from orchestrator.report.terminal.runs import (
    print_left_out,
    print_session_notes,
    print_session_table,
)
from orchestrator.results.comparison import ConfigRow
from orchestrator.results.run_end import BuildChange, RunEnd
from orchestrator.stats.values import DASH

# how readily a column gives way on a narrow terminal (higher goes first); model, config,
# each device's tok/s and the ratio stay
DROP_RUNS, DROP_INTERVAL = 3, 2


def print_run_end(console: Console, end: RunEnd, runs: bool = False) -> None:
    """The closing table of `orch run`; `runs`: each session's per-run table too."""
    for device, listing in end.listings.items():
        if runs and listing.rows:
            print_session_table(console, listing)
    rows = end.configs.rows
    if rows:
        table, left_out = fitted_table(console, config_columns(end), title(end))
        table.caption, table.caption_justify = caption(end), "left"
        console.print(table)
        print_left_out(console, left_out)
    for listing in end.listings.values():
        if not runs:   # with --runs, print_session_table printed them under its table
            print_session_notes(console, listing)
    for change in end.build_changes:
        console.print(build_change_line(change, len(end.listings) > 1), highlight=False)


def build_change_line(change: BuildChange, name_device: bool = False) -> str:
    """"engine build changed since session 4 (0.3.30 → 0.3.36): −15.2% on 6 of 8 configs
    (orch compare --builds 0.3.30 0.3.36 -d phone -m bench)"."""
    parts = [f"{pct(p)} on {len(rs)}" for p, rs in ((change.slower_pct, change.slower),
                                                    (change.faster_pct, change.faster)) if rs]
    device = f"{change.device}: " if name_device else ""
    return visible(f"{device}engine build changed since session {change.since} "
                   f"({change.before} → {change.after}): {', '.join(parts)} of "
                   f"{change.configs} config{'s' * (change.configs != 1)} "
                   f"({shlex.join(change.command)})")


def title(end: RunEnd) -> str:
    """"probe-small: decode tok/s per config (the ok runs' mean, 95% CI over them)"."""
    listings = [listing for listing in end.listings.values() if listing.rows]
    matrix = listings[0].rows[0].matrix_name if listings else ""
    models = end.models
    model = f", model {models[0]}" if len(models) == 1 and models != ["-"] else ""
    return visible(f"{matrix or ''}{model}: decode tok/s per config (the ok runs' mean, "
                   f"95% CI over them)")


def caption(end: RunEnd) -> str:
    """Which session of which device the table shows (`orch table --session N` has more)."""
    return visible("sessions: " + ", ".join(f"{device} {listing.session_id}" for device, listing
                                            in end.listings.items() if listing.rows))


def config_columns(end: RunEnd) -> list[FitColumn]:
    """The table's columns: model (when several), config, then per device its mean, its
    interval and its runs, then the ratio when two devices ran."""
    rows, devices = end.configs.rows, end.devices
    columns: list[FitColumn] = []
    if len(end.models) > 1:
        columns.append(FitColumn("model", [visible(r.model) for r in rows]))
    columns.append(FitColumn("config", [visible(r.config) for r in rows]))
    several = len(devices) > 1
    for i, device in enumerate(devices):
        head = f"{visible(device)}\n" if several else ""
        columns += [
            FitColumn(f"{head}tok/s", [_mean(r, i) for r in rows], "right"),
            FitColumn(f"{head}95% CI", [_interval(r, i) for r in rows], "right", DROP_INTERVAL),
            FitColumn(f"{head}runs", [_runs(r, i) for r in rows], "right", DROP_RUNS)]
    if len(devices) == 2:
        columns.append(FitColumn(f"{visible(devices[1])}/\n{visible(devices[0])}",
                                 [_ratio(r) for r in rows], "right"))
    return columns


def _mean(row: ConfigRow, side: int) -> str:
    interval = row.means[side]
    if interval is None:
        absence = row.absence(side)
        return str(absence) if absence is not None else DASH
    return STATS["mean"].fmt(interval.mean)


def _interval(row: ConfigRow, side: int) -> str:
    interval = row.means[side]
    return DASH if interval is None else ci_cell(interval.low, interval.high)


def _runs(row: ConfigRow, side: int) -> str:
    """"3" ok runs, or "2/3 ok" when some did not end ok (named in the lines below)."""
    ok = len(row.run_ids[side]) if row.run_ids else 0
    failed = len(row.failed[side]) if row.failed else 0
    if not ok and not failed:
        return DASH
    return f"{ok}/{ok + failed} ok" if failed else str(ok)


def _ratio(row: ConfigRow) -> str:
    comparison = row.vs_reference[0] if row.vs_reference else None
    return DASH if comparison is None else ratio(comparison.ratio)
