"""Run a matrix's quality probes on a device: every (model, config) answers every probe once.

Each probe is one engine invocation built by the engine's own adapter (its normal argv, the
probe's prompt where the matrix prompt goes, `quality.tokens` tokens, the config's flags),
started and followed through the same agent as a speed cell. Nothing of it goes into the
`run` / `token` / `sample` tables: the reply and its grade go to `quality`, so probe runs can
never enter a speed statistic. The probes run after every speed cell of the session, so they
cannot warm or heat the device under a measured cell either.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from orchestrator.config.configs import expand_configs
from orchestrator.config.grading import grade
from orchestrator.config.matrix import LoadedMatrix
from orchestrator.config.plan import Cell
from orchestrator.config.probes import Probe, load_probes
from orchestrator.db.quality import answered_ok, start_probe, update_probe
from orchestrator.db.store import now
from orchestrator.engines import CellSpec
from orchestrator.run.agent_client import Job
from orchestrator.run.deadline import DeadlineWatch
from orchestrator.run.progress import Progress
from orchestrator.run.runner import DeviceRunner, classify
from orchestrator.run.stream import Exit, ProtocolError, parse_line
from orchestrator.stats.status import Status
from orchestrator.transports.base import Outage, TransportError

MAX_ATTACHES = 20     # re-attaches of one probe whose follower ended before the X line


@dataclass
class _Collected:
    """What `classify` (run/runner.py) reads from a recorder, for one probe invocation."""

    exit: Exit | None = None
    warnings: list[str] = field(default_factory=list)
    last_sample: dict[str, int] | None = None
    lines: int = 0


@dataclass
class QualitySummary:
    ran: int = 0
    skipped: int = 0          # already answered in this session (--resume)
    failed: int = 0


def run_quality(runner: DeviceRunner, loaded: LoadedMatrix, progress: Progress) -> QualitySummary:
    """Every probe for every (model, config) of the matrix that has not already been answered
    ok in this session. No-op without `quality:`."""
    spec = loaded.matrix.quality
    summary = QualitySummary()
    if spec is None:
        return summary
    probes = load_probes(spec, loaded.path)
    done = answered_ok(runner.store, runner.session_id)
    models: list[tuple[str, str | None]] = \
        list(loaded.matrix.device_model_paths().items()) or [("-", None)]
    for model, path in models:
        for config, flags in expand_configs(loaded.matrix):
            todo = [p for p in probes if (model, config, p.id) not in done]
            summary.skipped += len(probes) - len(todo)
            if not todo:
                continue
            cell = Cell(model=model, model_path=path, config=config, flags=flags, repeat=0)
            correct = 0
            for probe in todo:
                status, right = _run_probe(runner, cell, probe, spec.grader, spec.tokens)
                summary.ran += 1
                summary.failed += status != Status.OK
                correct += right
            progress.note(f"quality {model} {config}: {correct}/{len(todo)} correct"
                          + (f" ({len(probes) - len(todo)} answered earlier)"
                             if len(todo) < len(probes) else ""))
    return summary


def _run_probe(runner: DeviceRunner, cell: Cell, probe: Probe, grader: str,
               tokens: int) -> tuple[str, bool]:
    """One probe invocation: (status, correct)."""
    matrix = runner.loaded.matrix
    uid = uuid.uuid4().hex[:16]
    jobdir = runner.client.job_dir(uid)
    binary_path, _ = runner.binary()
    spec = CellSpec(binary=binary_path, model_path=cell.model_path, prompt=probe.prompt,
                    tokens=tokens, flags=cell.argv_flags, csv_path=f"{jobdir}/tokens.csv",
                    extra={"workdir": runner.transport.workdir, **matrix.engine_options})
    argv = runner.adapter.build_argv(spec)
    row_id = start_probe(runner.store, {
        "session_id": runner.session_id, "device_id": runner.device_id, "model": cell.model,
        "config": cell.config, "flags": cell.flags, "probe_id": probe.id,
        "prompt": probe.prompt, "expected": probe.expected, "grader": grader,
        "status": Status.RUNNING, "argv": argv, "uid": uid, "remote_dir": jobdir,
        "started_at": now()})
    job = Job(run_uid=uid, argv=argv, env=dict(matrix.env),
              interval_ms=max(50, int(matrix.sample_interval * 1000)), timeout_s=matrix.timeout,
              csv=spec.csv_path if runner.adapter.writes_csv else None)
    parser = runner.adapter.new_parser(prompt=probe.prompt)
    seen = _Collected()
    try:
        runner.client.push_job(job)
        runner.client.start(jobdir, force=runner.force)
        verdict = _follow(runner, jobdir, parser, seen)
    except KeyboardInterrupt:
        try:
            runner.client.kill(jobdir)
        except TransportError:
            pass
        update_probe(runner.store, row_id, status=Status.INTERRUPTED, cause="stopped by the user",
                     ended_at=now())
        raise
    except TransportError as exc:
        update_probe(runner.store, row_id, status=Status.FAILED, cause=f"device: {exc}",
                     ended_at=now())
        return Status.FAILED, False
    status, cause = classify(seen, runner.mem_total_kb)   # type: ignore[arg-type]  # _Collected has what classify reads of a recorder
    if verdict is not None:   # orch's own deadline: the supervisor stopped (runner.py)
        status, cause = verdict
    reply = parser.record().text
    graded = grade(grader, reply, probe.expected)
    correct = graded.correct and status == Status.OK
    update_probe(runner.store, row_id, status=status, cause=cause, reply=reply,
                 answer=graded.answer, correct=correct if status == Status.OK else None,
                 rc=seen.exit.rc if seen.exit is not None else None, ended_at=now())
    return status, correct


def _follow(runner: DeviceRunner, jobdir: str, parser: Any,
            seen: _Collected) -> tuple[str, str] | None:
    """Feed the job's spool to the adapter's parser until the agent's X line; re-attach from
    the last line seen while the agent says the job is alive. orch's own deadline watches
    it as it watches a speed cell (DeadlineWatch): its (status, cause) when it gave up."""
    matrix = runner.loaded.matrix
    watch = DeadlineWatch(runner.client, jobdir, Outage(), float(matrix.timeout or 0),
                          max(0.05, float(matrix.sample_interval)))
    watch.start()
    try:
        for _ in range(MAX_ATTACHES):
            for line in runner.client.attach(jobdir, seen.lines):
                watch.line()
                seen.lines += 1
                _take(line, parser, seen)
                if seen.exit is not None:
                    return watch.verdict
                if runner.stop is not None and runner.stop.is_set():
                    raise KeyboardInterrupt
            if not runner.client.status(jobdir).startswith(("running", "done")):
                break
    finally:
        watch.stop()
    return watch.verdict


def _take(line: str, parser: Any, seen: _Collected) -> None:
    if line.startswith("C\t"):
        parser.feed("C", line[2:])
        return
    try:
        event = parse_line(line)
    except ProtocolError:
        return
    if event.tag in ("O", "E"):
        parser.feed(event.tag, event.text)
    elif event.tag == "S" and event.sample is not None:
        seen.last_sample = event.sample.values
    elif event.tag == "W":
        seen.warnings.append(event.text)
    elif event.tag == "X":
        seen.exit = event.exit
