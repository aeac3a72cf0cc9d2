"""Terminal views of the store (rich tables) for `orch run`, `orch runs`, `orch show`,
`orch devices`. Numbers come from the analysis layer; this module only lays them out."""
from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from orchestrator.config.yamlfile import ConfigError
from orchestrator.db.store import Store

DAGGER = "†"


def _fmt(value: Any, spec: str = ".2f", suffix: str = "") -> str:
    if value is None:
        return "—"
    try:
        if value != value:  # NaN
            return "—"
        return f"{value:{spec}}{suffix}"
    except (TypeError, ValueError):
        return str(value)


def stats_for_runs(store: Store, run_rows: list[Any]) -> dict[int, dict[str, Any]]:
    from orchestrator.results.query import stats_dicts

    return stats_dicts(store, run_rows)


def _status(row: Any) -> str:
    return row.status if row.status == "ok" else f"{DAGGER} {row.status}"


def print_session_table(console: Console, store: Store, session_id: int) -> None:
    rows = store.runs(session_id)
    stats = stats_for_runs(store, rows)
    table = Table(title=f"session {session_id}: {rows[0].matrix_name if rows else ''}",
                  title_justify="left")
    for name in ("run", "device", "config", "rep", "status", "tokens", "mean tok/s", "median",
                 "p5", "p95", "min", "max", "read MiB/tok", "cache hit", "peak RSS"):
        table.add_column(name, justify="right" if name not in ("config", "status", "device") else "left")
    for row in rows:
        s = stats.get(row.id, {})
        table.add_row(str(row.id), row.device, row.config, str(row.repeat_index + 1), _status(row),
                      str(s.get("n", 0)), _fmt(s.get("mean")), _fmt(s.get("median")),
                      _fmt(s.get("p5")), _fmt(s.get("p95")), _fmt(s.get("min")), _fmt(s.get("max")),
                      _fmt(s.get("read_mib_per_token"), ".1f"), _fmt(s.get("cache_hit_pct"), ".0f", "%"),
                      _fmt(s.get("peak_rss_gib"), ".2f", " GB"))
    console.print(table)
    bad = [r for r in rows if r.status != "ok"]
    for row in bad:
        console.print(f"{DAGGER} run {row.id} {row.config}: {row.status}"
                      f"{' (' + row.cause + ')' if row.cause else ''}; left out of every conclusion")
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
        started = row.started_at.strftime("%Y-%m-%d %H:%M") if row.started_at else "—"
        table.add_row(str(row.id), str(row.session_id), started, row.device,
                      row.matrix_name or row.session_name or "", row.config, _status(row),
                      str(s.get("n", 0)), _fmt(s.get("mean")))
    console.print(table)


_SHOW = [
    ("mean tok/s (n / decode s)", "mean", ".3f", ""), ("median tok/s", "median", ".3f", ""),
    ("p5 tok/s", "p5", ".3f", ""), ("p95 tok/s", "p95", ".3f", ""),
    ("min tok/s", "min", ".3f", ""), ("max tok/s", "max", ".3f", ""),
    ("prefill tok/s", "prefill_tps", ".2f", ""), ("TTFT", "ttft_s", ".1f", " s"),
    ("cache hit", "cache_hit_pct", ".1f", "%"), ("read / token", "read_mib_per_token", ".1f", " MiB"),
    ("stall / token", "stall_ms_per_token", ".1f", " ms"),
    ("compute / token", "compute_s_per_token", ".3f", " s"), ("I/O / token", "io_s_per_token", ".3f", " s"),
    ("peak RSS", "peak_rss_gib", ".2f", " GB"), ("free-RAM floor", "mem_floor_gib", ".2f", " GB"),
    ("CPU temp start", "cpu_temp_start_c", ".1f", " °C"), ("CPU temp max", "cpu_temp_max_c", ".1f", " °C"),
    ("battery max", "batt_temp_max_c", ".1f", " °C"),
]


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
    table = Table(show_header=False)
    table.add_column("metric")
    table.add_column("value", justify="right")
    for label, key, spec, suffix in _SHOW:
        if stats.get(key) is not None:
            table.add_row(label, _fmt(stats[key], spec, suffix))
    console.print(table)
    for warning in row.warnings or []:
        console.print(f"[yellow]warning:[/] {warning}")


def print_devices(console: Console, inventory: Any, names: list[str], probe: bool,
                  db: str | None) -> None:
    from orchestrator.run.agent_client import AgentClient
    from orchestrator.transports import open_transport
    from orchestrator.transports.base import TransportError

    table = Table()
    for name in ("device", "kind", "address", "workdir"):
        table.add_column(name)
    for name in names:
        entry = inventory.get(name)
        address = {"ssh": lambda e: f"{e.user + '@' if e.user else ''}{e.host}:{e.port}",
                   "adb": lambda e: f"{e.serial} via {e.adb_host}:{e.adb_port}"}.get(
            entry.kind, lambda e: "this machine")(entry)
        table.add_row(name, entry.kind, address, inventory.workdir(name))
    console.print(table)
    if not probe:
        return
    from orchestrator.db.store import Store

    store = Store.open(db)
    for name in names:
        try:
            with open_transport(inventory, name) as transport:
                facts = AgentClient(transport).facts()
        except TransportError as exc:
            console.print(f"[red]{name}: {exc}[/]")
            continue
        store.upsert_device(name, inventory.get(name).kind, facts)
        facts_table = Table(title=f"{name} facts", title_justify="left", show_header=False)
        facts_table.add_column("fact")
        facts_table.add_column("value")
        for key, value in facts.items():
            facts_table.add_row(key, value)
        console.print(facts_table)
