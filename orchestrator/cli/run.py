"""`orch run`, `orch runs`, `orch show`: run a matrix and look at its runs."""
from __future__ import annotations

import shlex
import signal
import sys
from typing import TYPE_CHECKING, NoReturn

import click

from orchestrator.address_space import LowMemory, is_out_of_memory, load, memory_line
from orchestrator.cli.handler import friendly
from orchestrator.cli.options import console, db_option, errors, inventory_option
from orchestrator.errors import Failed, Interrupted, OrchError
from orchestrator.stats.status import Status

if TYPE_CHECKING:
    from orchestrator.db.store import Store

# the numeric libraries a run's figures load (stats/: the trend test, the block bootstrap;
# arch loads matplotlib)
RUN_LIBRARIES = ("numpy", "pandas", "scipy.stats", "matplotlib", "arch.bootstrap")


@click.command()
@click.argument("matrix_file", type=click.Path(dir_okay=False))
@click.option("--device", "-d", "devices", multiple=True, default=("local",), show_default=True,
              help="Device name from the inventory; repeat it to run several devices at "
                   "once (each device runs its cells in order), or `all`.")
@click.option("--resume", is_flag=True,
              help="Continue the latest session of this matrix on the device: collect runs "
                   "that finished while orch was away, re-run cells that did not end ok.")
@click.option("--link-grace", type=click.FloatRange(0, 86400), default=120.0, show_default=True,
              metavar="SECONDS",
              help="How long to wait for a device that dropped off before a run is interrupted.")
@click.option("--force", is_flag=True,
              help="Start cells even while another orch job runs on the device (two engines "
                   "then share it: the measurements are not clean).")
@click.option("--yes", "-y", is_flag=True,
              help="Run a plan of over 1,000 cells without asking (needed without a terminal).")
@click.option("--runs", "per_run", is_flag=True,
              help="End with the table of every run too (one row per run), not only the "
                   "table per config.")
@inventory_option
@db_option
@friendly
def run(matrix_file: str, devices: tuple[str, ...], resume: bool, link_grace: float,
        force: bool, yes: bool, per_run: bool, inventory: str | None, db: str | None) -> None:
    """Run MATRIX_FILE's cells on a device and store the results.

    Progress shows per cell the config, tokens so far, tok/s and the ETA (without a terminal:
    a line per cell start and end, and one a minute while a cell runs); a table per config
    follows (mean tok/s with its 95% interval over the repeats, the devices side by side;
    --runs adds one row per run).
    Cells continue past a failed cell. Exit code 0 when every cell ended ok, 1 otherwise,
    2 for a bad matrix, inventory, engine option or --db (all checked before the store or a
    device is touched: nothing is written then), 3 for an unknown device, 4 when the session
    or device is busy with another orch, 130 on Ctrl-C, 143 on SIGTERM. A plan over
    1,000 cells asks first (--yes to skip; refused without a terminal). `timeout: 0` in a
    matrix means no timeout. With --resume, a cell whose flags changed since it ran is run
    again (its old run is superseded), not kept. A device where an orch job still runs is
    refused (--resume collects this session's, --force starts beside it). Ctrl-C or SIGTERM
    stops the engine, marks its run interrupted (--resume re-runs it) and ends the session.
    """
    from orchestrator.run.lifecycle import stop_on_signals

    hint = resume_command(matrix_file, _given(click.get_current_context()))
    with stop_on_signals():
        _run(matrix_file, devices, resume, link_grace, force, yes, per_run, inventory, db, hint)


def _run(matrix_file: str, devices: tuple[str, ...], resume: bool, link_grace: float,
         force: bool, yes: bool, per_run: bool, inventory: str | None, db: str | None,
         hint: str) -> None:
    from orchestrator.config.inventory import load_inventory
    from orchestrator.config.matrix import load_matrix
    from orchestrator.db.store import Store
    from orchestrator.run.progress import Board
    from orchestrator.run.runner import LinkPolicy
    from rich.markup import escape as markup_escape

    loaded = load_matrix(matrix_file)
    inv = load_inventory(inventory)
    from orchestrator.cli.preflight import confirm_size
    from orchestrator.run.preflight import check_engine, device_names
    from orchestrator.run.session import RunOptions, run_devices

    names = device_names(inv, devices)
    check_engine(loaded)
    confirm_size(loaded, len(names), yes)
    store = Store.open(db, write=True)
    # what every run's figures load, loaded before a session starts (after --db is known good:
    # matplotlib writes its config and font cache): under an address-space limit too low for
    # them one line, not a run left `running` after its first cell
    load(RUN_LIBRARIES)
    board = Board(errors)
    # a lost store is waited for as long as a lost device (db/reconnect.py)
    store.guard.grace_s = link_grace
    store.guard.note = lambda message: board.print(markup_escape(message))
    try:
        options = RunOptions(resume=resume, force=force, link=LinkPolicy(grace_s=link_grace),
                             command="orch " + shlex.join(sys.argv[1:]), resume_hint=hint)
        results = run_devices(store, inv, loaded, names, board, options)
    except KeyboardInterrupt:
        board.close()
        _stopped(hint)
    finally:
        board.close()
    codes = set()   # the exit code each device that did not end ok asks for
    sessions: dict[str, int] = {}
    for name in names:
        result = results.get(name)
        if result is None:   # its thread died without a result (an unexpected error)
            click.echo(f"{name}: the run ended without a result (see the error above)", err=True)
            codes.add(Failed.exit_code)
            continue
        if isinstance(result, BaseException):   # one line, named once
            text = memory_line() if is_out_of_memory(result) else str(result)
            click.echo(text if text.startswith(f"{name}: ") else f"{name}: {text}", err=True)
            codes.add(result.exit_code if isinstance(result, OrchError) else Failed.exit_code)
            continue
        sessions[name] = result.session_id
        if any(o.status != Status.OK for o in result.outcomes):
            codes.add(Failed.exit_code)
    if sessions:
        _analysis(store, sessions, per_run)
    if codes:   # reported above; one device's own code (4: busy), else 1
        raise _Reported(codes.pop() if len(codes) == 1 else Failed.exit_code)


def _analysis(store: Store, sessions: dict[str, int], per_run: bool) -> None:
    """The end-of-run tables. They need numpy, scipy and pandas; where these do not fit under
    the address-space limit (address_space.py), the analysis is skipped with one line: the
    runs are stored, and the exit code stays the cells' (docs/reliability.md, "Low memory")."""
    from orchestrator.report.terminal.run_end import print_run_end
    from orchestrator.results.run_end import run_end

    try:
        print_run_end(console, run_end(store, sessions), runs=per_run)
    except LowMemory as exc:
        _skipped(str(exc), sessions)
    except (MemoryError, ImportError) as exc:
        if not is_out_of_memory(exc):
            raise
        _skipped(memory_line(), sessions)


def _skipped(why: str, sessions: dict[str, int]) -> None:
    tables = ", ".join(f"`orch table {sid}`" for sid in sorted(set(sessions.values())))
    click.echo(f"the analysis was skipped ({why}); the runs are stored: {tables} (with the "
               f"same --db) shows them where there is room", err=True)


class _Reported(OrchError):
    """The devices' lines and tables are printed: only the exit code is left to give."""

    def __init__(self, exit_code: int) -> None:
        super().__init__()
        self.exit_code = exit_code


def _given(ctx: click.Context) -> dict[str, object]:
    """The options the user typed on `orch run`'s command line, by parameter name (not
    their defaults, nor ORCH_DB: the environment gives it again, and a URL there may hold a
    password that a printed hint would show)."""
    from click.core import ParameterSource

    return {name: value for name, value in ctx.params.items()
            if name != "matrix_file"
            and ctx.get_parameter_source(name) == ParameterSource.COMMANDLINE}


def resume_command(matrix_file: str, given: dict[str, object]) -> str:
    """The command that resumes this run: its matrix, `--resume` and every option the user
    gave (each --device, --db, --inventory, --link-grace...), so that it runs as typed
    (before: `orch run X --resume` without the --device it needed, which failed)."""
    words = ["orch", "run", matrix_file, "--resume"]
    for param in run.params:
        if not isinstance(param, click.Option) or param.name not in given \
                or param.name == "resume":
            continue
        value, flag = given[param.name], param.opts[0]
        if param.is_flag:
            words += [flag] if value else []
        elif param.multiple:
            for item in value or ():   # type: ignore[attr-defined]
                words += [flag, str(item)]
        elif value is not None:
            words += [flag, str(value)]
    return shlex.join(words)


def _stopped(hint: str) -> NoReturn:
    """One line and 128 + the signal (130 Ctrl-C, 143 SIGTERM): the engine was stopped, its
    run marked interrupted and the session ended by the runner before this."""
    from orchestrator.run.lifecycle import STOPPING

    signum = STOPPING.signum or signal.SIGINT
    raise Interrupted(f"orch run: stopped by {signal.Signals(signum).name}: the running cell "
                      f"is marked interrupted and the session ended; `{hint}` re-runs it",
                      signum)


@click.command()
@click.option("--session", "-s", type=int, help="Only this session's runs.")
@click.option("--limit", "-n", type=int, default=30, show_default=True)
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table",
              show_default=True,
              help="json: one object per run with where its start time came from "
                   "(time_source, null = orch's clock, UTC), its source file and its settings; "
                   "repeat_index is 0-based.")
@db_option
@friendly
def runs(session: int | None, limit: int, fmt: str, db: str | None) -> None:
    """List past runs, newest first (id, session, device, matrix, config, status, tok/s)."""
    from orchestrator.db.store import Store

    store = Store.open(db, create=False)
    if fmt == "json":
        import json

        from orchestrator.report.terminal.runs import runs_json
        from orchestrator.results.listings import runs_listing

        click.echo(json.dumps(runs_json(runs_listing(store, session, limit)), indent=1,
                              ensure_ascii=False))
        return
    from orchestrator.report.terminal.runs import print_runs
    from orchestrator.results.listings import runs_listing

    print_runs(console, runs_listing(store, session, limit))


@click.command()
@click.argument("run_id", type=int)
@db_option
@friendly
def show(run_id: int, db: str | None) -> None:
    """Print one run's statistics: tok/s distribution, I/O, cache, device pressure."""
    from orchestrator.db.store import Store
    from orchestrator.report.terminal.runs import print_run
    from orchestrator.results.listings import run_detail

    print_run(console, run_detail(Store.open(db, create=False), run_id))
