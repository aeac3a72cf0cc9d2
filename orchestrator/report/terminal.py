"""Terminal views of the store (rich tables) for `orch run`, `orch runs`, `orch show`,
`orch devices`. Numbers come from the analysis layer and are written by the one formatter set
(orchestrator.report.formatting), so a figure reads here as in `orch table` and the report."""
from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from orchestrator.db.runs import Runs
from orchestrator.db.store import Store
from orchestrator.errors import ConfigError
from orchestrator.report.formatting import STATS
from orchestrator.stats.values import DAGGER, DASH, is_missing


def stats_for_runs(store: Store, run_rows: list[Any]) -> dict[int, dict[str, Any]]:
    return Runs(store).stats_dicts(run_rows)


def _status(row: Any) -> str:
    return row.status if row.status == "ok" else f"{DAGGER} {row.status}"


def _cell(stats: dict[str, Any], key: str) -> str:
    return STATS[key].fmt(stats.get(key))


# the per-run columns of `orch run`'s closing table (headers and cells as in `orch table`)
_SESSION_STATS = ("n", "mean", "median", "p5", "p95", "min", "max", "read_mib_per_token",
                  "cache_hit_pct", "peak_rss_gib")


def print_session_table(console: Console, store: Store, session_id: int) -> None:
    from orchestrator.report.session_tables import failure_line

    rows = store.runs(session_id)
    stats = stats_for_runs(store, rows)
    table = Table(title=f"session {session_id}: {rows[0].matrix_name if rows else ''}",
                  title_justify="left")
    for name in ("run", "device", "config", "rep", "status"):
        table.add_column(name, justify="right" if name in ("run", "rep") else "left")
    for key in _SESSION_STATS:
        table.add_column(STATS[key].header, justify="right")
    for row in rows:
        s = stats.get(row.id, {})
        table.add_row(str(row.id), row.device, row.config, str(row.repeat_index + 1), _status(row),
                      *(_cell(s, key) for key in _SESSION_STATS))
    console.print(table)
    for row in rows:
        if row.status != "ok":
            console.print(failure_line(row), markup=False, highlight=False)
    for row in rows:
        for warning in row.warnings or []:
            console.print(f"[yellow]warning[/] run {row.id} {row.config}: {warning}")
    from orchestrator.results.drift import session_warnings

    for warning in session_warnings(store, session_id):
        console.print(f"[yellow]comparability[/]: {warning}")


def print_runs(console: Console, store: Store, session_id: int | None, limit: int) -> None:
    rows = store.runs(session_id, limit=limit)
    if not rows:
        console.print(f"no runs in {store.url}")
        return
    stats = stats_for_runs(store, rows)
    table = Table()
    for name in ("run", "session", "started", "device", "matrix", "config", "status", "tokens",
                 "mean tok/s"):
        table.add_column(name)
    for row in rows:
        s = stats.get(row.id, {})
        started = row.started_at.strftime("%Y-%m-%d %H:%M") if row.started_at else DASH
        table.add_row(str(row.id), str(row.session_id), started, row.device,
                      row.matrix_name or row.session_name or "", row.config, _status(row),
                      _cell(s, "n"), _cell(s, "mean"))
    console.print(table)


# what `orch show` lists, one statistic a line (those the run measured)
_SHOW = ("mean", "steady_mean", "steady_from_token", "median", "p5", "p95", "min", "max",
         "latency_p50_ms", "latency_p90_ms", "latency_p99_ms", "prefill_tps", "ttft_s",
         "cache_hit_pct", "read_mib_per_token", "stall_ms_per_token", "compute_s_per_token",
         "io_s_per_token", "majflt_per_token", "peak_rss_gib", "mem_floor_gib", "cpu_temp_start_c", "cpu_temp_max_c",
         "batt_temp_max_c")


def print_run(console: Console, store: Store, run_id: int) -> None:
    row = store.run_row(run_id)
    if row is None:
        raise ConfigError(f"no run {run_id} in {store.url}")
    stats = stats_for_runs(store, [row])[row.id]
    console.print(f"[bold]run {row.id}[/] session {row.session_id}, device {row.device}, "
                  f"config {row.config} (repeat {row.repeat_index + 1})")
    console.print(f"status {_status(row)}" + (f" — {row.cause}" if row.cause else "")
                  + f", {stats.get('n', 0)} tokens, engine {row.engine}")
    console.print(f"flags: {row.flags or '(none)'}", highlight=False)
    from orchestrator.ingest.state import start_facts

    for line in start_facts(row, row.record.entry_state):
        console.print(line, highlight=False, markup=False)
    table = Table(show_header=False)
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key in _SHOW:
        if not is_missing(stats.get(key)):
            table.add_row(STATS[key].name, _cell(stats, key))
    console.print(table)
    for warning in row.warnings or []:
        console.print(f"[yellow]warning:[/] {warning}")
    if row.status != "ok":
        for line in failure_details(store, row):
            console.print(line, highlight=False, markup=False)


STDERR_TAIL = 10   # lines of the engine's stderr `orch show` prints for a run that failed


def failure_details(store: Store, row: Any) -> list[str]:
    """Why a run did not end ok, in the engine's words: the parse errors its output gave
    (a bad CSV line, a missing summary) and the last lines of its stderr."""
    summary = row.summary or {}
    lines = [f"parse error: {error}" for error in summary.get("errors") or []]
    tail = list(summary.get("stderr_tail") or [])
    if not tail:
        tail = Runs(store).output_lines(row.id, "E", last=STDERR_TAIL)
    if tail:
        lines.append(f"engine stderr (last {min(len(tail), STDERR_TAIL)} lines):")
        lines += [f"  {line}" for line in tail[-STDERR_TAIL:]]
    return lines
