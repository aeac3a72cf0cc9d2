"""The regression loop's commands (docs/regressions.md): `orch note`, `orch notes`,
`orch ack` and `orch feed`."""
from __future__ import annotations

import getpass
import json
import socket
import sys
from pathlib import Path

import click

from orchestrator.cli.handler import friendly
from orchestrator.cli.options import console, db_option


def author() -> str:
    """Who annotates: user@host of the command."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):          # no user name (a container's bare uid)
        user = "?"
    return f"{user}@{socket.gethostname()}"


@click.command()
@click.argument("on", type=click.Choice(["session", "run"]))
@click.argument("target", type=int)
@click.argument("text")
@db_option
@friendly
def note(on: str, target: int, text: str, db: str | None) -> None:
    """Note TEXT on a session or a run: `orch note session 3 "firmware 16.0.2"`, `orch note
    run 17 "charger unplugged"`. Notes are shown on the session's (or run's) points in `orch
    history` and the site's history pages, and in the report's provenance."""
    from orchestrator.db.store import Store
    from orchestrator.results.annotations import add_note

    made = add_note(Store.open(db, create=False), on, target, text, author())
    console.print(f"note {made.id} on {on} {target}", highlight=False)


@click.command()
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table",
              show_default=True)
@db_option
@friendly
def notes(fmt: str, db: str | None) -> None:
    """List the notes on sessions and runs and the acknowledged regressions, oldest first."""
    from rich.table import Table
    from rich.text import Text

    from orchestrator.db.store import Store
    from orchestrator.report.format.formatters import when
    from orchestrator.results.annotations import all_notes

    found = all_notes(Store.open(db, create=False))
    if fmt == "json":
        sys.stdout.write(json.dumps([n.record() for n in found], indent=1) + "\n")
        return
    if not found:
        console.print("no notes (orch note session|run ID TEXT, orch ack ID REASON)")
        return
    table = Table()
    for name in ("note", "on", "when (UTC)", "by", "text"):
        table.add_column(name)
    for n in found:
        on = "acknowledged" if n.target_kind == "change_point" else n.target_kind
        table.add_row(Text(str(n.id)), Text(f"{on} {n.target}"), Text(when(n.created_at)),
                      Text(n.author or "-"), Text(n.text))
    console.print(table)


@click.command()
@click.argument("changepoint")
@click.argument("reason", default="")
@db_option
@friendly
def ack(changepoint: str, reason: str, db: str | None) -> None:
    """Acknowledge the regression CHANGEPOINT (its id as `orch history`, `orch feed` and the
    report's regressions section print it, or a unique prefix) with a REASON: it is marked
    acknowledged there and is no longer a new regression in the feed and the lab's webhook."""
    from orchestrator.db.store import Store
    from orchestrator.results.annotations import acknowledge
    from orchestrator.results.regression_feed import regression_entries

    store = Store.open(db, create=False)
    known = [e.id for e in regression_entries(store)]
    made = acknowledge(store, changepoint, reason, author(), known)
    console.print(f"acknowledged {made.target}: {made.text}", highlight=False)


@click.command()
@click.option("--out", "-o", type=click.Path(dir_okay=False), metavar="FILE",
              help="Write the feed here (default: print it).")
@click.option("--base-url", metavar="URL",
              help="The site's address: the feed's links are absolute under it (default: "
                   "relative to the feed's own place, as in `orch site`'s folder).")
@db_option
@friendly
def feed(out: str | None, base_url: str | None, db: str | None) -> None:
    """The regressions feed (Atom): every step down in the store's histories, newest first,
    with its id, Δ, p, builds and the `orch compare` that shows it; an acknowledged one is
    marked so (`orch ack`). `orch site` writes the same feed as DIR/regressions.xml."""
    from orchestrator.db.store import Store
    from orchestrator.report.document.feed import regressions_feed

    text = regressions_feed(Store.open(db, create=False), base_url)
    if out is None:
        sys.stdout.write(text + "\n")
        return
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(text, encoding="utf-8")
    console.print(f"wrote {out}", highlight=False)
