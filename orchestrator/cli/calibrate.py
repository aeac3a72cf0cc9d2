"""`orch calibrate`: measure a device's idle temperature baseline for thermal cooldowns, and
its idle power (what `net_j_per_token` is net of; docs/energy.md)."""
from __future__ import annotations

import click

from orchestrator.cli.handler import friendly
from orchestrator.cli.options import console, db_option, inventory_option


@click.command()
@click.option("--device", "-d", "name", default="local", show_default=True)
@click.option("--seconds", type=float, default=60.0, show_default=True,
              help="Length of the quiet period sampled (leave the device idle meanwhile).")
@click.option("--interval", type=float, default=1.0, show_default=True, help="Seconds per reading.")
@inventory_option
@db_option
@friendly
def calibrate(name: str, seconds: float, interval: float, inventory: str | None,
              db: str | None) -> None:
    """Measure the device's idle baseline per sensor (CPU zones, battery) and store it, for
    matrices with `cooldown: {until: baseline+2C, ...}`. The baseline is the median of the
    last third of the readings; a sensor still falling is reported as not settled. Where the
    device has a power source (docs/energy.md), its idle power over the period is stored
    beside them: `net J/token` in the tables is the energy above it."""
    from orchestrator.config.inventory import load_inventory, open_transport
    from orchestrator.db.store import Store
    from orchestrator.run.agent_client import AgentClient
    from orchestrator.run.cooldown import calibrate as measure

    inv = load_inventory(inventory)
    entry = inv.get(name)
    store = Store.open(db)
    with open_transport(inv, name) as transport:
        client = AgentClient(transport)
        facts = client.facts()
        store.upsert_device(name, entry.kind, facts)
        click.echo(f"{name}: sampling for {seconds:g} s; keep the device idle", err=True)
        baseline, notes = measure(client, seconds, interval, facts=facts)
    device_id = store.upsert_device(name, entry.kind)
    store.update_device(device_id, idle_baseline=baseline or None)
    # what the store kept is the baseline: a reading it cannot hold (a zone reading 2^70) was
    # dropped there, and the user is told so instead of seeing it as a temperature
    stored = store.device_by_name(name).idle_baseline or {}   # type: ignore[union-attr]
    for sensor in baseline:
        value = stored.get(sensor)
        if value is None:
            console.print(f"{name} {sensor}: not stored (the reading is beyond what the "
                          f"store holds)")
        elif sensor == "power_w":    # beside the temperatures: what net energy is net of
            console.print(f"{name} idle power: {value:.2f} W")
        else:
            console.print(f"{name} idle baseline {sensor}: {value / 1000:.1f} °C")
    for note in notes:
        click.echo(f"note: {note}", err=True)
