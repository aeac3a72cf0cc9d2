"""Commands over stored data: import artifacts, print tables, export rows."""
from __future__ import annotations

import contextlib
import signal
import sys
import threading
from pathlib import Path

import click

from orchestrator.cli.handler import friendly
from orchestrator.cli.options import console, db_option, exclude_option, trim_option
from orchestrator.db.runs import Runs
from orchestrator.errors import Failed, Interrupted

# "model" (facts), report/table/runs.py TABLES, "ab" (results/ab.py); a literal here, since
# importing them would load pandas at every CLI start
TABLE_KINDS = ("model", "throughput", "detail", "latency", "pressure", "adaptive", "variants",
               "energy", "ab", "turns")
# "turns": the per-turn tables of session runs (none for one-shot runs)
DEFAULT_TABLES = ("model", "throughput", "detail", "latency", "pressure", "adaptive", "turns")


def column_keys(columns: str | None, surface: str) -> list[str] | None:
    """`--columns a,b,c` as keys (None without it); an unknown key is a usage error (exit 2)
    that lists the valid ones. `surface`: "table" or "report" (their throughput tables)."""
    if columns is None:
        return None
    from orchestrator.report.format.columns import column_keys as valid_keys

    if surface == "table":
        from orchestrator.report.table.runs import PICKABLE
    else:
        from orchestrator.report.document.group_tables import PICKABLE
    keys = [k.strip() for k in columns.split(",") if k.strip()]
    valid = valid_keys(PICKABLE)
    bad = [k for k in keys if k not in valid]
    if bad or not keys:
        raise click.BadParameter(f"unknown column(s) {', '.join(bad) or '(none given)'}; "
                                 f"valid: {', '.join(valid)}", param_hint="--columns")
    return keys


COLUMNS_HELP = ("The throughput table's columns, by key, comma-separated, in that order "
                "(mean,p5,p95,compute_s_per_token; an unknown key lists the valid ones), "
                "from it and its detail table, which is then not shown. A column the data "
                "lacks is left out.")


def _checked_name(param: click.Parameter, value: str | None, device: bool) -> str | None:
    """--device and --name follow the inventory's and the matrix's name rules (a full match:
    no newline, no escape sequence reaches the store and every view of it): else exit 2."""
    from orchestrator.config.inventory import DEVICE_NAME
    from orchestrator.config.matrix import _NAME, NAME_RULE

    if value is None:
        return None
    rule, why = (DEVICE_NAME, "use letters, digits and . _ - only, not starting with a dot") \
        if device else (_NAME, NAME_RULE)
    if not rule.fullmatch(value):
        raise click.BadParameter(f"{value!r}: {why}", param=param)
    return value


@click.command("import")
@click.argument("directory", type=click.Path(file_okay=False))
@click.option("--engine", "-e", default="bmoe", show_default=True,
              help="Which engine wrote the artifacts.")
@click.option("--device", "-d", callback=lambda c, p, v: _checked_name(p, v, device=True),
              help="Device name to file the runs under [default: the design "
                   "file's device, else imported]; as in an inventory: letters, digits, . _ -")
@click.option("--name", "-n", callback=lambda c, p, v: _checked_name(p, v, device=False),
              help="Session name (default: the directory's name); as a matrix's name: "
                   "letters, digits and . _ - = , +")
@click.option("--model", "-m", "models", multiple=True, metavar="[GLOB=]NAME",
              help="The model of the runs whose path in the folder matches GLOB "
                   "(`*gemma*=gemma-4-26b`; a bare word W means files named W_*), or of every "
                   "run; wins over what the files say. Repeatable, first match wins.")
@click.option("--measured", metavar="YYYY-MM-DD[THH:MM]",
              help="When the runs whose files record no time ran (local time, as written); "
                   "without it they get their file times and say so.")
@click.option("--design", type=click.Path(dir_okay=False, exists=True), metavar="FILE",
              help="A design file (YAML) for what the files cannot say: device facts, engine "
                   "build, date, models, configs (globs, labels, flags), baselines, order, "
                   "notes (docs/import.md). Checked before anything is written.")
@click.option("--label", "-l", help="A description of the session, shown in its reports.")
@click.option("--replace", is_flag=True,
              help="Re-import every run with the options given now (name, device, model, "
                   "label, measured, design), replacing the session's earlier runs.")
@db_option
@friendly
def import_cmd(directory: str, engine: str, device: str | None, name: str | None,
               models: tuple[str, ...], measured: str | None, design: str | None,
               label: str | None, replace: bool, db: str | None) -> None:
    """Import a study folder as ONE session, each run as it was measured: one run per
    per-token CSV, with its .metrics sidecar, .log summary lines, .out log, <stem>.state
    device state and, for <tag>.route.csv routing traces, <tag>.metrics as the per-token CSV.
    Subfolders are read too; their runs are named by their path (warmup/gemma_k6), which
    keeps warmup/gemma_k6.csv and gemma_k6.csv two runs.

    \b
    How each fact is found (docs/import.md; override in brackets):
      when   a timestamp in the file name (bmoe-20260721-090406), a time in the
             preamble, trailer or .metrics, the matched driver-log section, the
             .state file's date [else --measured, design `measured`]; else the
             day in the folder's name (2026-07-14-warmup); else the file's mtime,
             marked `file time`. Local times stay as written.
      order  by those times, else by the driver-log sections the runs were matched
             to, else by name [design `order`]
      model  the CSV preamble's model=, the route trace's, the .metrics'; else a
             model-family word of the path (gemma, qwen5k, gptoss; never `baseline`
             or `warmup`) [--model GLOB=NAME, design `models`]
      config runs of one model whose settings agree and whose names differ by a
             trailing repeat index (qw-a1, qw-a2) are repeats of config qw-a;
             timestamp-named runs are named by the settings they differ in
             (dense_weights=anon) [design `configs`]
      stdout a log section whose summary line gives the same tokens and s/token as
             a CSV's trailer is that run's stdout (text, entry/exit state, order),
             whatever its name; other sections are summary-only runs
      zeros  RSS or free-RAM columns that are 0 on every token are not measured

    \b
    Every file not imported is listed with its reason: not a per-token CSV, empty, binary,
    impossible values (the file is refused, with the line), unknown kind, sidecar or .state
    without its CSV, not a regular file (FIFO, socket, device: never opened), too large,
    unreadable.

    \b
    Importing the same directory again changes nothing; files that changed replace their run,
    with the options of the first import (new ones are reported as ignored). --replace
    re-imports everything with the options given now. A CSV without its '# summary' trailer
    imports as interrupted (†).

    \b
    Exit status: 0 when the session has runs from the folder, 1 when nothing could be
    imported (no session is left behind; with --replace the earlier runs are kept),
    2 on a usage error or a bad design file, 4 while another import of the folder runs
    (nothing written); 130 / 143 on Ctrl-C / SIGTERM (the run being written is removed).
    """
    from orchestrator.db.store import Store
    from orchestrator.ingest.importer import import_dir, model_rules
    from orchestrator.run.lifecycle import Stopped, stop_on_signals

    try:
        main = threading.current_thread() is threading.main_thread()
        with stop_on_signals() if main else contextlib.nullcontext():
            # SIGTERM too: the run being written is deleted, then orch exits
            report = import_dir(Store.open(db, write=True), directory, engine=engine, device=device,
                                name=name, model=model_rules(models) or None, label=label,
                                replace=replace, measured=measured, design=design)
    except Stopped as exc:   # (another import of the folder running: ImportBusy, exit 4)
        raise Interrupted(f"orch import: stopped by {signal.Signals(exc.signum).name}: the run "
                          f"being written was removed; import {directory} again to finish",
                          exc.signum) from None
    # file names are the folder's: shown escaped
    from orchestrator.escape import visible

    for path, reason in report.skipped:
        click.echo(visible(f"  {path}: not imported: {reason}"), err=True)
    for problem in report.problems:
        click.echo(visible(f"  {problem}"), err=True)
    if report.ignored:
        click.echo(f"options ignored: {', '.join(report.ignored)} (use --replace)", err=True)
    if not report.ok:
        kept = f"; the session's {report.kept} earlier run(s) are kept" if report.kept else ""
        raise Failed(f"nothing imported from {directory}: {len(report.skipped)} file(s) "
                     f"skipped{kept}")
    click.echo(f"session {report.session_id}: {len(report.imported)} run(s) imported, "
               f"{len(report.unchanged)} unchanged, {len(report.skipped)} skipped")


@click.command()
@click.argument("session", required=False)
@click.option("--matrix", "-m", help="The latest session of this matrix name.")
@click.option("--format", "fmt", type=click.Choice(["md", "csv", "json"]), default="md",
              show_default=True)
@click.option("--tables", "-t",
              help=f"Which tables, comma-separated: {', '.join(TABLE_KINDS)} (default: "
                   f"{','.join(DEFAULT_TABLES)}, and ab when configs ran more than once).")
@click.option("--quantile", type=click.Choice(["linear", "lower"]), default="linear",
              show_default=True,
              help="p5/p95 method: linear interpolation (docs/formats.md §6) or the lower "
                   "neighbour (what some older published tables used).")
@click.option("--baseline", "-b", "baselines", multiple=True, metavar="[MODEL:]CONFIG",
              help="The config the A/B rows compare against: CONFIG for every model that ran "
                   "it (or a unique prefix of it), MODEL:CONFIG for one model; repeatable: two for one model give each "
                   "its own A/B rows (default: the matrix's or the design file's "
                   "`baseline:`).")
@click.option("--columns", help=COLUMNS_HELP)
@click.option("--pivot", type=click.Choice(["model"]),
              help="Instead of the tables: the session's models side by side (mean tok/s per "
                   "model), configs paired by name, else by settings apart from the model's "
                   "own, else by design label.")
@exclude_option
@trim_option
@db_option
@friendly
def table(session: str | None, matrix: str | None, fmt: str, tables: str | None, quantile: str,
          baselines: tuple[str, ...], columns: str | None, pivot: str | None,
          excludes: tuple[str, ...], trim: int | None, db: str | None) -> None:
    """Print the per-run tables of a session (default: the newest), with the columns of the
    published summary tables: throughput (the study's columns, each row's run id), its detail
    (prefill, TTFT, stall: "—" for a serial run, majflt), per-token latency, device pressure,
    adaptive cache / speculation, and
    A/B rows (each model against its own baseline, with 95% intervals and Holm-corrected
    p-values).

    SESSION is a session id or name. Runs that did not end ok carry a dagger (†) and are
    listed with their cause under the table. An unknown -b config or model exits 2 naming
    the choices."""
    from orchestrator.db.runs import Sessions
    from orchestrator.db.store import Store
    from orchestrator.report.table.session import session_tables
    from orchestrator.results.table_data import table_data
    from orchestrator.results.ab import parse_baselines, shown_by_default

    kinds = [k.strip() for k in (tables or "").split(",") if k.strip()]
    bad = [k for k in kinds if k not in TABLE_KINDS]
    if bad:
        raise click.BadParameter(f"unknown table(s) {', '.join(bad)}", param_hint="--tables")
    picked = column_keys(columns, "table")
    store = Store.open(db, create=False)
    sid = Sessions(store).resolve(session, matrix)
    chosen = parse_baselines(baselines, Runs(store).current(sid), f"session {sid}")
    if pivot is not None:
        from orchestrator.report.table.pivot import pivot_text
        from orchestrator.results.pivot import session_pivots

        sys.stdout.write(pivot_text(session_pivots(store, sid, quantile), sid, fmt))
        return
    if tables is None:
        kinds = list(DEFAULT_TABLES) + (["ab"] if shown_by_default(Runs(store).current(sid)) else [])
        if picked is not None:      # the picked columns may come from the detail table
            kinds.remove("detail")
    data = table_data(store, sid, quantile, chosen or None, trim=trim, with_ab="ab" in kinds,
                      exclude=excludes)
    text = session_tables(data, sid, kinds, fmt, columns=picked)
    if fmt == "md":   # notes name runs and configs as stored: their escapes shown, not sent
        from orchestrator.escape import visible

        text = visible(text)
    sys.stdout.write(text)


PROVENANCE_HELP = ("share: paths relative to the study folder (an import's) or the matrix's "
                   "folder, other paths by file name, no user@host; full: absolute paths and "
                   "the controller's user@host as stored (docs/report.md, Provenance).")


@click.command()
@click.argument("session", required=False)
@click.option("--matrix", "-m", help="The latest session of this matrix name.")
@click.option("--format", "fmt", type=click.Choice(["csv", "json", "parquet"]), default="csv",
              show_default=True)
@click.option("--out", "-o", "out_dir", type=click.Path(file_okay=False), default=".",
              show_default=True, help="Directory for runs.<ext>, tokens.<ext>, samples.<ext>.")
@click.option("--provenance", type=click.Choice(["share", "full"]), default="share",
              show_default=True, help=PROVENANCE_HELP)
@db_option
@friendly
def export(session: str | None, matrix: str | None, fmt: str, out_dir: str, provenance: str,
           db: str | None) -> None:
    """Export a session's run, token and sample tables as csv, json or parquet files."""
    from orchestrator.db.runs import Sessions
    from orchestrator.db.store import Store
    from orchestrator.report.table.export import export_session
    from orchestrator.results.export import session_export
    from orchestrator.report.format.outputs import check_out_dir

    check_out_dir(Path(out_dir))
    store = Store.open(db, create=False)
    sid = Sessions(store).resolve(session, matrix)
    for path in export_session(session_export(store, sid), Path(out_dir), fmt,
                               full=provenance == "full"):
        console.print(f"wrote {path}")
