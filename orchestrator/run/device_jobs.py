"""The device's orch jobs, asked through the agent: which jobs of any
session are live (`jobs`), and the state of one job (`status`), both read strictly. A job is
re-run only on positive evidence that it is dead: the agent answered `dead` or `absent` (no
supervisor, no engine, no X line). A query that fails or answers something else is an error
of the device, never a reason to start a second engine."""
from __future__ import annotations

from dataclasses import dataclass

from orchestrator.db.rows import RunRow
from orchestrator.db.runs import Runs
from orchestrator.db.session_lock import SessionBusy, session_lock
from orchestrator.db.store import Store
from orchestrator.run.agent_client import AgentClient
from orchestrator.run.lifecycle import DeviceBusy
from orchestrator.run.link_retry import retry_link
from orchestrator.transports.base import TransportError
from orchestrator.stats.status import Status

STATES = ("done", "running", "orphan", "dead", "absent", "full")


@dataclass(frozen=True)
class LiveJob:
    state: str      # running (its supervisor spools it) | orphan (the engine runs alone)
    #               | stray (a process tagged with an orch job that is not live)
    jobdir: str     # for a stray: the process's name (its job may have no directory left)
    pid: int


def _agent_answer(client: AgentClient, what: str, *args: str) -> list[str]:
    """The agent's answer lines; a failed command is an error, never an empty answer."""
    argv = [client.transport.shell, client.agent_path, *args]
    result = retry_link(client.transport, what,
                        lambda: client.transport.run(argv, timeout=60))
    if result.rc != 0:
        raise TransportError(f"{client.transport.name}: agent {args[0]} failed (rc {result.rc}): "
                             f"{result.stderr.decode(errors='replace').strip()[:300]}")
    return result.stdout.decode("utf-8", errors="replace").splitlines()


def live_jobs(client: AgentClient) -> list[LiveJob]:
    """The device's live orch jobs (any session). The answer must end with `end`: a cut
    answer is an error, not "no jobs"."""
    runs = f"{client.transport.workdir}/runs"
    lines = _agent_answer(client, "the device's live jobs", "jobs", runs)
    if not lines or lines[-1] != "end":
        raise TransportError(f"{client.transport.name}: no complete answer to `jobs` "
                             f"({lines[-1:] or 'nothing'})")
    jobs = []
    for line in lines[:-1]:
        state, _, rest = line.partition("\t")
        jobdir, _, pid = rest.rpartition("\t")
        if state not in ("running", "orphan", "stray") or not pid.isdigit():
            raise TransportError(f"{client.transport.name}: unexpected `jobs` line {line!r}")
        jobs.append(LiveJob(state, jobdir, int(pid)))
    return jobs


def job_state(client: AgentClient, jobdir: str) -> tuple[str, int | None]:
    """(state, pid) of one job: done | running PID | orphan PID | dead | absent. Anything
    else (an empty answer from a dropped link, an error) raises TransportError."""
    lines = _agent_answer(client, f"the status of {jobdir}", "status", jobdir)
    words = lines[0].split() if len(lines) == 1 else []
    if not words or words[0] not in STATES or len(words) > 2 or \
            (len(words) == 2 and not words[1].isdigit()):
        raise TransportError(f"{client.transport.name}: unclear job status of {jobdir}: "
                             f"{lines[:2]!r}")
    return words[0], int(words[1]) if len(words) == 2 else None


def _run_of(store: Store, jobdir: str) -> RunRow | None:
    rows = Runs(store).by_remote_dir(jobdir)
    return rows[0] if rows else None


def busy_message(store: Store, device: str, jobs: list[LiveJob], matrix_path: str,
                 resume: bool) -> str:
    """One line naming the live job and the ways on: wait, --resume, --force."""
    job = jobs[0]
    run = _run_of(store, job.jobdir)
    whose = f"run #{run.id} of session {run.session_id} ({run.session_name})" if run is not None \
        else "not in this database"
    what = {"orphan": "an engine left without its supervisor",
            "stray": f"a process of an ended orch job ({job.jobdir})"}.get(job.state,
                                                                         "an orch job")
    more = f" (and {len(jobs) - 1} more)" if len(jobs) > 1 else ""
    ways = "wait for it to end" if resume else \
        f"collect it with `orch run {matrix_path} --resume` if it is this matrix's, wait for it"
    return (f"device {device} is busy: {what} still runs there ({job.jobdir}, pid {job.pid}, "
            f"{whose}){more}; {ways}, or start beside it with --force")


def check_device_free(store: Store, client: AgentClient, device: str, matrix_path: str,
                      resume: bool, force: bool, own_dirs: set[str]) -> tuple[set[str], list[str]]:
    """Before the first cell: (the live job dirs of this session, to collect first; notes).
    Raises DeviceBusy when a job of another session runs and --force was not given."""
    jobs = live_jobs(client)
    notes = []
    if any(job.state == "stray" for job in jobs):
        # Processes of orch jobs nobody can collect (not live, or their directory gone):
        # stopped before anything starts, and named.
        killed = client.reap(f"{client.transport.workdir}/runs")
        if killed:
            notes.append(f"stopped stray processes of ended or lost orch jobs: {killed}")
        jobs = live_jobs(client)   # a stray that outlived KILL is still a busy device
    mine = {job.jobdir for job in jobs if job.jobdir in own_dirs}
    others = [job for job in jobs if job.jobdir not in own_dirs]
    if others:
        message = busy_message(store, device, others, matrix_path, resume)
        if not force:
            raise DeviceBusy(message)
        notes.append(f"--force: {message.split('; ')[0]}; starting beside it")
    return mine, notes


def settle_orphaned_runs(store: Store, device_id: int, live: set[str],
                         skip_session: int | None) -> list[int]:
    """Runs of this device left `running` by an orch that died, whose job is no longer live:
    marked interrupted (a later --resume of their session collects or re-runs them), so no
    run stays `running` for ever. A session another orch holds right now is left alone."""
    settled = []
    for row in Runs(store).running_on(device_id):
        if row.session_id == skip_session or row.remote_dir in live:
            continue
        try:
            with session_lock(store, row.session_id):
                store.update_run(row.id, status=Status.INTERRUPTED,
                                 cause="orch ended before this run did; `orch run --resume` of "
                                       "its session collects it")
        except SessionBusy:
            continue
        settled.append(row.id)
    return settled
