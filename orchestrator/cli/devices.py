"""`orch devices` and `orch devices trust`: the inventory, device facts, SSH host keys."""
from __future__ import annotations

from typing import TYPE_CHECKING

import click

from orchestrator.cli.handler import friendly
from orchestrator.cli.options import console, db_option, inventory_option
from orchestrator.errors import ConfigError, Failed

if TYPE_CHECKING:
    from rich.console import Console

    from orchestrator.config.inventory import Inventory


@click.group(invoke_without_command=True)
@click.option("--probe", is_flag=True, help="Connect to each device and print its facts and "
              "its newest stored ceilings.")
@click.option("--device", "-d", "names", multiple=True, help="Only these devices.")
@inventory_option
@db_option
@click.pass_context
@friendly
def devices(ctx: click.Context, probe: bool, names: tuple[str, ...], inventory: str | None,
            db: str | None) -> None:
    """List the inventory's devices; with --probe, collect and print their facts and the
    newest hardware ceilings stored for each (`orch ceilings`)."""
    if ctx.invoked_subcommand is not None:
        return
    from orchestrator.config.inventory import load_inventory
    inv = load_inventory(inventory)
    failed = print_devices(console, inv, list(names) or inv.names(), probe, db)
    if probe:
        from orchestrator.db.store import Store
        from orchestrator.report.terminal.ceilings import print_ceilings

        from orchestrator.results.ceilings import latest

        shown = [n for n in list(names) or inv.names() if n not in failed]
        if shown:
            print_ceilings(console, latest(Store.open(db), shown), shown)
    if failed:   # each said in its one line on stderr
        raise Failed()


def print_devices(console: Console, inventory: Inventory, names: list[str], probe: bool,
                  db: str | None) -> list[str]:
    """The inventory's devices as a table; with `probe`, each device's facts, collected by
    the agent and stored (the device row keeps the newest). Returns the devices whose probe
    failed, each named once in one line on stderr (`orch devices --probe` then exits 1)."""
    from rich.table import Table

    from orchestrator.config.inventory import open_transport
    from orchestrator.plugins import device_kind
    from orchestrator.run.agent_client import AgentClient
    from orchestrator.transports.base import TransportError

    table = Table()
    for name in ("device", "kind", "address", "workdir", "description"):
        table.add_column(name)
    for name in names:
        entry = inventory.get(name)
        table.add_row(name, entry.kind, device_kind(entry.kind).address(entry),
                      inventory.workdir(name), entry.description or "")
    console.print(table)
    if not probe:
        return []
    from orchestrator.db.store import Store

    from orchestrator.escape import visible

    store = Store.open(db)
    failed = []
    for name in names:
        try:
            with open_transport(inventory, name) as transport:
                facts = AgentClient(transport).facts()
        except TransportError as exc:
            text = str(exc)   # a transport's message may name the device already
            click.echo(visible(text if text.startswith(f"{name}: ") else f"{name}: {text}",
                               keep=""), err=True)
            failed.append(name)
            continue
        store.upsert_device(name, inventory.get(name).kind, facts)
        facts_table = Table(title=f"{name} facts", title_justify="left", show_header=False)
        facts_table.add_column("fact")
        facts_table.add_column("value")
        for key, value in facts.items():
            facts_table.add_row(key, value)
        console.print(facts_table)
    return failed


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
    from orchestrator.config.inventory import load_inventory
    from orchestrator.plugins import device_kind
    from orchestrator.transports.hostkeys import (
        add_known_host,
        fetch_host_key,
        fingerprint,
    )

    entry = load_inventory(inventory).get(name)
    target = device_kind(entry.kind).host_key_address(entry)
    if target is None:  # the kind says it has no host keys
        raise ConfigError(f"{name} is a {entry.kind} device; {entry.kind} devices have no "
                          f"host keys to trust")
    host, port, path = target
    key = fetch_host_key(host, port)
    click.echo(f"{host}:{port} offers {key.get_name()} key {fingerprint(key)}")
    if not yes and not click.confirm(f"Trust it and add it to {path}?", default=False):
        raise Failed("not trusted; nothing written")
    if add_known_host(path, host, port, key):
        click.echo(f"added to {path}")
    else:
        click.echo(f"already trusted in {path}")
