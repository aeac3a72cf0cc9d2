"""The `orch` command line. Thin: it parses options and calls the library layers."""
from __future__ import annotations

import functools
import shlex
import sys
from typing import Any, Callable

import click
from rich.console import Console

from .. import __version__
from ..yamlfile import ConfigError

# Piped output (logs, CI) gets wide tables instead of rich's 80-column default with "…" cells.
console = Console() if sys.stdout.isatty() else Console(width=220)
errors = Console(stderr=True) if sys.stderr.isatty() else Console(stderr=True, width=220)


def db_option(func: Callable[..., Any]) -> Callable[..., Any]:
    func = click.option("--db", envvar="ORCH_DB", metavar="URL",
                        help="Store: a SQLAlchemy URL or a SQLite file path "
                             "(default ./orch.db; env ORCH_DB).")(func)
    return func


def inventory_option(func: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--inventory", "-i", metavar="FILE",
                        help="Device inventory (default ./devices.yaml, then "
                             "~/.config/orch/devices.yaml; `local` always exists).")(func)


def friendly(func: Callable[..., Any]) -> Callable[..., Any]:
    """Turn the library's user-facing errors into a message and an exit code, not a trace."""
    from ..transports.base import TransportError

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except ConfigError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(2)
        except TransportError as exc:
            click.echo(f"device error: {exc}", err=True)
            sys.exit(1)
    return wrapper


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="orch")
def main() -> None:
    """orch: run LLM inference benchmark matrices on local, SSH and adb devices, store every
    token and sample in SQLite, and report the numbers.

    \b
    Typical session:
      orch run matrices/local.yaml          # run a matrix on the built-in `local` device
      orch runs                             # list past runs
      orch show 3                           # statistics of run 3
      orch table                            # the newest session as published tables
      orch report -o docs/bench.md          # a benchmark document with provenance
      orch devices --probe                  # list devices and their facts
      orch import DIR --engine bmoe         # existing engine artifacts into the store
      orch calibrate -d phone               # idle temperature baseline for cooldowns
    """


@main.command()
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
    from ..db.store import Store
    from ..inventory import load_inventory
    from ..matrix import load_matrix
    from ..progress import Board
    from ..runner import LinkPolicy
    from ..views import print_session_table

    loaded = load_matrix(matrix_file)
    inv = load_inventory(inventory)
    from ..session import run_devices

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


@main.command()
@click.option("--session", "-s", type=int, help="Only this session's runs.")
@click.option("--limit", "-n", type=int, default=30, show_default=True)
@db_option
@friendly
def runs(session: int | None, limit: int, db: str | None) -> None:
    """List past runs, newest first (id, session, device, matrix, config, status, tok/s)."""
    from ..db.store import Store
    from ..views import print_runs

    print_runs(console, Store.open(db), session, limit)


@main.command()
@click.argument("run_id", type=int)
@db_option
@friendly
def show(run_id: int, db: str | None) -> None:
    """Print one run's statistics: tok/s distribution, I/O, cache, device pressure."""
    from ..db.store import Store
    from ..views import print_run

    print_run(console, Store.open(db), run_id)


@main.group(invoke_without_command=True)
@click.option("--probe", is_flag=True, help="Connect to each device and print its facts.")
@click.option("--device", "-d", "names", multiple=True, help="Only these devices.")
@inventory_option
@db_option
@click.pass_context
@friendly
def devices(ctx: click.Context, probe: bool, names: tuple[str, ...], inventory: str | None,
            db: str | None) -> None:
    """List the inventory's devices; with --probe, collect and print their facts."""
    if ctx.invoked_subcommand is not None:
        return
    from ..inventory import load_inventory
    from ..views import print_devices

    inv = load_inventory(inventory)
    print_devices(console, inv, list(names) or inv.names(), probe, db)


@devices.command()
@click.argument("name")
@click.option("--yes", "-y", is_flag=True, help="Add the key without asking.")
@inventory_option
@friendly
def trust(name: str, yes: bool, inventory: str | None) -> None:
    """Fetch an SSH device's host key, show its fingerprint, and add it to the known_hosts
    file the device uses (the inventory's `known_hosts`, else ~/.ssh/known_hosts) once you
    confirm. Use it after checking the fingerprint on the machine itself
    (`ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub`)."""
    from ..inventory import load_inventory
    from ..transports.hostkeys import add_known_host, fetch_host_key, fingerprint

    entry = load_inventory(inventory).get(name)
    if entry.kind != "ssh":
        raise ConfigError(f"{name} is a {entry.kind} device; only ssh devices have host keys")
    key = fetch_host_key(entry.host, entry.port)
    path = entry.known_hosts or "~/.ssh/known_hosts"
    click.echo(f"{entry.host}:{entry.port} offers {key.get_name()} key {fingerprint(key)}")
    if not yes and not click.confirm(f"Trust it and add it to {path}?", default=False):
        click.echo("not trusted; nothing written")
        sys.exit(1)
    if add_known_host(path, entry.host, entry.port, key):
        click.echo(f"added to {path}")
    else:
        click.echo(f"already trusted in {path}")


from . import calibrate, data  # noqa: E402,F401  (register their commands)
from . import report  # noqa: E402,F401  (registers report, compare)
from . import engines  # noqa: E402,F401  (registers engines build, models make-moe)

if __name__ == "__main__":  # pragma: no cover
    main()
