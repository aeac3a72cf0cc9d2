"""Terminal views of the store (rich tables) for `orch run`, `orch runs`, `orch show`,
`orch devices`. Numbers come from the analysis layer; which statistics each view shows, under
which header, is report/format/columns.py (SESSION, LISTING, SHOW), written by the one formatter set
(orchestrator.report.format.formatters), so a figure reads here as in `orch table` and the report."""
from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from rich.console import Console
from rich.table import Table

from orchestrator.results.listings import DATE_ONLY, Listing, RunDetail, RunRow
from orchestrator.escape import visible
from orchestrator.record_versions import entry_state
from orchestrator.report.format.columns import LISTING, SESSION, SHOW
from orchestrator.report.format.formatters import token_count, when
from orchestrator.report.format.labels import repeat_shown
from orchestrator.report.terminal.fit import FitColumn, fitted_table
from orchestrator.stats.figures import RunFigures
from orchestrator.stats.status import Status
from orchestrator.stats.values import DAGGER, DASH, is_missing, plain


def _status(row: RunRow) -> str:
    return row.status if row.status == Status.OK else f"{DAGGER} {row.status}"


# which per-run columns of `orch run --runs` give way first on a narrow terminal (higher goes
# first); run, device, config, rep, status and decode mean always stay (report/terminal/fit.py)
_RUN_DROPS = {"tokens": 4, "median": 5, "p95": 6, "p5": 7, "min": 8, "max": 9,
              "read_mib_per_token": 10, "cache_hit_pct": 11, "peak_rss_gib": 12}


def print_session_table(console: Console, listing: Listing) -> None:
    """A session's runs, one row each (`orch run --runs`, `orch lab wait`), fitted to the
    terminal, then its notes (print_session_notes)."""
    rows, stats, session_id = listing.rows, listing.figures, listing.session_id
    columns = [FitColumn("run", [str(r.id) for r in rows], "right"),
               FitColumn("device", [visible(r.device) for r in rows]),
               FitColumn("config", [visible(r.config) for r in rows]),
               FitColumn("rep", [repeat_shown(r.repeat_index) for r in rows], "right"),
               FitColumn("status", [_status(r) for r in rows])]
    columns += [FitColumn(col.header, [col.text(stats.get(r.id)) for r in rows], col.justify,
                          _RUN_DROPS.get(col.key)) for col in SESSION.columns]
    table, left_out = fitted_table(
        console, columns, f"session {session_id}: {rows[0].matrix_name if rows else ''}")
    console.print(table)
    print_left_out(console, left_out)
    print_session_notes(console, listing)


def print_left_out(console: Console, headers: list[str]) -> None:
    """The columns a table left out to fit the terminal, named (so nothing goes unsaid)."""
    if headers:
        console.print(f"(left out to fit {console.width} columns: {', '.join(headers)}; a "
                      f"wider terminal shows them)", markup=False, highlight=False,
                      style="dim")


def print_session_notes(console: Console, listing: Listing) -> None:
    """What follows a session's table: a session run's turns, the runs that did not end
    ok with their cause, the runs' warnings and the session's comparability caveats."""
    from orchestrator.report.format.labels import failure_line

    rows, stats = listing.rows, listing.figures
    for row in rows:       # a session run: its turns in one line (orch show N: the table)
        s = stats.get(row.id)
        if s is not None and s.turns:
            console.print(visible(turns_line(row.id, s)), markup=False, highlight=False)
    for row in rows:
        if row.status != Status.OK:
            console.print(visible(failure_line(row)), markup=False, highlight=False)
    for row in rows:
        for warning in row.warnings or []:
            console.print(visible(f"[yellow]warning[/] run {row.id} {row.config}: {warning}"))
    for warning in listing.caveats:
        console.print(visible(f"[yellow]comparability[/]: {warning}"))


def _listed_start(row: RunRow) -> str:
    """`orch runs`' "started" cell: to the minute, as stored. A study's local time is shown as
    the study wrote it; a file's mtime says it is one, since the run may have started well
    before its file was last written."""
    if row.started_at is None:
        return DASH
    if row.date_only:
        return row.started_at.strftime("%Y-%m-%d") + f" ({row.date_note})"
    text = row.started_at.strftime("%Y-%m-%d %H:%M")
    return f"{text} (file time)" if row.clock == "file" else text


def print_runs(console: Console, listing: Listing) -> None:
    rows, stats = listing.rows, listing.figures     # the figures kept with the runs
    if not rows:
        console.print(visible(f"no runs in {listing.where}"))
        return
    table = Table()
    for name in ("run", "session", "started", "device", "matrix", "config", "status"):
        table.add_column(name)
    for col in LISTING.columns:
        table.add_column(col.header, justify=col.justify)
    for row in rows:
        s = stats.get(row.id)
        table.add_row(str(row.id), str(row.session_id), _listed_start(row), visible(row.device),
                      visible(row.matrix_name or row.session_name or ""), visible(row.config),
                      _status(row),
                      *(col.text(s) for col in LISTING.columns))
    console.print(table)


def _iso(t: dt.datetime | None, row: RunRow) -> str | None:
    """A stored time as ISO 8601, with no offset added: a study's local time has no zone (a
    database that attached one to it, PostgreSQL's timestamptz, has it dropped again)."""
    if t is None:
        return None
    return (t.replace(tzinfo=None) if row.clock == "local" else t).isoformat()


def runs_json(listing: Listing) -> list[dict[str, Any]]:
    """`orch runs --format json`: one object per run, newest first (docs/formats.md, "When an
    imported run ran"). `repeat_index` is 0-based as stored (the table's "rep" is it + 1);
    `time_source` null means orch's own clock, UTC; `settings` is an import's `flags` parsed
    (null for a live run, whose `flags` are engine flags); `tokens` and `mean_tok_s` are the
    figures the table shows, unformatted."""
    rows, stats = listing.rows, listing.figures
    return [{"id": row.id, "session": row.session_id, "session_name": row.session_name,
             "device": row.device, "matrix": row.matrix_name, "model": row.model,
             "config": row.config, "repeat_index": row.repeat_index,
             "order_index": row.order_index, "status": row.status,
             "started_at": _iso(row.started_at, row), "ended_at": _iso(row.ended_at, row),
             "time_source": row.time_source, "source_file": row.source_file,
             "settings": row.settings, "flags": row.flags, "engine_build": row.engine_build,
             "tokens": plain(stats[row.id].tokens),
             "mean_tok_s": plain(stats[row.id].mean)}
            for row in rows]


def print_run(console: Console, detail: RunDetail) -> None:
    row, stats = detail.row, detail.figures     # the figures kept with the run
    console.print(visible(f"[bold]run {row.id}[/] session {row.session_id}, device {row.device}, "
                  f"config {row.config} (repeat {repeat_shown(row.repeat_index)})"))
    console.print(visible(f"status {_status(row)}" + (f" — {row.cause}" if row.cause else "")
                  + f", {token_count(stats.tokens)} tokens, engine {row.engine}"))
    console.print(visible(f"flags: {row.flags or '(none)'}"), highlight=False)
    for line in when_lines(row):
        console.print(visible(line), highlight=False, markup=False)
    for line in start_facts(row, entry_state(row.summary)):
        console.print(visible(line), highlight=False, markup=False)
    table = Table(show_header=False)
    table.add_column("metric")
    table.add_column("value", justify="right")
    for col in SHOW.columns:       # the statistics the run measured
        if not is_missing(stats.get(col.key)):
            table.add_row(col.name, col.text(stats))
    console.print(table)
    if stats.turns:
        print_turns(console, stats)
    for warning in row.warnings or []:
        console.print(visible(f"[yellow]warning:[/] {warning}"))
    if row.status != Status.OK:
        for line in failure_details(detail):
            console.print(visible(line), highlight=False, markup=False)


def start_facts(row: RunRow, entry: Mapping[str, Any] | None) -> list[str]:
    """What `orch show` prints about a run's start: temperatures, free RAM, cooldown, and an
    imported run's driver entry state and `.state` BEFORE/AFTER blocks (the record's
    entry_state, as RunRow.record_fields gives it: {driver, state}). Empty when the run has
    none of them. Here, not beside the parsers in ingest/state.py: that module imports the
    record's pydantic models and the bmoe parsers, which `orch show` need not load."""
    out = []
    temps = row.temp_start or {}
    bits = [f"{k} {v}" for k, v in sorted(temps.items())]
    if row.mem_avail_start_kb is not None:
        bits.append(f"MemAvailable {row.mem_avail_start_kb} kB")
    if row.cooldown_s is not None:
        bits.append(f"cooldown waited {row.cooldown_s:g} s")
    if bits:
        out.append("start: " + ", ".join(bits))
    driver = (entry or {}).get("driver") or {}
    for moment, values in (("entry", driver), ("exit", driver.get("exit") or {})):
        line = _state_line(values)
        if line:
            out.append(f"driver {moment} ({driver.get('log')}): {line}")
    state = (entry or {}).get("state") or {}
    for moment in ("before", "after"):
        block = state.get(moment)
        if block:
            out.append(f"{moment} ({state.get('file')}): " + _block_line(block))
    return out


# (key, label, unit, divisor) of a driver log's ENTRY/EXIT state line
_STATE_SHOWN = (("cpu_khz", "CPU", "kHz", 1), ("cpu_temp_mC", "CPU", "°C", 1000),
                ("batt_temp_dC", "battery", "°C", 10), ("batt_level_pct", "battery level", "%", 1),
                ("mem_avail_kb", "MemAvailable", "kB", 1), ("waited_s", "waited", "s", 1))


def _state_line(values: dict[str, Any]) -> str:
    """A driver log's entry or exit state as `orch show` prints it ("" when it has none)."""
    bits = []
    for key, label, unit, divisor in _STATE_SHOWN:
        value = values.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            shown = f"{value / divisor:g}" if divisor != 1 else str(value)
            bits.append(f"{label} {shown} {unit}".replace(" %", "%"))
    return ", ".join(bits)


def _block_line(block: dict[str, Any]) -> str:
    caps = ", ".join(f"{p} cap {v.get('scaling_max')}/{v.get('hw_max')} kHz cur {v.get('cur')}"
                     for p, v in sorted(block.get("policies", {}).items()))
    parts = [f"thermal status {block.get('thermal_status')}",
             f"MemAvailable {block.get('mem_avail_kb')} kB", caps,
             f"battery {block.get('batt_temp_dC')} dC"]
    return "; ".join(p for p in parts if p and "None" not in p)


# what recorded an imported run's start, in `orch show`'s words (run.time_source)
_SOURCE_WORDS = {"file name": "the file name", "preamble": "the CSV's preamble",
                 "trailer": "the CSV's trailer", "metrics": "the .metrics sidecar",
                 "log": "the driver log", "state": "the .state file's date",
                 "design": "the design file's `measured`", "option": "--measured"}


def when_lines(row: RunRow) -> list[str]:
    """When the run started, saying which clock said so (a study's local time is never called
    UTC, a file's mtime is called a guess), and the file an imported run was read from."""
    start = when(row.started_at)
    if row.clock == "orch":
        return [f"started {start} UTC" if row.started_at else f"started {DASH}"]
    if row.started_at is None:
        lines = ["started: not recorded in the files"]
    elif row.date_only:
        whose = "the folder name's date" if row.time_source == DATE_ONLY else f"the {row.date_note}"
        lines = [f"started {row.started_at:%Y-%m-%d} ({whose}: the files do not "
                 f"record the time of day)"]
    elif row.clock == "local":
        words = _SOURCE_WORDS.get(row.time_source or "", f"the {row.time_source}")
        lines = [f"started {start} (from {words}, local time)"]
    else:
        mtime = "from the file's mtime: the files did not record when it ran"
        lines = [f"started {start} ({mtime})"]
    source = row.source_file or row.remote_dir     # imports before source_file: the path
    return lines + ([f"source: {source}"] if source else [])


def failure_details(detail: RunDetail) -> list[str]:
    """Why a run did not end ok, in the engine's words: the parse errors its output gave
    (a bad CSV line, a missing summary) and the last lines of its stderr."""
    summary = detail.row.summary or {}
    lines = [f"parse error: {error}" for error in summary.get("errors") or []]
    tail = detail.stderr_tail
    if tail:
        lines.append(f"engine stderr (last {len(tail)} lines):")
        lines += [f"  {line}" for line in tail]
    return lines


def turns_line(run_id: int, stats: RunFigures) -> str:
    """A session run's turns in one line: each turn's decode tok/s by kind, then the after-idle
    turns against the warm ones."""
    from orchestrator.report.format.turn_columns import TURN_COMPARISON, TURNS

    mean = next(c for c in TURNS.columns if c.key == "mean")
    turns = ", ".join(f"{t.turn} {t.kind} {mean.text(t)}" for t in stats.turns or ())
    delta = next(c for c in TURN_COMPARISON.columns if c.key == "after_idle_vs_warm_pct")
    after = delta.text(stats)
    return (f"run {run_id} turns (decode tok/s): {turns}"
            + (f"; after idle vs warm {after}" if after != DASH else "")
            + f" (orch show {run_id})")


def print_turns(console: Console, stats: RunFigures) -> None:
    """A session run's turns (report/format/turn_columns.py TURNS, the columns any turn
    measured), then its turn comparison one figure a line."""
    from orchestrator.report.format.turn_columns import TURN_COMPARISON, TURNS

    turns = stats.turns or ()
    shown = [c for c in TURNS.columns if any(c.text(t) not in (DASH, "") for t in turns)]
    table = Table(title="turns", title_justify="left")
    for c in shown:
        table.add_column(c.header, justify=c.justify)
    for t in turns:
        table.add_row(*(c.text(t) for c in shown))
    console.print(table)
    for c in TURN_COMPARISON.columns:
        text = c.text(stats)
        if text != DASH:
            console.print(visible(f"{c.name}: {text}"), highlight=False, markup=False)
