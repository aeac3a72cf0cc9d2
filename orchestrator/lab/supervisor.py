"""`orch lab worker`: serve the devices of an inventory on this host.

Registers each device in the store (so `orch lab submit` needs no inventory), then keeps one
consumer process (consumer.py) per device it serves, reconciling every POLL_S with the
store: `orch lab devices remove` stops a device's consumer (after its running cell), `orch lab
devices add` starts one, a consumer that died is started again. SIGTERM / Ctrl-C stop the
consumers after their running cells (a second one stops them at once: their engine jobs go on
under the agent and the next worker re-attaches them)."""
from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from orchestrator.config.inventory import Inventory, load_inventory
from orchestrator.db import lab as lab_db
from orchestrator.db.store import Store
from orchestrator.lab.app import LabError
from orchestrator.lab.store_retry import STORE_GRACE_S, first_line, gone, lost_store
from orchestrator.lab.watch import Watcher

log = logging.getLogger("orch.lab")
POLL_S = 1.0
RESTART_BACKOFF_S = (1.0, 2.0, 5.0, 10.0, 30.0)


@dataclass
class WorkerOptions:
    name: str
    db: str
    broker: str
    inventory: str | None
    devices: list[str] = field(default_factory=list)     # empty: every device of the file
    consumer_args: list[str] = field(default_factory=list)
    log_dir: Path | None = None
    store_grace_s: float = STORE_GRACE_S     # a lost store waited out this long, then exit 1


def inventory_devices(inv: Inventory) -> list[str]:
    """The devices the inventory file lists (the built-in `local` only when the file names it:
    two workers on one host must not both serve it)."""
    if inv.source is None:
        return []
    data = yaml.safe_load(Path(inv.source).read_text()) or {}
    return [name for name in (data.get("devices") or {}) if name in inv.entries]


@dataclass
class _Child:
    proc: subprocess.Popen
    started: float
    restarts: int = 0
    stopping: bool = False


class Supervisor:
    def __init__(self, store: Store, options: WorkerOptions) -> None:
        self.store, self.options = store, options
        self.inventory = load_inventory(options.inventory)
        self.children: dict[str, _Child] = {}
        self.restarts: dict[str, int] = {}
        self.next_start: dict[str, float] = {}
        self.signals = 0
        self.store_lost: float | None = None   # when the store stopped answering the loop
        # the inventory's `lab:` webhook: regressions and silent devices (lab/watch.py)
        self.watcher = Watcher(store, self.inventory.lab)

    def register(self) -> list[str]:
        names = self.options.devices or inventory_devices(self.inventory)
        if not names:
            raise LabError("this worker serves no device: list devices in the inventory file "
                           "(--inventory) or name them with --device")
        host = socket.gethostname()
        served = []
        for name in names:
            entry = self.inventory.get(name)   # ConfigError for a name not in the inventory
            row = lab_db.lab_device(self.store, name)
            if row is not None and row.worker != self.options.name and lab_db.consumer_alive(row):
                log.warning("%s: served by worker %s right now; not taken (stop that worker, "
                            "or move it: `orch lab devices add %s --worker %s`)", name,
                            row.worker, name, self.options.name)
                continue
            served.append(name)
            kept = lab_db.register_device(self.store, name, entry.kind, self.options.name, host)
            if kept != lab_db.ACTIVE:
                log.warning("%s: stays %s (%s)", name, kept,
                            "`orch lab release` it" if kept == lab_db.QUARANTINED else
                            "`orch lab devices add` it")
        if not served:
            raise LabError(f"every device of this worker is served by another live worker "
                           f"({', '.join(names)}); nothing to serve")
        return served

    # -- the loop ------------------------------------------------------------------------------
    def serve(self, max_loops: int | None = None) -> int:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):   # a hang-up: like SIGTERM
            if signal.getsignal(sig) is not signal.SIG_IGN:
                signal.signal(sig, self._on_signal)
        loops = 0
        while self.signals == 0 and (max_loops is None or loops < max_loops):
            try:
                self._reconcile()
            except Exception as exc:
                if not lost_store(exc):
                    raise
                self._store_outage(exc)   # the consumers go on; the store is waited out
            else:
                if self.store_lost is not None:
                    log.info("the store answers again (after %.0f s)",
                             time.monotonic() - self.store_lost)
                    self.store_lost = None
            self.watcher.tick()
            loops += 1
            time.sleep(POLL_S)
        return self._shutdown()

    def _store_outage(self, exc: BaseException) -> None:
        """One line when the store stops answering; past the grace, stop (consumers after
        their cells) and say so in one line: StoreGone, exit 1."""
        if self.store_lost is None:
            self.store_lost = time.monotonic()
            log.warning("the store is unreachable (%s); the consumers go on, and this worker "
                        "waits up to %g s for it", first_line(exc), self.options.store_grace_s)
        elif time.monotonic() - self.store_lost > self.options.store_grace_s:
            self._shutdown()
            raise gone(self.store, self.options.store_grace_s, exc)

    def _on_signal(self, signum: int, _frame: object) -> None:
        self.signals += 1
        if self.signals == 1:
            log.info("stopping: consumers finish their running cells (again to stop at once)")
            for child in self.children.values():
                _signal(child.proc, signal.SIGTERM)
        else:
            log.info("stopping now: running cells go on on their devices and are re-attached "
                     "by the next worker")
            for child in self.children.values():
                _signal(child.proc, signal.SIGQUIT)

    def _wanted(self) -> set[str]:
        rows = lab_db.lab_devices(self.store, worker=self.options.name)
        return {row.name for row in rows if row.state != lab_db.REMOVED}

    def _reconcile(self) -> None:
        wanted = self._wanted()
        for name, child in list(self.children.items()):
            code = child.proc.poll()
            if code is not None:
                del self.children[name]
                if not child.stopping:
                    delay = RESTART_BACKOFF_S[min(self.restarts.get(name, 0),
                                                  len(RESTART_BACKOFF_S) - 1)]
                    self.restarts[name] = self.restarts.get(name, 0) + 1
                    self.next_start[name] = time.monotonic() + delay
                    log.error("%s: consumer exited with %s; starting it again in %g s", name,
                              code, delay)
            elif name not in wanted and not child.stopping:
                log.info("%s: removed from this worker; stopping its consumer after its cell",
                         name)
                child.stopping = True
                _signal(child.proc, signal.SIGTERM)
        for name in sorted(wanted - set(self.children)):
            if time.monotonic() < self.next_start.get(name, 0.0):
                continue
            if name not in self.inventory.entries:
                self.inventory = load_inventory(self.options.inventory)  # added to the file?
                if name not in self.inventory.entries:
                    lab_db.update_device(self.store, name, reason=f"not in worker "
                                         f"{self.options.name}'s inventory")
                    self.next_start[name] = time.monotonic() + 30.0
                    continue
            # `devices add` may have named this worker for a device it never registered
            lab_db.update_device(self.store, name, kind=self.inventory.get(name).kind,
                                 host=socket.gethostname())
            self.children[name] = _Child(self._start(name), time.monotonic())

    def _start(self, device: str) -> subprocess.Popen:
        o = self.options
        argv = [sys.executable, "-m", "orchestrator.lab.consumer", "--device", device,
                "--worker", o.name, "--db", o.db, "--broker", o.broker,
                "--parent", str(os.getpid()), *o.consumer_args]
        if o.inventory:
            argv += ["--inventory", o.inventory]
        out = None
        if o.log_dir is not None:
            o.log_dir.mkdir(parents=True, exist_ok=True)
            out = open(o.log_dir / f"{device}.log", "ab")  # noqa: SIM115 - the child's log
        log.info("%s: starting its consumer", device)
        try:
            return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT if out else None,
                                    stdin=subprocess.DEVNULL)
        finally:
            if out is not None:
                out.close()

    def _shutdown(self) -> int:
        deadline = None
        while self.children:
            for name, child in list(self.children.items()):
                if child.proc.poll() is not None:
                    del self.children[name]
            if self.children and self.signals == 0:   # max_loops ended: stop them too
                self.signals = 1
                for child in self.children.values():
                    _signal(child.proc, signal.SIGTERM)
            if self.children:
                time.sleep(0.2)
                if deadline is None and self.signals > 1:
                    deadline = time.monotonic() + 30
                if deadline is not None and time.monotonic() > deadline:
                    for child in self.children.values():
                        _signal(child.proc, signal.SIGKILL)
        return 0


def _signal(proc: subprocess.Popen, sig: int) -> None:
    try:
        proc.send_signal(sig)
    except ProcessLookupError:
        pass
