"""`orch lab ...`: many devices on several hosts through a Celery broker and one shared store
(docs/lab.md). Thin: each command calls orchestrator/lab."""
from __future__ import annotations

import os
import shlex
import socket
import sys
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from orchestrator.cli.handler import friendly
from orchestrator.cli.options import console, db_option, errors, inventory_option
from orchestrator.errors import Failed, NotFound

if TYPE_CHECKING:
    from orchestrator.db.store import Store

F = TypeVar("F", bound=Callable[..., Any])


def broker_option(func: F) -> F:
    return click.option("--broker", envvar="ORCH_BROKER", metavar="URL",
                        help="The Celery broker (env ORCH_BROKER), e.g. "
                             "redis://lab:6379/0 or amqp://user:pass@lab//.")(func)


def _store(db: str | None, create: bool = True) -> Store:
    from orchestrator.db.store import Store

    return Store.open(db, create=create)


@click.group()
def lab() -> None:
    """A lab of many devices: workers on the hosts the devices are plugged into, one queue per
    device on a Celery broker, results in one shared store (PostgreSQL).

    \b
      orch lab worker --inventory devices.yaml      # on each host: serve its devices
      orch lab submit matrices/phone.yaml -d oneplus -d pixel
      orch lab status                               # devices, queues, running cells, health
      orch lab wait                                 # until the newest submission has ended
      orch lab release oneplus                      # a quarantined device runs again
      orch lab cancel 12; orch lab resubmit 12      # withdraw a submission; submit it again

    Every command takes --broker (ORCH_BROKER) and --db (ORCH_DB); the lab's state (devices,
    quarantine, cells) is in the store, so `devices`, `release` and `wait` work from it alone.
    Needs the lab extra (`pip install -e '.[lab]'`). `orch run` needs none of this."""


@lab.command()
@broker_option
@db_option
@inventory_option
@click.option("--name", default=lambda: socket.gethostname(), show_default="the host name",
              help="This worker's name: `orch lab devices add --worker` and status use it.")
@click.option("--device", "-d", "devices", multiple=True,
              help="Serve only these inventory devices (default: every device the inventory "
                   "file lists).")
@click.option("--quarantine-after", type=click.IntRange(1, 1000), default=3, show_default=True,
              help="Failed infrastructure checks in a row that quarantine a device.")
@click.option("--min-battery", type=click.IntRange(0, 100), default=20, show_default=True,
              metavar="PCT", help="A device below this charge (and not charging) fails its check.")
@click.option("--max-start-temp", type=float, default=70.0, show_default=True, metavar="C",
              help="A device whose CPU is hotter than this before a cell fails its check.")
@click.option("--check-retry", type=click.FloatRange(0, 3600), default=10.0, show_default=True,
              metavar="SECONDS", help="Wait between failed checks before quarantine.")
@click.option("--link-grace", type=click.FloatRange(0, 86400), default=120.0, show_default=True,
              metavar="SECONDS", help="How long a running cell waits for a device that dropped off.")
@click.option("--store-grace", type=click.FloatRange(0, 86400), default=300.0, show_default=True,
              metavar="SECONDS", help="How long the worker and its consumers wait out a store "
                                      "that stopped answering (a restart) before they stop.")
@click.option("--reconcile-every", type=click.FloatRange(1, 86400), default=30.0,
              show_default=True, metavar="SECONDS",
              help="How often an idle consumer checks that the broker still holds its "
                   "device's queued cells, and sends again those it lost (docs/lab.md).")
@click.option("--visibility-timeout", type=click.FloatRange(60, 30 * 86400), default=None,
              metavar="SECONDS", help="Redis: redeliver a task unacknowledged this long "
                                      "(default 8 days: above the longest cell; docs/lab.md).")
@click.option("--log-dir", type=click.Path(file_okay=False),
              help="Each device consumer's log in DIR/DEVICE.log (default: this terminal).")
@friendly
def worker(broker: str | None, db: str | None, inventory: str | None, name: str,
           devices: tuple[str, ...], quarantine_after: int, min_battery: int,
           max_start_temp: float, check_retry: float, link_grace: float, store_grace: float,
           reconcile_every: float, visibility_timeout: float | None, log_dir: str | None) -> None:
    """Serve this host's devices: register them in the store and run one consumer process per
    device (Celery, solo pool, its queue `dev.DEVICE` only), so each device runs one cell at a
    time in its order while devices run in parallel. Runs until Ctrl-C / SIGTERM, which let
    running cells finish (press again to stop at once: their engines go on on the devices and
    the next worker re-attaches them)."""
    import logging
    from pathlib import Path

    from kombu.utils.url import maybe_sanitize_url

    from orchestrator.db.store import resolve_url
    from orchestrator.lab.app import broker_url, check_broker, make_app
    from orchestrator.lab.supervisor import Supervisor, WorkerOptions

    url = broker_url(broker)
    check_broker(make_app(url))
    store = _store(db)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    extra = ["--quarantine-after", str(quarantine_after), "--min-battery", str(min_battery),
             "--max-start-temp", str(max_start_temp), "--check-retry", str(check_retry),
             "--link-grace", str(link_grace), "--store-grace", str(store_grace),
             "--reconcile-every", str(reconcile_every)]
    if visibility_timeout is not None:
        extra += ["--visibility-timeout", str(visibility_timeout)]
    options = WorkerOptions(name=name, db=resolve_url(db), broker=url,
                            inventory=os.path.abspath(inventory) if inventory else None,
                            devices=list(devices), consumer_args=extra,
                            log_dir=Path(log_dir) if log_dir else None,
                            store_grace_s=store_grace)
    supervisor = Supervisor(store, options)
    names = supervisor.register()
    if os.geteuid() == 0:
        errors.print("note: running as root; Celery advises a plain user for workers (the "
                     "user needs the devices: adb's udev rules, ssh keys)")
    errors.print(f"lab worker {name}: serving {', '.join(names)} "
                 f"(broker {maybe_sanitize_url(url)}, store {store.url})")
    code = supervisor.serve()
    if code:
        raise Failed(f"lab worker {name}: stopped with exit code {code}")


@lab.command()
@click.argument("matrix_file", type=click.Path(dir_okay=False))
@click.option("--device", "-d", "devices", multiple=True, required=True,
              help="A lab device (as `orch lab status` lists them); repeat for several.")
@click.option("--yes", "-y", is_flag=True, help="Submit a plan of over 1,000 cells per device.")
@broker_option
@db_option
@friendly
def submit(matrix_file: str, devices: tuple[str, ...], yes: bool, broker: str | None,
           db: str | None) -> None:
    """Queue MATRIX_FILE's cells on lab devices: one session per device, one task per
    (device, cell) on the device's queue, in the matrix's order. Prints the sessions and
    returns at once; `orch lab wait` follows them. Quality probes and adaptive repeats are
    refused (use `orch run`)."""
    from orchestrator.cli.preflight import confirm_size
    from orchestrator.config.matrix import load_matrix
    from orchestrator.lab.app import broker_url, make_app
    from orchestrator.lab.submit import refuse_unsupported
    from orchestrator.lab.submit import submit as submit_batch
    from orchestrator.run.preflight import check_engine

    loaded = load_matrix(matrix_file)
    check_engine(loaded)
    refuse_unsupported(loaded)
    names = list(dict.fromkeys(devices))
    confirm_size(loaded, len(names), yes)
    app = make_app(broker_url(broker))
    store = _store(db)
    from rich.progress import Progress

    with Progress(console=errors, transient=True, disable=not errors.is_terminal) as bar:
        task = bar.add_task("sending tasks", total=None)
        result = submit_batch(store, app, loaded, names,
                              command="orch lab " + shlex.join(sys.argv[2:]),
                              progress=lambda done, total: bar.update(task, completed=done,
                                                                      total=total))
    for device, session in result.sessions.items():
        click.echo(f"{device}: session {session}")
    click.echo(f"submitted {result.cells} cells ({result.cells // max(1, len(names))} per "
               f"device) as batch {result.batch_id} in {result.enqueue_s:.2f} s; "
               f"follow with `orch lab wait`")


@lab.command()
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table",
              show_default=True)
@broker_option
@db_option
@friendly
def status(fmt: str, broker: str | None, db: str | None) -> None:
    """Lab devices: their worker and host, state (active / quarantined with the reason /
    removed), cells waiting (store) and messages in their queue (broker, when --broker or
    ORCH_BROKER is given), the running cell, and the consumer's heartbeat."""
    import json

    from orchestrator.db import lab as lab_db
    from orchestrator.lab.app import make_app, queue_depths
    from orchestrator.lab.status import status_rows, status_table
    from orchestrator.results.lab_failures import newest_batch_failures

    store = _store(db, create=False)
    depths = None
    if broker:
        depths = queue_depths(make_app(broker), [r.name for r in lab_db.lab_devices(store)])
    rows = status_rows(store, depths)
    if fmt == "json":
        click.echo(json.dumps(rows, indent=1))
    elif not rows:
        click.echo("no lab devices yet: start `orch lab worker --inventory FILE` on a host")
    else:
        console.print(status_table(rows))
        _print_failures(newest_batch_failures(store), "the newest submission: ")


def _print_failures(groups: list[Any], lead: str = "") -> None:
    """One line per cause of failed lab cells (report/format/lab_failures.py)."""
    from orchestrator.escape import visible
    from orchestrator.report.format.lab_failures import failure_lines

    for line in failure_lines(groups):   # a cause holds an engine's or a device's text
        console.print(visible(f"{lead}{line}"), markup=False, highlight=False, soft_wrap=True)


@lab.command()
@click.argument("session", type=int, required=False)
@click.option("--timeout", type=click.FloatRange(0), default=None, metavar="SECONDS",
              help="Give up after this long (exit 1).")
@broker_option
@db_option
@friendly
def wait(session: int | None, timeout: float | None, broker: str | None, db: str | None) -> None:
    """Follow SESSION (default: every session of the newest submission) until its cells have
    ended, then print its table. Exit 0 when every cell ended ok, 1 otherwise."""
    from orchestrator.lab.status import sessions_to_wait
    from orchestrator.lab.status import wait as wait_for
    from orchestrator.report.terminal.runs import print_session_table
    from orchestrator.results.lab_failures import lab_failures
    from orchestrator.results.listings import session_listing

    store = _store(db, create=False)
    sessions = sessions_to_wait(store, session)

    import time

    last_at, last_line = 0.0, ""

    def shown(states: Counter[str], total: int) -> None:
        # one line per change on a terminal; at most one per 30 s in a log, and the last
        nonlocal last_at, last_line
        done = total - states["queued"] - states["delivered"]
        parts = ", ".join(f"{k} {v}" for k, v in sorted(states.items()))
        last_line = f"sessions {', '.join(map(str, sessions))}: {done}/{total} ended ({parts})"
        if errors.is_terminal or done == total or time.monotonic() - last_at >= 30:
            errors.print(last_line)
            last_at = time.monotonic()

    every = None
    if broker:   # queued cells a restarted broker forgot are sent again (lab/reconcile.py)
        from orchestrator.lab.app import make_app
        from orchestrator.lab.reconcile import resend_lost

        app = make_app(broker)

        def every(devices: set[str]) -> None:
            for device in sorted(devices):
                resend_lost(store, app, device)
    result = wait_for(store, sessions, shown, timeout_s=timeout, every=every)
    if not result.ok and timeout is not None and any(result.states[s] for s in ("queued", "delivered")):
        errors.print(f"{last_line}; gave up after --timeout {timeout:g} s")
    for sid in sessions:
        listing = session_listing(store, sid)
        if listing.rows:   # a session whose cells all failed before running: its causes below
            print_session_table(console, listing)
    _print_failures(lab_failures(store, sessions))   # cells with no run are in no table above
    if not result.ok:   # the tables above say which cells did not end ok
        raise Failed()


@lab.command()
@click.argument("batch", type=int)
@broker_option
@db_option
@friendly
def cancel(batch: int, broker: str | None, db: str | None) -> None:
    """Cancel submission BATCH (the number `orch lab submit` printed): its waiting cells are
    marked cancelled in the store and revoked in Celery (with --broker / ORCH_BROKER), so
    none of them runs; a cell already running finishes and is stored, as when a worker is
    stopped with Ctrl-C. `orch lab resubmit BATCH` submits it again."""
    from orchestrator.lab.app import make_app
    from orchestrator.lab.cancel import cancel as cancel_batch

    result = cancel_batch(_store(db, create=False), batch, make_app(broker) if broker else None)
    running = (f"; {result.running} running cell{'s' * (result.running != 1)} will finish"
               if result.running else "")
    revoked = "" if result.revoked else \
        f" (not revoked in Celery: {result.broker_error or 'no broker given'}; consumers skip " \
        f"them by the store)"
    click.echo(f"batch {batch}: {result.cancelled} waiting cell"
               f"{'s' * (result.cancelled != 1)} cancelled{revoked}{running}")


@lab.command()
@click.argument("batch", type=int)
@broker_option
@db_option
@friendly
def resubmit(batch: int, broker: str | None, db: str | None) -> None:
    """Submit BATCH's matrix again (as it was stored at submission) on the same devices: a
    new batch with new sessions; follow it with `orch lab wait`."""
    from orchestrator.lab.app import broker_url, make_app
    from orchestrator.lab.cancel import resubmit as resubmit_batch

    app = make_app(broker_url(broker))
    result = resubmit_batch(_store(db, create=False), app, batch,
                            command="orch lab " + shlex.join(sys.argv[2:]))
    for device, session in result.sessions.items():
        click.echo(f"{device}: session {session}")
    click.echo(f"resubmitted batch {batch} as batch {result.batch_id}: {result.cells} cells; "
               f"follow with `orch lab wait`")


@lab.group()
def devices() -> None:
    """Add a device to a worker or remove it, while the workers run."""


@devices.command("add")
@click.argument("name")
@click.option("--worker", help="The worker that serves it (default: the one that did last); "
                               "the device must be in that worker's inventory.")
@broker_option
@db_option
@friendly
def devices_add(name: str, worker: str | None, broker: str | None, db: str | None) -> None:
    """Serve NAME again (or on another worker): its worker starts a consumer within a second."""
    from orchestrator.db import lab as lab_db
    from orchestrator.lab.app import LabError

    store = _store(db)
    row = lab_db.lab_device(store, name)
    if row is None:
        if worker is None:
            raise LabError(f"device {name!r} is not in the lab yet: give --worker W (a worker "
                           f"whose inventory lists it)")
        lab_db.register_device(store, name, "unknown", worker, "")
    values = {"state": lab_db.ACTIVE if row is None or row.state != lab_db.QUARANTINED
              else lab_db.QUARANTINED}
    if worker:
        values["worker"] = worker
    lab_db.update_device(store, name, **values)
    click.echo(f"{name}: served by worker {worker if worker or row is None else row.worker}")


@devices.command("remove")
@click.argument("name")
@broker_option
@db_option
@friendly
def devices_remove(name: str, broker: str | None, db: str | None) -> None:
    """Stop serving NAME: its consumer stops after its running cell; its waiting cells stay
    queued until it is added again."""
    from orchestrator.db import lab as lab_db

    store = _store(db, create=False)
    if lab_db.lab_device(store, name) is None:
        raise NotFound(f"device {name!r} is not in the lab")
    lab_db.update_device(store, name, state=lab_db.REMOVED)
    click.echo(f"{name}: removed (its waiting cells stay queued)")


@lab.command()
@click.argument("names", nargs=-1, required=True)
@broker_option
@db_option
@friendly
def release(names: tuple[str, ...], broker: str | None, db: str | None) -> None:
    """Release quarantined devices: their held cell is checked again and, if the device
    passes, its cells run."""
    from orchestrator.db import lab as lab_db

    store = _store(db, create=False)
    for name in names:
        row = lab_db.lab_device(store, name)
        if row is None:
            raise NotFound(f"device {name!r} is not in the lab")
        if row.state != lab_db.QUARANTINED:
            click.echo(f"{name}: not quarantined ({row.state})")
            continue
        lab_db.update_device(store, name, state=lab_db.ACTIVE, failures=0)
        click.echo(f"{name}: released (was: {row.reason})")
