"""Drive the device agent through any transport: install it, read facts, push and start jobs,
follow their spool (docs/architecture.md, "The agent runs anywhere without Python"). The
thermal cooldown (cooldown.py) streams the agent's `cooldown` command with this client's agent
path; the steps that need no agent use the transport directly: model files (model_push.py) and
the model path check (pathcheck.py).
Every method but attach (the runner follows it) and kill (Ctrl-C must not wait for a link)
rides out link loss through run/link_retry.py."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from orchestrator.run.link_retry import LinkRetry, retry_link
from orchestrator.run.stream import LineSplitter, facts_from_lines
from orchestrator.shipped import AGENT_NAME, agent_source, shipped_file  # noqa: F401 (re-exported)
from orchestrator.transports.base import (
    CommandResult,
    Transport,
    TransportError,
    sha256_file,
)
from orchestrator.transports.fetch import FACTS, FileKind, bounded_output, fetch_file

# The file orch leaves in a job folder before it stops the job's engine itself (a Ctrl-C, a
# store fault, a deadline): its one line is why. A later collection (`--resume`, the lab) that
# finds it never stores the X line orch's own kill produced as the engine's result.
STOP_MARKER = "orch-stopped"
STOP_NOTE = FileKind("stop marker", 4096, "one line: why orch stopped the job")


def file_sha256(path: Path) -> str:
    return sha256_file(path)


@dataclass
class Job:
    """One engine invocation, as the agent's job directory describes it."""

    run_uid: str
    argv: list[str]
    env: dict[str, str]
    interval_ms: int = 1000
    timeout_s: float = 0

    @property
    def timeout_ms(self) -> int:
        """The timeout in whole milliseconds, at least 1 when any (0: none)."""
        return max(1, round(self.timeout_s * 1000)) if self.timeout_s > 0 else 0
    csv: str | None = None
    abort_above_mC: int | None = None   # the matrix's thermal ceiling (`abort:`), milli-°C
    abort_sensor: str = "cpu"
    # a session cell's requests, one line each (config/session.py SessionRequest.agent_line):
    # pushed as JOBDIR/session, which the agent writes to the engine's stdin
    session: list[str] | None = None


class AgentClient:
    def __init__(self, transport: Transport) -> None:
        self.transport = transport
        self._agent_path: str | None = None

    @property
    def agent_path(self) -> str:
        if self._agent_path is None:
            self._agent_path = self.install()
        return self._agent_path

    def install(self) -> str:
        """Push the agent once per version: its name carries the sha256, so an existing file
        is the right one; the sha256 is still compared, to catch a truncated earlier push."""
        source = agent_source()
        digest = file_sha256(source)
        remote = f"{self.transport.workdir}/agent/orch-agent-{digest[:12]}.sh"
        retry_link(self.transport, "the agent's install",
                   lambda: self.transport.push_if_changed(source, remote, mode=0o755))
        return remote

    def install_file(self, local: Path, subdir: str = "bin") -> str:
        """Push a helper file (e.g. moe_probe.py) under a content-addressed name."""
        digest = file_sha256(local)
        remote = f"{self.transport.workdir}/{subdir}/{local.stem}-{digest[:12]}{local.suffix}"
        retry_link(self.transport, f"the push of {local.name}",
                   lambda: self.transport.push_if_changed(local, remote, mode=0o755))
        return remote

    def _agent(self, *args: str) -> list[str]:
        return [self.transport.shell, self.agent_path, *args]

    def facts(self) -> dict[str, str]:
        argv = self._agent("facts")
        # bounded as a fetched file is (transports/fetch.py): facts quote device files
        result = retry_link(self.transport, "the device facts",
                            lambda: bounded_output(self.transport, argv, FACTS, timeout=60))
        if result.rc != 0:
            raise TransportError(f"{self.transport.name}: agent facts failed (rc {result.rc}): "
                                 f"{result.stderr.decode(errors='replace').strip()[:500]}")
        return facts_from_lines(result.stdout.decode("utf-8", errors="replace").splitlines())

    def job_dir(self, run_uid: str) -> str:
        return f"{self.transport.workdir}/runs/{run_uid}"

    def push_job(self, job: Job) -> str:
        """Write the job directory: one file per argv element, so any byte reaches the engine."""
        jobdir = self.job_dir(job.run_uid)
        meta = {"run": job.run_uid, "interval_ms": job.interval_ms,
                # whole seconds, rounded up (int() made 0.5 s "no timeout"); timeout_ms is the
                # exact value for an agent that reads it
                "timeout_s": -(-job.timeout_ms // 1000), "timeout_ms": job.timeout_ms}
        if job.csv:
            meta["csv"] = job.csv
        if job.abort_above_mC is not None:
            meta.update(abort_above_mC=job.abort_above_mC, abort_sensor=job.abort_sensor)
        if job.session:
            meta["session"] = "session"
        # surrogateescape: a prompt file's non-UTF-8 bytes go back out as the same bytes
        files = [(arg.encode("utf-8", "surrogateescape"), f"{jobdir}/args/{index:03d}")
                 for index, arg in enumerate(job.argv)]
        files.append(("".join(f"{k}={v}\n" for k, v in job.env.items()).encode(), f"{jobdir}/env"))
        if job.session:   # before meta: an agent that reads `session=` finds the file
            files.append(("".join(f"{line}\n" for line in job.session).encode(),
                          f"{jobdir}/session"))
        files.append(("".join(f"{k}={v}\n" for k, v in meta.items()).encode(), f"{jobdir}/meta"))
        sent = [0]   # files written: a repeat after a lost link goes on from the first unsure one

        def push() -> None:
            for data, remote in files[sent[0]:]:
                self.transport.put_bytes(data, remote)
                sent[0] += 1
        retry_link(self.transport, f"the job files of {job.run_uid}", push)
        return jobdir

    def start(self, jobdir: str, force: bool = False) -> None:
        """Start the job. Not repeatable as such (a second supervisor would run the engine
        twice), so a repeat after a lost link relies on the agent: it refuses a job dir that
        has a pid or spool file ("already started"), which then means our first try worked."""
        argv = self._agent("start", jobdir, *(["force"] if force else []))  # force: 16B
        retry = LinkRetry(self.transport, f"the start of {jobdir}")

        def start() -> tuple[CommandResult, bool]:
            result = self.transport.run(argv, timeout=60)
            return result, retry.repeat and b"already started" in result.stderr + result.stdout
        result, already = retry.call(start)
        if already:
            return
        if result.rc == 4 and result.stdout.startswith(b"busy"):   # 16B: another live job
            from orchestrator.run.lifecycle import DeviceBusy
            raise DeviceBusy(f"{self.transport.name}: another orch job runs on the device "
                             f"({_after_first_line(result.stdout)[:300]})"
                             f"; not starting a second engine beside it (--force would)")
        if result.rc != 0 or not result.stdout.startswith(b"started"):
            raise TransportError(f"{self.transport.name}: agent could not start the job: "
                                 f"{(result.stdout + result.stderr).decode(errors='replace')[:500]}")

    def attach(self, jobdir: str, skip: int) -> Iterator[str]:
        """Stream lines from line `skip` of the spool until the agent's X line (then it ends)."""
        splitter = LineSplitter()
        for chunk in self.transport.stream(self._agent("attach", jobdir, str(skip))):
            yield from splitter.feed(chunk)

    def status(self, jobdir: str, retry: bool = True) -> str:
        """The agent's `status` answer; `retry=False`: one try (a watch beside the follower
        must not sit out an outage the follower's own retries handle)."""
        argv = self._agent("status", jobdir)
        if retry:
            result = retry_link(self.transport, f"the status of {jobdir}",
                                lambda: self.transport.run(argv, timeout=30))
        else:
            result = self.transport.run(argv, timeout=30)
        return result.stdout.decode(errors="replace").strip() or "absent"

    def kill(self, jobdir: str) -> str:
        """Stop the job's engine, its process group and every process tagged with the job
        (docs/agent-protocol.md, "kill"): what was stopped, as "PID(comm) ...", or ""."""
        result = self.transport.run(self._agent("kill", jobdir), timeout=30)
        return _killed(result.stdout)

    def stop(self, jobdir: str, cause: str) -> str:
        """kill(), after leaving the STOP_MARKER (`cause`) in the job folder, so that whoever
        collects the job later knows its end was orch's own. One try each, no retry (a stop
        must not wait for a link): a marker that could not be written leaves the run's stored
        cause as the only record."""
        try:
            self.transport.put_bytes(cause.encode()[:STOP_NOTE.max_bytes - 1] + b"\n",
                                     f"{jobdir}/{STOP_MARKER}")
        except (TransportError, OSError):
            pass
        return self.kill(jobdir)

    def stopped_by_orch(self, jobdir: str) -> str | None:
        """The cause orch left when it stopped this job itself (STOP_MARKER), else None."""
        try:
            data = retry_link(self.transport, f"the stop marker of {jobdir}",
                              lambda: fetch_file(self.transport, f"{jobdir}/{STOP_MARKER}",
                                                 STOP_NOTE))
        except FileNotFoundError:
            return None
        return data.decode("utf-8", errors="replace").strip() or "stopped by orch"

    def supervisor_state(self, jobdir: str) -> tuple[int, str] | None:
        """(pid, state letter of /proc/PID/stat: R, S, T (stopped), ...) of the job's live
        supervisor (its pid and start time as the job recorded them), or None when none runs.
        One command, no retry: the runner's deadline watch asks it while it follows the job."""
        result = self.transport.run([self.transport.shell, "-c", _SUP_STATE, "sh",
                                     self.agent_path, jobdir], timeout=30)
        pid, _, state = result.stdout.decode(errors="replace").strip().partition(" ")
        if result.rc != 0 or not pid.isdigit() or not state:
            return None
        return int(pid), state

    def stop_supervisor(self, jobdir: str) -> str:
        """SIGKILL the job's supervisor (a stopped one too: SIGKILL needs no SIGCONT), then
        SIGCONT it in case it was only stopped; its pid, or "" when none ran. For a job orch
        has given up on (its deadline passed): the engine is killed first (kill())."""
        result = self.transport.run([self.transport.shell, "-c", _SUP_STOP, "sh",
                                     self.agent_path, jobdir], timeout=30)
        pid = result.stdout.decode(errors="replace").strip()
        return pid if result.rc == 0 and pid.isdigit() else ""

    def reap(self, runs_dir: str) -> str:
        """Stop the stray processes under RUNS_DIR: tagged with an orch job that is not live
        (a daemon an engine left, a job whose directory was removed). What was stopped, or ""."""
        result = retry_link(self.transport, "the stray processes",
                            lambda: self.transport.run(self._agent("reap", runs_dir), timeout=60))
        if result.rc != 0 or not result.stdout.rstrip().endswith(b"end"):
            raise TransportError(f"{self.transport.name}: agent reap failed (rc {result.rc}): "
                                 f"{(result.stdout + result.stderr).decode(errors='replace')[:300]}")
        return _killed(result.stdout)


# The agent's functions (docs/agent-protocol.md, "Source-only mode") name the supervisor by
# its pid and recorded start time (sup_alive), so a reused pid is never touched.
_SUP_STATE = ('ORCH_AGENT_LIB=1 . "$1"; JOBDIR=$2; sup_alive || exit 3; st=\'\'; '
              'read -r st <"/proc/$SPID/stat" || exit 3; p=$SPID; '
              'set -- ${st##*) }; say "$p $1"')
_SUP_STOP = ('ORCH_AGENT_LIB=1 . "$1"; JOBDIR=$2; sup_alive || exit 0; '
             'kill -KILL "$SPID" 2>/dev/null; kill -CONT "$SPID" 2>/dev/null; say "$SPID"')


def _killed(answer: bytes) -> str:
    """The processes an agent's `killed<TAB>...` line names, or ""."""
    for line in answer.decode(errors="replace").splitlines():
        if line.startswith("killed\t"):
            return line.partition("\t")[2].strip()
    return ""


def _after_first_line(answer: bytes) -> str:
    """What the agent said after its first line (`busy`): the live job, or "" when nothing."""
    return answer.decode(errors="replace").partition("\n")[2].strip()
