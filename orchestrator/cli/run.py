"""`orch run`, `orch runs`, `orch show`: run a matrix and look at its runs."""
from __future__ import annotations

import shlex
import sys

import click

from orchestrator.cli.options import (
    console,
    db_option,
    errors,
    friendly,
    inventory_option,
)


@click.command()
@click.argument("matrix_file", type=click.Path(dir_okay=False))
@click.option("--device", "-d", "devices", multiple=True, default=("local",), show_default=True,
              help="Device name from the inventory; repeat it to run several devices at "
                   "once (each device runs its cells in order), or `all`.")
@click.option("--resume", is_flag=True,
              help="Continue the latest session of this matrix on the device: collect runs "
                   "that finished while orch was away, re-run cells that did not end ok.")
@click.option("--link-grace", type=float, default=120.0, show_default=True, metavar="SECONDS",
              help="How long to wait for a device that dropped off before a run is interrupted.")
@inventory_option
@db_option
@friendly
def run(matrix_file: str, devices: tuple[str, ...], resume: bool, link_grace: float,
        inventory: str | None, db: str | None) -> None:
    """Run MATRIX_FILE's cells on a device and store the results.

    Progress shows per cell the config, tokens so far and tok/s; a table of the runs follows.
    Cells continue past a failed cell. Exit code 0 when every cell ended ok, 1 otherwise,
    2 for a bad matrix or inventory (nothing is written then).
    """
    from orchestrator.config.inventory import load_inventory
    from orchestrator.config.matrix import load_matrix
    from orchestrator.db.store import Store
    from orchestrator.results.terminal import print_session_table
    from orchestrator.run.progress import Board
    from orchestrator.run.runner import LinkPolicy

    loaded = load_matrix(matrix_file)
    inv = load_inventory(inventory)
    from orchestrator.run.session import run_devices

    names = inv.names() if devices == ("all",) else list(dict.fromkeys(devices))
    for name in names:
        inv.get(name)
    store = Store.open(db)
    board = Board(errors)
    try:
        results = run_devices(store, inv, loaded, names, board, resume=resume,
                              link=LinkPolicy(grace_s=link_grace),
                              command="orch " + shlex.join(sys.argv[1:]))
    finally:
        board.close()
    ok = True
    for name in names:
        result = results[name]
        if isinstance(result, BaseException):
            click.echo(f"{name}: {result}", err=True)
            ok = False
            continue
        print_session_table(console, store, result.session_id)
        ok = ok and all(o.status == "ok" for o in result.outcomes)
    sys.exit(0 if ok else 1)


@click.command()
@click.option("--session", "-s", type=int, help="Only this session's runs.")
@click.option("--limit", "-n", type=int, default=30, show_default=True)
@db_option
@friendly
def runs(session: int | None, limit: int, db: str | None) -> None:
    """List past runs, newest first (id, session, device, matrix, config, status, tok/s)."""
    from orchestrator.db.store import Store
    from orchestrator.results.terminal import print_runs

    print_runs(console, Store.open(db), session, limit)


@click.command()
@click.argument("run_id", type=int)
@db_option
@friendly
def show(run_id: int, db: str | None) -> None:
    """Print one run's statistics: tok/s distribution, I/O, cache, device pressure."""
    from orchestrator.db.store import Store
    from orchestrator.results.terminal import print_run

    print_run(console, Store.open(db), run_id)
