"""One `orch run`: a session on one device, its cells in order, with cooldowns and --resume.

The device is prepared (run/prepare.py) before the session row exists: a device busy with
another orch job is refused first, and the new session stores the device's facts. The
session's part on the device is then one DeviceSession (run/device_session.py), which the
cell loop here and the lab's tasks (lab/cell_task.py, through `run_or_collect`) share."""
from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

from orchestrator.config.inventory import Inventory, open_transport
from orchestrator.config.matrix import LoadedMatrix
from orchestrator.config.plan import Cell, plan_cells
from orchestrator.db.runs import Runs, Sessions
from orchestrator.db.faults import start_error
from orchestrator.db.session_lock import session_lock
from orchestrator.db.store import Store, now
from orchestrator.errors import ConfigError, OrchError
from orchestrator.plugins import PluginError, get_adapter
from orchestrator.run.controller import SessionProvenance
from orchestrator.run.cell_wait import settle
from orchestrator.run.device_jobs import check_device_free, settle_orphaned_runs
from orchestrator.run.device_session import DevicePolicy, DeviceSession, begin_session
from orchestrator.run.prepare import PreparedDevice, prepare_device
from orchestrator.run.progress import Board, Progress
from orchestrator.run.quality import run_quality
from orchestrator.run.runner import CellOutcome
from orchestrator.run.session_turns import session_changed
from orchestrator.run.store_stop import STORE_ERRORS
from orchestrator.stats.status import RESUMABLE, Status
from orchestrator.transports.base import (
    AccessDenied,
    LinkPolicy,
    Transport,
    TransportError,
)


@dataclass
class SessionResult:
    session_id: int
    outcomes: list[CellOutcome] = field(default_factory=list)
    skipped: int = 0
    repeat_stop: str | None = None   # adaptive repeats: why no further round ran


@dataclass(frozen=True)
class RunOptions:
    """How `orch run` runs a matrix on a device (its options; the defaults are a plain run)."""

    resume: bool = False         # --resume: the matrix's latest session on the device
    force: bool = False          # --force: start cells beside another orch job on the device
    link: LinkPolicy = field(default_factory=LinkPolicy)   # --link-grace
    command: str | None = None   # the command line stored with the session (default: argv)
    sleep: Callable[[float], None] = time.sleep              # cooldowns wait with it
    stop: threading.Event | None = None   # set: every device stops (run_devices' Ctrl-C)
    resume_hint: str | None = None        # `orch run … --resume` with every option given


def run_matrix(store: Store, inventory: Inventory, loaded: LoadedMatrix, device: str,
               progress: Progress, options: RunOptions = RunOptions()) -> SessionResult:
    """One session of the matrix on one device. The session is locked while it runs (a second
    --resume of it is refused: SessionBusy), a device with a live orch job of another session
    is refused (DeviceBusy, unless `options.force`), and Ctrl-C / SIGTERM end the session (its
    running cell is marked interrupted by the runner) before the KeyboardInterrupt goes on."""
    matrix = loaded.matrix
    try:
        adapter = get_adapter(matrix.engine, matrix.engine_options)
    except (KeyError, PluginError) as exc:
        raise ConfigError(f"{loaded.path}: engine: {exc.args[0]}") from None
    kind = inventory.get(device).kind
    resume, force = options.resume, options.force
    policy = DevicePolicy(options.link, options.stop, force, options.sleep, options.resume_hint)
    transport = open_transport(inventory, device)
    transport.link = policy.link  # every reconnect of this session waits as long as --link-grace
    seen = _seen_before(store, device)
    device_id = store.upsert_device(device, kind)

    session_id = None
    if resume:
        session_id = Sessions(store).latest_run_session(matrix.name, device_id)
        if session_id is None:
            raise ConfigError(f"--resume: no earlier session of matrix {matrix.name!r} on "
                              f"device {device!r} in {store.url}")
    seed = matrix.seed
    if session_id is not None:
        seed = Sessions(store).one(session_id).seed
    elif matrix.order == "shuffled" and seed is None:
        seed = random.SystemRandom().randrange(1 << 31)

    locks = ExitStack()
    begun: int | None = None     # the session, once it exists: Ctrl-C ends it
    if session_id is not None:   # --resume: before anything else, so two never interleave
        locks.enter_context(session_lock(store, session_id))
    try:
        with locks, _connected(transport, seen, progress, policy.link):
            prepared = prepare_device(store, transport, adapter, loaded, device, kind,
                                      device_id, progress)
            previous = Runs(store).latest_per_cell(session_id) if session_id is not None else {}
            live = _device_free(prepared, previous, session_id, resume, force)
            if session_id is None:
                session_id = _create_session(prepared, seed, options.command)
                locks.enter_context(session_lock(store, session_id))
            begun = session_id
            return _run_session(begin_session(prepared, session_id, policy), seed, previous,
                                live)
    except KeyboardInterrupt:
        if begun is not None:
            store.update_session(begun, ended_at=now())
        raise


def _seen_before(store: Store, device: str) -> bool:
    """The store holds facts of `device`: orch has reached it before (a known phone)."""
    row = store.device_by_name(device)
    return bool(row is not None and getattr(row, "facts", None))


@contextmanager
def _connected(transport: Transport, seen: bool, progress: Progress,
               link: LinkPolicy) -> Iterator[Transport]:
    """The transport connected for the session, closed at its end. A device orch has seen
    before that is not there at the start (a phone being replugged, a host rebooting) is
    waited for within --link-grace, with one line; a device never seen (a typo'd serial, a
    wrong host) fails at once, and so does a refused login or host key (AccessDenied)."""
    try:
        transport.connect()
    except AccessDenied:
        raise
    except TransportError as exc:
        if not seen or link.grace_s <= 0:
            raise
        reason = str(exc).removeprefix(f"{transport.name}: ")
        progress.note(f"waiting for {transport.name} (not connected; up to {link.grace_s:g} s, "
                      f"--link-grace): {reason}")
        transport.reconnect(link.grace_s)
    try:
        yield transport
    finally:
        transport.close()


def _device_free(prepared: PreparedDevice, previous: dict[str, Any], session_id: int | None,
                 resume: bool, force: bool) -> set[str]:
    """Refuse a device busy with another orch job (DeviceBusy, unless `force`) and mark runs
    of an orch that ended early interrupted. Returns the job dirs of this session's runs that
    still run on the device (collected first)."""
    store, progress = prepared.store, prepared.progress
    own = {r.remote_dir for r in previous.values() if r.remote_dir}
    live, notes = check_device_free(store, prepared.client, prepared.device,
                                    prepared.loaded.path, resume, force, own)
    for note in notes:
        progress.note(note)
    settled = settle_orphaned_runs(store, prepared.device_id, live | own, session_id)
    if settled:
        progress.note(f"runs {', '.join(map(str, settled))} of an orch that ended early are "
                      f"marked interrupted (--resume of their session collects them)")
    return live


def _create_session(prepared: PreparedDevice, seed: int | None, command: str | None) -> int:
    """A new session row for the matrix on the prepared device, with its facts as they are."""
    loaded = prepared.loaded
    name = loaded.matrix.name
    return prepared.store.create_session(
        kind="run", name=name, matrix_name=name, matrix_path=loaded.path,
        matrix_text=loaded.text, matrix_sha256=loaded.sha256,
        **SessionProvenance.collect(command).columns(), seed=seed,
        device_facts=dict(prepared.facts))


def _run_session(device: DeviceSession, seed: int | None, previous: dict[str, Any],
                 live: set[str]) -> SessionResult:
    """The session's cells in order (--resume: those not ok yet), then adaptive rounds while
    they are needed, then the quality probes."""
    store, session_id, progress = device.store, device.session_id, device.progress
    loaded = device.loaded
    matrix = loaded.matrix
    result = SessionResult(session_id)
    policy = matrix.repeat
    if policy.decided:
        # imported here: scipy, as for adaptive repeats below
        from orchestrator.run.decided import run_until_decided

        loop = _CellLoop(device, result, previous, live)
        result.repeat_stop = run_until_decided(store, session_id, matrix, seed, loop.cells,
                                               progress, loop.warm_up)
        store.update_session(session_id, repeat_stop=result.repeat_stop)
        progress.note(f"decision: {result.repeat_stop}")
        return _end_session(device, result)
    # --resume first completes every round that was started (an adaptive session may
    # have added some), and only then judges whether another is needed
    started = max((r.repeat_index for r in previous.values()), default=-1) + 1
    rounds = max(policy.min, min(started, policy.max))
    cells = plan_cells(matrix, seed)
    per_round = len(plan_cells(matrix, seed, range(policy.min, policy.min + 1)))
    for k in range(policy.min, rounds):
        cells += _extra_round(matrix, seed, k, per_round)
    run = _CellLoop(device, result, previous, live)
    run.cells(cells)
    if policy.adaptive:
        # imported here: it loads scipy, which only adaptive sessions need (a lab consumer
        # per device stays ~60 MiB smaller without it)
        from orchestrator.run.adaptive import judge

        while True:
            verdict = judge(store, session_id, policy)
            if verdict.met or rounds >= policy.max:
                result.repeat_stop = verdict.reason(rounds, policy)
                break
            progress.note(f"adaptive repeats: round {rounds + 1} "
                          f"(widest 95% interval ±{verdict.widest:.2f}% > ±{policy.target:g}%)")
            run.cells(_extra_round(matrix, seed, rounds, per_round))
            rounds += 1
        store.update_session(session_id, repeat_stop=result.repeat_stop)
        progress.note(f"adaptive repeats: {result.repeat_stop}")
    return _end_session(device, result)


def _end_session(device: DeviceSession, result: SessionResult) -> SessionResult:
    # quality probes: after every speed cell, in their own table (config/quality.py, run/quality.py)
    run_quality(device.runner, device.loaded, device.progress)
    device.store.update_session(device.session_id, ended_at=now())
    device.progress.finish()
    return result


def _extra_round(matrix: Any, seed: int | None, k: int, per_round: int) -> list[Cell]:
    """Round k (0-based, k >= repeat.min) of an adaptive session: every config of every model
    once, so paired comparisons stay balanced. Its run order continues after the first
    rounds and the rounds before it, the same on --resume."""
    start = len(plan_cells(matrix, seed)) + (k - matrix.repeat.min) * per_round
    return plan_cells(matrix, seed, range(k, k + 1), first_order=start)


@dataclass
class _CellLoop:
    """Runs planned cells in order: skips those already ok (--resume), collects or re-runs
    interrupted ones, and waits the cooldown before each."""

    device: DeviceSession
    result: SessionResult
    previous: dict[str, Any]
    live: set[str] = field(default_factory=set)   # job dirs of this session still running
    first: bool = True
    planned: int = 0

    def cells(self, cells: list[Cell]) -> None:
        todo: list[tuple[Cell, Any]] = []
        for cell in cells:
            earlier = self.previous.get(cell.key)
            if earlier is not None and ((earlier.flags or "") != cell.flags
                                        or session_changed(earlier, cell.session)):
                earlier = _changed(earlier)  # the config's flags or session changed: re-run
            if earlier is not None and earlier.status == Status.OK:
                self.result.skipped += 1
                continue
            todo.append((cell, earlier))
        # jobs of this session still running on the device are collected first: starting
        # another cell beside them would run two engines at once
        todo.sort(key=lambda item: item[1] is None or item[1].remote_dir not in self.live)
        start = self.planned
        self.planned += len(todo)
        progress = self.device.progress
        progress.start(self.device.device, self.planned, self.result.skipped)
        for index, (cell, earlier) in enumerate(todo, start):
            progress.cell_started(index, cell)
            outcome = run_or_collect(self.device, cell, earlier, self.first)
            self.first = False
            self.result.outcomes.append(outcome)


    def warm_up(self, cell: Cell) -> None:
        """A warm-up run (run/decisions.py, warmup_cells): the cooldown, the engine, stored;
        ended ok it becomes `warmup`, which no figure counts. Not one of the session's
        outcomes: a failed warm-up is stored and shown, and the rounds run regardless."""
        progress = self.device.progress
        progress.cell_started(-1, cell)
        settled = settle(self.device, self.first)
        outcome = self.device.runner.run_cell(cell, settled.waited_s, cooldown_met=settled.met,
                                              cooldown_temps=settled.temps)
        self.first = False
        if outcome.status == Status.OK:
            self.device.store.update_run(outcome.run_id, status=Status.WARMUP)


def run_or_collect(device: DeviceSession, cell: Cell, earlier: Any, first: bool) -> CellOutcome:
    """One cell that is not ok yet: an earlier interrupted or running run of it is collected
    from the device's spool when its engine is still there (or finished), else the cooldown
    is waited (none before the session's `first` cell on a fixed timer) and the cell runs
    (superseding the earlier run). `orch run` and the lab's tasks both go through here."""
    outcome = None
    if earlier is not None and earlier.status in RESUMABLE and earlier.remote_dir:
        outcome = device.collect(earlier, cell)
    if outcome is None:
        settled = settle(device, first)
        outcome = device.runner.run_cell(cell, settled.waited_s, cooldown_met=settled.met,
                                         cooldown_temps=settled.temps,
                                         superseding=earlier.id if earlier is not None else None)
    device.add_path_warnings(outcome.run_id, cell)
    return outcome


def _changed(earlier: Any) -> Any:
    """An earlier run whose flags or session differ from the cell's now: neither kept nor
    collected, but superseded by a new run (a status other than ok/interrupted/running forces
    that)."""
    return earlier.replace(status="changed")


def run_devices(store: Store, inventory: Inventory, loaded: LoadedMatrix, devices: list[str],
                board: Board, options: RunOptions = RunOptions()
                ) -> dict[str, SessionResult | BaseException]:
    """Run the matrix on several devices at once: one worker thread per device, each device's
    cells in order. Store writes are serialised by the store's lock. One device failing (an
    unreachable host, a refused key) does not stop the others; its error is its result."""
    results: dict[str, SessionResult | BaseException] = {}
    # set by Ctrl-C (the threads') or by the output's reader going away (Board.print); a
    # board of a library caller without one: an event of its own
    stop = getattr(board, "stop", None) or threading.Event()
    options = replace(options, stop=stop)

    def work(name: str) -> None:
        results[name] = _device_result(store, inventory, loaded, name, board, options)

    if len(devices) == 1:  # no thread: Ctrl-C reaches the runner directly
        work(devices[0])
        only = results[devices[0]]
        if isinstance(only, KeyboardInterrupt):
            raise KeyboardInterrupt
        if isinstance(only, ConfigError):  # e.g. a refused model path: exit 2
            raise only
        return results
    threads = [threading.Thread(target=work, args=(name,), name=f"orch-{name}", daemon=True)
               for name in devices]
    for thread in threads:
        thread.start()
    try:
        for thread in threads:
            while thread.is_alive():
                thread.join(timeout=0.5)
    except KeyboardInterrupt:
        stop.set()  # each runner stops its engine and marks its run interrupted
        for thread in threads:
            thread.join(timeout=60)
        raise
    return results


def _device_result(store: Store, inventory: Inventory, loaded: LoadedMatrix, name: str,
                   board: Board, options: RunOptions) -> SessionResult | BaseException:
    """One device's session, or the error it ended with (a thread must hand every error
    back: an unexpected one as a RuntimeError naming its type)."""
    try:
        return run_matrix(store, inventory, loaded, name, board.device(name), options)
    except KeyboardInterrupt as exc:
        return exc
    except OrchError as exc:   # a user's error (a busy session, a lost device): one line
        return exc
    except STORE_ERRORS as exc:   # outside a cell (the start, between cells): one line too
        return start_error(exc, store.path or store.url, store.path)
    except Exception as exc:  # noqa: BLE001 - a thread must hand every error back
        return RuntimeError(f"{type(exc).__name__}: {exc}")
