"""One cell on one device: its job directory, the engine's start through the agent, following
the spool across link loss, and the run's final status (docs/architecture.md, "Layout").
The session decides which cells run, in what order and after which cooldown; the runner is
built by run/device_session.py once its session exists, so every run row it writes names it.

Over 400 lines on purpose: a cell's start, following and final status share the job's state
(its spool position, deadline and recorder); split, each part would take all of it as
arguments.
"""
from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import InitVar, dataclass, field
from typing import Any

from orchestrator.config.matrix import LoadedMatrix
from orchestrator.config.plan import Cell
from orchestrator.db.figures import compute_run
from orchestrator.db.runs import Runs
from orchestrator.db.store import Store, now
from orchestrator.engines import CellSpec, EngineAdapter
from orchestrator.errors import StoreWriteError
from orchestrator.run.agent_client import AgentClient, Job, file_sha256
from orchestrator.run.deadline import DeadlineWatch
from orchestrator.run.device_jobs import job_state
from orchestrator.run.lifecycle import STOPPING, USER_STOP, DeviceBusy
from orchestrator.run.link_retry import retry_link
from orchestrator.run.progress import Progress
from orchestrator.run.recorder import RunRecorder
from orchestrator.run.store_stop import STORE_ERRORS, store_failed
from orchestrator.run.route_collect import collect_route_trace, trace_path
from orchestrator.run.session_turns import session_status, session_turns, stored_requests
from orchestrator.run.validity import run_messages, sample_dicts, summarise
from orchestrator.transports.base import (
    AccessDenied,
    LinkPolicy,
    Outage,
    Transport,
    TransportError,
)
from orchestrator.stats.status import Status



# Re-attaches in a row while the follower keeps ending without the X line but the agent
# says the job runs (a guard against a follower that cannot stay attached, not a retry).
MAX_ATTACHES = 1000


@dataclass
class CellOutcome:
    run_id: int
    status: str
    tokens: int
    cause: str | None = None


OOM_FREE_FRACTION = 0.03   # free RAM below 3% of MemTotal at the last sample: memory exhausted


def aborted_cause(fields: dict[str, str]) -> str:
    """The cause of a run the agent stopped at the matrix's thermal ceiling (`abort:`), with
    the reading: "thermal ceiling: cpu read 86.2 °C >= 85.0 °C"."""
    def celsius(key: str) -> str:
        value = fields.get(key, "")
        return f"{int(value) / 1000:.1f} °C" if value.lstrip("-").isdigit() else "?"
    return (f"thermal ceiling: {fields.get('sensor') or 'sensor'} read {celsius('value_mC')} "
            f">= {celsius('above_mC')}")


def classify(recorder: RunRecorder, mem_total_kb: int | None = None) -> tuple[str, str | None]:
    """The run's status (docs/architecture.md, "The store") from what the stream said. `oom` needs evidence: the
    kernel's log line the agent found (cause=oom), or a SIGKILL while free RAM was near zero."""
    exit_ = recorder.exit
    garbled = getattr(recorder, "garbled", None)
    spool_full = getattr(recorder, "spool_full", None)
    if exit_ is None and spool_full:
        return Status.FAILED, spool_full
    if exit_ is None and garbled:
        return Status.FAILED, f"the engine ended but the agent's X line is unreadable ({garbled})"
    if exit_ is None:
        return Status.INTERRUPTED, "the stream ended without the agent's X line"
    if exit_.cause == "timeout":
        return Status.TIMEOUT, "exceeded the cell timeout"
    if exit_.cause == "aborted":
        return Status.ABORTED, aborted_cause(exit_.fields)
    if exit_.cause == "oom":
        oom = next((w for w in recorder.warnings if w.startswith("oom: ")), "oom: kernel log")
        return Status.OOM, f"killed for memory ({oom[5:].strip()[:300]})"
    last_free = (recorder.last_sample or {}).get("mem_avail_kb")
    if exit_.signal == 9 and mem_total_kb and last_free is not None \
            and last_free < OOM_FREE_FRACTION * mem_total_kb:
        return Status.OOM, (f"SIGKILL with {last_free / 1024:.0f} MiB free of "
                       f"{mem_total_kb / 1048576:.1f} GiB at the last sample")
    if exit_.signal:
        return Status.KILLED, f"signal {exit_.signal}"
    if exit_.rc != 0:
        return Status.FAILED, f"exit code {exit_.rc}"
    return Status.OK, None


@dataclass
class DeviceRunner:
    """Runs cells of one matrix on one device, recording into one session: built for a
    session that exists (run/device_session.py builds it from the prepared device)."""

    store: Store
    transport: Transport
    adapter: EngineAdapter
    loaded: LoadedMatrix
    session_id: int
    device_id: int
    progress: Progress
    link: LinkPolicy = field(default_factory=LinkPolicy)
    stop: threading.Event | None = None          # set by Ctrl-C when several devices run
    force: bool = False                          # --force: start beside another live job
    sleep: Callable[[float], None] = time.sleep
    facts: dict[str, Any] = field(default_factory=dict)       # the device facts (cores, ...)
    model_info: dict[str, Any] = field(default_factory=dict)  # model -> ModelInfo (size, sha256)
    resume_hint: str | None = None               # the `orch run … --resume` the user types
    agent: InitVar[AgentClient | None] = None    # the prepared device's client; None: a new one

    def __post_init__(self, agent: AgentClient | None) -> None:
        self.client = agent or AgentClient(self.transport)
        total = str(self.facts.get("mem_total_kb", ""))
        self.mem_total_kb = int(total) if total.isdigit() else None   # oom evidence
        # per binary (None: the matrix's; else a `builds:` cell's cached binary): (path on
        # the device, sha256), and engine_version()'s answer ("" when none)
        self._binaries: dict[str | None, tuple[str, str | None]] = {}
        self._versions: dict[str | None, str] = {}

    # -- preparation ---------------------------------------------------------------------------
    def binary(self, cell: Cell | None = None) -> tuple[str, str | None]:
        """(path on the device, sha256) of the engine `cell` runs, pushing it when the matrix
        says so: a `builds:` cell's build, else the matrix's binary. Each is hashed once."""
        key = cell.binary if cell is not None else None
        if key not in self._binaries:
            self._binaries[key] = self._resolve(key)
        return self._binaries[key]

    def _resolve(self, cached: str | None) -> tuple[str, str | None]:
        spec = self.loaded.matrix.binary
        if cached is not None:
            path = self.transport.expand_home(cached)
            return (path, self._device_sha256(path))
        if spec is None or spec.device == "builtin":
            local = self.adapter.builtin_binary()
            if local is None:
                raise TransportError(f"engine {self.adapter.name} needs `binary:` in the matrix")
            return (self.client.install_file(local), file_sha256(local))
        if spec.local is not None:
            from pathlib import Path

            from orchestrator.config.local_files import not_regular
            from orchestrator.errors import ConfigError

            local = Path(self.loaded.path).parent / spec.local
            kind = not_regular(local)   # checked at load too, again now (it may have changed)
            if kind is not None:
                raise ConfigError(f"binary.local: {local} is not a regular file ({kind})")
            if not local.exists():
                raise TransportError(f"binary.local: {local} does not exist")
            return (self.client.install_file(local), file_sha256(local))
        assert spec.device is not None   # BinarySpec has device or local (its validator)
        path = self.transport.expand_home(spec.device)
        return (path, self._device_sha256(path))

    def _device_sha256(self, path: str) -> str | None:
        # a device-side step like any other: it rides out a dropped link (run/link_retry.py)
        return retry_link(self.transport, f"sha256 of {path}",
                          lambda: self.transport.remote_sha256(path))

    def engine_version(self, cell: Cell | None = None) -> str | None:
        """The engine's own `--version` answer, asked once per runner and binary, for runs
        whose output does not name their build (provenance: every run must say which build
        measured it)."""
        key = cell.binary if cell is not None else None
        if key not in self._versions:
            self._versions[key] = ""
            argv = self.adapter.version_argv(self.binary(cell)[0])
            if argv:
                try:
                    result = retry_link(self.transport, "engine --version",
                                        lambda: self.transport.run(argv, timeout=30))
                except TransportError:
                    return None
                text = (result.stdout + result.stderr).decode("utf-8", errors="replace")
                self._versions[key] = self.adapter.parse_version(text) or ""
        return self._versions[key] or None

    # -- one cell ------------------------------------------------------------------------------
    def run_cell(self, cell: Cell, cooldown_s: float, superseding: int | None = None,
                 cooldown_met: bool | None = None,
                 cooldown_temps: dict[str, int] | None = None) -> CellOutcome:
        matrix = self.loaded.matrix
        uid = uuid.uuid4().hex[:16]
        jobdir = self.client.job_dir(uid)
        binary_path, binary_sha = self.binary(cell)
        spec = CellSpec(binary=binary_path, model_path=cell.model_path,
                        prompt=self.loaded.prompt_text, tokens=cell.tokens or matrix.tokens,
                        flags=cell.argv_flags, csv_path=f"{jobdir}/tokens.csv",
                        extra={"workdir": self.transport.workdir, **matrix.engine_options},
                        route_trace_path=trace_path(jobdir) if cell.route_trace else None,
                        session=bool(cell.session))
        argv = self.adapter.build_argv(spec)
        run_id = self.store.create_run(
            uid=uid, session_id=self.session_id, device_id=self.device_id, cell_key=cell.key,
            model=cell.model, config=cell.config, flags=cell.flags, argv=argv,
            repeat_index=cell.repeat, order_index=cell.order, status=Status.RUNNING,
            started_at=now(), cooldown_s=cooldown_s, cooldown_met=cooldown_met,
            temp_start=cooldown_temps, engine=self.adapter.name,
            binary_path=binary_path, binary_sha256=binary_sha, remote_dir=jobdir,
            model_size=getattr(self.model_info.get(cell.model), "size", None),
            model_sha256=getattr(self.model_info.get(cell.model), "sha256", None),
            superseded=False)
        if superseding is not None:
            self.store.update_run(superseding, superseded=True)
        job = Job(run_uid=uid, argv=argv, env=dict(matrix.env),
                  interval_ms=max(50, int(matrix.sample_interval * 1000)),
                  timeout_s=matrix.timeout,
                  csv=spec.csv_path if self.adapter.writes_csv else None,
                  abort_above_mC=matrix.abort.above_mC if matrix.abort else None,
                  abort_sensor=matrix.abort.sensor if matrix.abort else "cpu",
                  session=[request.agent_line() for request in cell.session] or None)
        try:
            self.client.push_job(job)
            self.client.start(jobdir, force=self.force)
        except KeyboardInterrupt:
            self._stopped(run_id, jobdir)
            raise
        except DeviceBusy as exc:   # another orch started an engine meanwhile: stop here
            self.store.update_run(run_id, status=Status.FAILED, cause=f"not started: {exc}",
                                  ended_at=now())
            raise
        except TransportError as exc:
            self.store.update_run(run_id, status=Status.FAILED, cause=f"could not start: {exc}",
                                  ended_at=now())
            return CellOutcome(run_id, Status.FAILED, 0, str(exc))
        return self.follow(run_id, jobdir, stored_lines=0, cell=cell)

    def _store_failed(self, run_id: int, jobdir: str, exc: BaseException) -> StoreWriteError:
        """The store failed mid-run (run/store_stop.py): the engine stopped, one line."""
        return store_failed(self.store, self.client, run_id, jobdir, exc,
                            self.resume_hint or f"orch run {self.loaded.path} --resume")

    def _stopped(self, run_id: int, jobdir: str, recorder: RunRecorder | None = None) -> None:
        """Ctrl-C or SIGTERM: stop the engine, keep what was streamed, mark the run
        interrupted with USER_STOP (so --resume re-runs it instead of collecting our kill)."""
        how = getattr(STOPPING, "name", None)
        cause = USER_STOP + (f" ({how})" if how else "")
        try:
            self.client.stop(jobdir, cause)
        except TransportError:
            pass
        if recorder is not None:
            recorder.flush()
        self.store.update_run(run_id, status=Status.INTERRUPTED, cause=cause, ended_at=now())

    def follow(self, run_id: int, jobdir: str, stored_lines: int, cell: Cell) -> CellOutcome:
        """Stream the job's spool into the store until its X line, surviving link loss."""
        parser = self.adapter.new_parser(prompt=None if cell.session else self.loaded.prompt_text)
        tokens = sum(r.n_predict for r in cell.session) if cell.session else \
            self.loaded.matrix.tokens
        self.progress.cell_running(cell, tokens)
        recorder = RunRecorder(self.store, run_id, parser, stored_lines=stored_lines,
                               on_token=self.progress.token, on_sample=self.progress.sample,
                               session=bool(cell.session))
        try:
            watch = self._deadline_watch(run_id, jobdir)
            watch.start()
            try:
                self._stream_until_exit(recorder, jobdir, watch)
            finally:
                watch.stop()
            recorder.flush()
        except KeyboardInterrupt:
            self._stopped(run_id, jobdir, recorder)
            raise
        except STORE_ERRORS as exc:
            raise self._store_failed(run_id, jobdir, exc) from exc
        status, cause = classify(recorder, self.mem_total_kb)
        # the engine's own account of its failure (a fatal BMOE_ERROR) is the cause
        failure = getattr(recorder.parser, "failure", lambda: None)()
        if failure is not None and status in (Status.OK, Status.FAILED):
            status, cause = Status.FAILED, failure + (f" ({cause})" if cause else "")
        if status != Status.OK and recorder.exit is None and recorder.protocol_errors:
            cause = f"{cause}; {recorder.protocol_errors[0]}"
        if watch.verdict is not None:   # orch gave up on the job (its X line, if any, is our kill's)
            status, cause = watch.verdict
        if watch.warning:
            recorder.warnings.append(watch.warning)
        trace = trace_path(jobdir) if cell.route_trace else None
        try:
            return self._finish(run_id, recorder, status, cause, trace, cell)
        except KeyboardInterrupt:   # during the collection (a slow fetch): not left `running`
            self._stopped(run_id, jobdir, recorder)
            raise
        except STORE_ERRORS as exc:
            raise self._store_failed(run_id, jobdir, exc) from exc

    def _deadline_watch(self, run_id: int, jobdir: str) -> DeadlineWatch:
        """orch's own deadline for the job (DeadlineWatch), counted from the run's start."""
        matrix, elapsed = self.loaded.matrix, 0.0
        row = Runs(self.store).get(run_id)
        started = getattr(row, "started_at", None)
        if started is not None:
            try:
                elapsed = max(0.0, (now() - started).total_seconds())
            except (TypeError, AttributeError):   # naive against aware: count from now
                elapsed = 0.0
        return DeadlineWatch(self.client, jobdir, Outage(), float(matrix.timeout or 0),
                             max(0.05, float(matrix.sample_interval)), elapsed)

    def _stream_until_exit(self, recorder: RunRecorder, jobdir: str,
                           watch: DeadlineWatch | None = None) -> None:
        """Follow the spool until the X line, through lost links: the link policy's retry
        loop (LinkPolicy.retrying, tenacity) reconnects and re-attaches from the last stored
        line. Effective bound: a run is given up once its device has been unreachable for
        link.grace_s (`--link-grace`), counted from the first failed attempt of an outage
        (noticing the loss takes the transport's dead-link time before that) until a line
        arrives again, plus the connect attempt under way at the end (its connect timeout)."""
        outage = watch.outage if watch is not None else Outage()
        try:
            for attempt in self.link.retrying(outage=outage, sleep=self.sleep):
                with attempt:
                    try:
                        if outage.since is not None:  # a retry: start from a new connection
                            self.transport.close()
                            self.transport.connect()
                        self._attach_until_exit(recorder, jobdir, outage, watch)
                    except TransportError as exc:
                        recorder.flush()
                        if outage.since is None:
                            self.progress.note(f"link to {self.transport.name} lost ({exc}); "
                                               f"reconnecting")
                        raise
        except AccessDenied as exc:
            recorder.warnings.append(f"device refused to reconnect: {exc}")
        except TransportError as exc:
            recorder.warnings.append(f"device unreachable for {self.link.grace_s:g} s: {exc}")

    def _attach_until_exit(self, recorder: RunRecorder, jobdir: str, outage: Outage,
                           watch: DeadlineWatch | None = None) -> None:
        for _ in range(MAX_ATTACHES):
            skip = recorder.lines if recorder.lines >= recorder.stored_lines else 0
            for line in self.client.attach(jobdir, skip):
                outage.end()  # the link works
                if watch is not None:
                    watch.line()
                recorder.handle(line)
                if recorder.ended:
                    return
                if self.stop is not None and self.stop.is_set():
                    raise KeyboardInterrupt
            # The follower ended without X: ask the agent whether the run is still alive
            # (adb's v1 shell reports a dropped device as a normal end of output). An unclear
            # answer raises TransportError: the link policy retries, it is not an ending.
            state, _ = job_state(self.client, jobdir)
            if state == "full":
                recorder.spool_full = (  # type: ignore[attr-defined]  # classify reads it with getattr
                    f"the device's storage was full: the agent could not write the run's spool "
                    f"({jobdir}); free space in the device's workdir, then --resume runs it again")
                return
            if state not in ("running", "done"):
                self._stop_leftovers(recorder, jobdir, state)
                return
            outage.end()

    def _stop_leftovers(self, recorder: RunRecorder, jobdir: str, state: str) -> None:
        """The job ended without its X line (its supervisor died, or its directory went):
        whatever of it still runs is stopped now and named in a warning, so that no process
        of the run outlives it. A failure to ask is a warning too: the next busy check (and
        `--resume`) sees what is left."""
        try:
            if state == "orphan":
                killed = self.client.kill(jobdir)
                why = "the agent's supervisor ended before the engine"
            else:   # dead or absent: the tag still finds a lost job's processes
                killed = self.client.reap(jobdir.rsplit("/", 1)[0])
                why = f"the job was {state} on the device"
        except TransportError as exc:
            recorder.warnings.append(f"could not stop what was left of the job: {exc}")
            return
        if killed:
            recorder.warnings.append(f"{why}; stopped what still ran: {killed}")

    def _energy(self, run_id: int, samples: list[dict[str, Any]], tokens: int | None,
                from_ms: int | None) -> dict[str, Any] | None:
        """The run's energy over its decode phase (stats/energy.py), net of the device's idle
        power when `orch calibrate` measured one."""
        from orchestrator.stats import energy

        row = Runs(self.store).get(run_id)
        device = self.store.device_by_name(row.device) if row is not None else None
        idle = ((device.idle_baseline or {}) if device is not None else {}).get("power_w")
        return energy.summarise(samples, self.facts, tokens, from_ms,
                                idle_w=float(idle) if isinstance(idle, (int, float)) else None,
                                interval_s=self.loaded.matrix.sample_interval)

    def _finish(self, run_id: int, recorder: RunRecorder, status: str,
                cause: str | None, trace: str | None = None,
                cell: Cell | None = None) -> CellOutcome:
        record = recorder.parser.record()
        if cell is not None and cell.session:   # run/session_turns.py
            record.turns = session_turns(record.turns, recorder.turn_events, cell.session)
            record.extra["session"] = stored_requests(cell.session)
            status, cause = session_status(status, cause, recorder.turn_events, record.turns,
                                           cell.session)
        if record.engine_build is None:
            record.engine_build = self.engine_version(cell)
        trace_warning = None
        if trace is not None and recorder.exit is not None:  # the engine has ended: its file too
            trace_warning = collect_route_trace(self.transport, self.store, run_id, trace, record,
                                                required=status == Status.OK)
        # load and frequency while the engine ran: from every stored sample (a resumed run
        # replays its early lines without keeping them in the recorder)
        samples = sample_dicts(self.store.frame("sample", [run_id]))
        validity = summarise(samples, self.facts)
        if validity.samples:
            record.validity = validity.stored()
        warnings = recorder.warnings + recorder.parser.warnings() + run_messages(validity)
        record.energy = self._energy(run_id, samples, record.tokens or recorder.token_seq,
                                     recorder.decode_from_ms)
        if record.energy:
            warnings += [f"energy: {flag}" for flag in record.energy["flags"]]
            if record.energy.get("not_measured"):
                warnings.append(f"energy not measured: {record.energy['not_measured']}")
        if trace_warning:
            warnings.append(trace_warning)
        first = recorder.first_sample or {}
        temps = {k: v for k, v in first.items() if k.endswith(("_mC", "_dC"))}
        values: dict[str, Any] = {
            "status": status, "cause": cause, "ended_at": now(), "summary": record.stored(),
            "text": record.text, "engine_build": record.engine_build,
            "warnings": warnings or None, "mem_avail_start_kb": first.get("mem_avail_kb")}
        row = Runs(self.store).get(run_id)
        assert row is not None, run_id   # started by this runner
        if temps and not (row.temp_start or {}):
            values["temp_start"] = temps  # no cooldown reading: the first sample's
        if recorder.exit is not None:
            values.update(rc=recorder.exit.rc, signal=recorder.exit.signal)
        # the run's figures, computed once: every token row and sample is stored (flushed
        # before _finish); db/figures.py, stats/statistics.py compute
        values["figures"] = compute_run(self.store, row, record)
        self.store.update_run(run_id, **values)
        self.progress.cell_done(status, recorder.token_seq)
        return CellOutcome(run_id, status, recorder.token_seq, cause)
