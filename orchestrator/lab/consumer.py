"""One device's consumer process: `python -m orchestrator.lab.consumer --device NAME ...`,
started by `orch lab worker` (supervisor.py), one per device it serves.

A Celery worker with the solo pool on the device's queue only (concurrency 1, prefetch 1):
the device never runs two cells, and its cells run in the order they were sent. Before it
consumes, it holds the device's lock (a second consumer of the device is refused) and finishes
the cells a killed predecessor had taken (cell_task.DeviceConsumer.recover). It dies with its
supervisor (PR_SET_PDEATHSIG), so a SIGKILLed worker leaves no consumer behind; the device's
engine job goes on under the agent and is re-attached by the next consumer."""
from __future__ import annotations

import argparse
import ctypes
import logging
import os
import signal
import sys
import threading
import warnings
from collections.abc import Callable
from types import FrameType

from orchestrator.config.inventory import load_inventory
from orchestrator.db import lab as lab_db
from orchestrator.db.session_lock import DeviceTaken, device_lock
from orchestrator.db.store import Store, now
from orchestrator.lab.app import TASK, VISIBILITY_TIMEOUT_S, make_app, queue_name
from orchestrator.lab.cell_task import DeviceConsumer
from orchestrator.lab.health import HealthLimits
from orchestrator.lab.reconcile import EVERY_S as RECONCILE_EVERY_S
from orchestrator.lab.reconcile import Reconciler
from orchestrator.lab.store_retry import STORE_GRACE_S, StoreGone
from orchestrator.transports.base import LinkPolicy

log = logging.getLogger("orch.lab")
HEARTBEAT_S = 5.0
EXIT_TAKEN = 3
EXIT_HARD_STOP = 4
EXIT_STORE_GONE = 5


def _die_with_parent() -> None:
    """SIGKILL when the supervisor dies, however it dies (Linux; elsewhere the heartbeat
    thread notices the new parent within HEARTBEAT_S)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)   # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _hard_stop_on_second_signal(device: str) -> None:
    """Celery's own answer to a second Ctrl-C / SIGQUIT is a cold shutdown that cancels the
    running task, which the solo pool cannot do (NotImplementedError inside the cell: it was
    stored `failed`). The lab's hard stop is documented as "stop at once, the engine goes on":
    the process exits on the spot, the cell stays taken (`delivered`), its message unacknowledged,
    and the device's next consumer re-attaches its job (DeviceConsumer.recover). The first
    SIGINT / SIGTERM stays Celery's warm shutdown (the running cell ends first)."""
    warm = signal.getsignal(signal.SIGTERM)   # Celery's warm shutdown, installed by now
    seen = 0

    def hard(signum: int, _frame: FrameType | None) -> None:
        log.warning("%s: stopped at once (%s): the running cell's engine goes on and the next "
                    "consumer of %s re-attaches it", device, signal.Signals(signum).name, device)
        logging.shutdown()
        os._exit(EXIT_HARD_STOP)

    def stop(signum: int, frame: FrameType | None) -> None:
        nonlocal seen
        seen += 1
        if seen > 1:
            hard(signum, frame)
        if callable(warm):
            warm(signum, frame)

    signal.signal(signal.SIGQUIT, hard)
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)


def _stopping_when_the_store_is_gone(execute: Callable[[int], str],
                                     device: str) -> Callable[[int], str]:
    """The task: a store gone for the whole grace ends this process on the spot, so that its
    message is not acknowledged as done (Celery acks a task that raised) and its cell stays
    taken; the worker starts the consumer again, which finishes the cell (recover)."""
    def task(cell_id: int) -> str:
        try:
            return execute(cell_id)
        except StoreGone as exc:
            log.error("%s: %s; this consumer stops, cell %s stays taken for the next one",
                      device, exc, cell_id)
            logging.shutdown()
            os._exit(EXIT_STORE_GONE)
    return task


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="orch-lab-consumer")
    p.add_argument("--device", required=True)
    p.add_argument("--worker", required=True)
    p.add_argument("--db", required=True)
    p.add_argument("--broker", required=True)
    p.add_argument("--inventory")
    p.add_argument("--parent", type=int, default=None)
    p.add_argument("--visibility-timeout", type=float, default=VISIBILITY_TIMEOUT_S)
    p.add_argument("--quarantine-after", type=int, default=HealthLimits.after)
    p.add_argument("--min-battery", type=int, default=HealthLimits.min_battery_pct)
    p.add_argument("--max-start-temp", type=float, default=HealthLimits.max_start_temp_c)
    p.add_argument("--check-retry", type=float, default=HealthLimits.retry_s)
    p.add_argument("--link-grace", type=float, default=120.0)
    p.add_argument("--store-grace", type=float, default=STORE_GRACE_S)
    p.add_argument("--reconcile-every", type=float, default=RECONCILE_EVERY_S)
    p.add_argument("--loglevel", default="INFO")
    return p.parse_args(argv)


def _heartbeat(store: Store, device: str, stop: threading.Event, parent: int | None) -> None:
    while not stop.wait(HEARTBEAT_S):
        if parent is not None and os.getppid() != parent:
            log.error("%s: the worker process is gone; stopping", device)
            os._exit(1)
        try:
            lab_db.update_device(store, device, seen_at=now(), pid=os.getpid())
        except Exception as exc:  # noqa: BLE001 - a store hiccup must not kill the consumer
            log.warning("%s: heartbeat not stored: %s", device, exc)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    _die_with_parent()
    if args.parent is not None and os.getppid() != args.parent:
        return 1   # the supervisor died before the death signal was armed
    logging.basicConfig(level=args.loglevel.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(message)s")
    logging.getLogger("alembic").setLevel(logging.WARNING)   # the store's migration check
    # Celery's advice against root workers is printed by every consumer; `orch lab worker`
    # says it once (root is what a bare lab host often runs; adb and ssh do not need it)
    warnings.filterwarnings("ignore", message=".*superuser privileges.*")
    store = Store.open(args.db)
    inventory = load_inventory(args.inventory)
    limits = HealthLimits(after=args.quarantine_after, min_battery_pct=args.min_battery,
                          max_start_temp_c=args.max_start_temp, retry_s=args.check_retry)
    consumer = DeviceConsumer(store, inventory, args.device, args.worker, limits,
                              LinkPolicy(grace_s=args.link_grace), store_grace_s=args.store_grace)
    beat = threading.Thread(target=_heartbeat, args=(store, args.device, consumer.stop,
                                                     args.parent), daemon=True)
    try:
        with device_lock(store, consumer.device_id, args.device):
            lab_db.update_device(store, args.device, pid=os.getpid(), seen_at=now())
            beat.start()
            recovered = consumer.recover()
            if recovered:
                log.info("%s: %d taken cell(s) finished before consuming", args.device, recovered)
            # a broker that forgot its messages (a restart without persistence): sent again
            Reconciler(store, args.broker, args.device, lambda: not consumer.busy,
                       consumer.stop, args.reconcile_every).start()
            app = make_app(args.broker, args.visibility_timeout)
            app.task(name=TASK)(_stopping_when_the_store_is_gone(consumer.execute,
                                                                  args.device))
            from celery.signals import worker_ready, worker_shutting_down

            worker_shutting_down.connect(lambda **_: consumer.stop.set(), weak=False)
            armed: list[bool] = []

            def arm(**_: object) -> None:   # after Celery installed its handlers; once
                if not armed:
                    armed.append(True)
                    _hard_stop_on_second_signal(args.device)
            worker_ready.connect(arm, weak=False)
            log.info("%s: consuming %s", args.device, queue_name(args.device))
            app.worker_main(["worker", "--pool=solo", "--concurrency=1",
                             "--prefetch-multiplier=1", f"--queues={queue_name(args.device)}",
                             f"--hostname={args.device}@{args.worker}", "--without-gossip",
                             "--without-mingle", "--without-heartbeat",
                             f"--loglevel={args.loglevel.upper()}"])
    except DeviceTaken as exc:
        log.error("%s", exc)
        return EXIT_TAKEN
    except StoreGone as exc:
        log.error("%s: %s; this consumer stops (its worker starts it again)", args.device, exc)
        return EXIT_STORE_GONE
    finally:
        consumer.stop.set()
        consumer.close()
        try:
            lab_db.update_device(store, args.device, pid=None)
        except Exception:  # noqa: BLE001, S110 - shutting down: the row's pid is advisory
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
