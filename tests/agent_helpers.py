"""Helpers to run agent/orch-agent.sh under the shells it must support
(docs/architecture.md, "The agent runs anywhere without Python").

Reusable by any test that needs a real agent run: build an Android-like toybox-only PATH,
write a job directory, run a job to completion and get its parsed spool, clean up every
process a job started.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Mapping

import waiting

AGENT = Path(__file__).resolve().parents[1] / "agent" / "orch-agent.sh"
SHELL_NAMES = ("mksh+toybox", "dash", "bash")
# Tools a stock phone lacks; the toybox dir must not provide them.
NOT_ON_PHONES = ("awk", "dd", "tr", "expr", "diff", "bc", "python", "python3", "perl")


def required_tools(name: str) -> list[str]:
    """Executables a shell kind needs on this machine."""
    return {"mksh+toybox": ["mksh", "toybox"], "dash": ["dash"], "bash": ["bash"]}[name]


def missing_tools(name: str) -> list[str]:
    return [tool for tool in required_tools(name) if shutil.which(tool) is None]


def build_toybox_dir(dest: Path, toybox: str | None = None, mksh: str | None = None) -> Path:
    """A directory holding a symlink per toybox applet plus `sh -> mksh` (a stock phone's PATH)."""
    toybox = toybox or shutil.which("toybox")
    mksh = mksh or shutil.which("mksh")
    if not toybox or not mksh:
        raise FileNotFoundError("toybox and mksh are needed for a toybox-only PATH")
    dest.mkdir(parents=True, exist_ok=True)
    applets = subprocess.run([toybox], capture_output=True, check=True, timeout=10).stdout.split()
    for applet in applets:
        name = applet.decode()
        if name in ("sh", "toysh") or "/" in name:
            continue
        link = dest / name
        if not link.exists():
            link.symlink_to(toybox)
    sh = dest / "sh"
    if sh.is_symlink() or sh.exists():
        sh.unlink()
    sh.symlink_to(mksh)
    return dest


@dataclass
class Shell:
    """How to run the agent under one shell kind."""

    name: str
    interpreter: str
    env: dict[str, str]
    bindir: Path | None = None  # the toybox-only PATH dir, for mksh+toybox

    def argv(self, *args: str | os.PathLike) -> list[str]:
        return [self.interpreter, str(AGENT), *map(str, args)]

    def environ(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        env = dict(self.env)
        env.update(extra or {})
        return env

    def run(self, *args: str | os.PathLike, extra_env: Mapping[str, str] | None = None,
            timeout: float = 30) -> subprocess.CompletedProcess:
        return subprocess.run(self.argv(*args), env=self.environ(extra_env), capture_output=True,
                              stdin=subprocess.DEVNULL, timeout=timeout)


def make_shell(name: str, workdir: Path) -> Shell:
    """A Shell for `name`; for mksh+toybox the PATH is a fresh toybox-only dir under workdir."""
    if name == "mksh+toybox":
        bindir = build_toybox_dir(workdir / "toybox-bin")
        return Shell(name, shutil.which("mksh") or "/usr/bin/mksh", {"PATH": str(bindir)}, bindir)
    base = {k: v for k, v in os.environ.items() if not k.startswith("ORCH_")}
    return Shell(name, shutil.which(name) or name, base)


# -- job directories -------------------------------------------------------------------------

def _b(value: str | bytes) -> bytes:
    return value if isinstance(value, bytes) else value.encode()


def write_job(jobdir: Path, args: Iterable[str | bytes], meta: Mapping[str, object] | None = None,
              env: Iterable[str] | None = None) -> Path:
    """Write args/NNN (byte-exact), meta and env the way the controller pushes them."""
    (jobdir / "args").mkdir(parents=True, exist_ok=True)
    for i, arg in enumerate(args):
        (jobdir / "args" / f"{i:03d}").write_bytes(_b(arg))
    if meta:
        (jobdir / "meta").write_text("".join(f"{k}={v}\n" for k, v in meta.items()))
    if env is not None:
        (jobdir / "env").write_text("".join(f"{line}\n" for line in env))
    return jobdir


def parse_lines(data: bytes) -> list[list[str]]:
    """Complete spool lines split into TAB fields (a trailing partial line is dropped)."""
    text = data.decode("utf-8", "surrogateescape")
    lines = text.split("\n")[:-1]
    return [line.split("\t") for line in lines]


def wait_for(predicate: Callable[[], object], timeout: float = 10, step: float = 0.05):
    """predicate()'s first truthy value within `timeout` s (tests/waiting.py)."""
    return waiting.wait_for(predicate, timeout, step)


def spool_lines(jobdir: Path) -> list[list[str]]:
    path = jobdir / "spool"
    return parse_lines(path.read_bytes()) if path.exists() else []


@dataclass
class JobResult:
    jobdir: Path
    lines: list[list[str]]           # parsed attach output
    attach_rc: int
    raw: bytes = b""
    spool: list[list[str]] = field(default_factory=list)

    def tagged(self, tag: str) -> list[list[str]]:
        return [line[1:] for line in self.lines if line[0] == tag]

    def payloads(self, tag: str) -> list[str]:
        return ["\t".join(line[1:]) for line in self.lines if line[0] == tag]

    @property
    def x(self) -> list[str]:
        xs = self.tagged("X")
        assert len(xs) == 1, f"expected one X line, got {xs}"
        return xs[0]


def start_job(shell: Shell, jobdir: Path, extra_env: Mapping[str, str] | None = None) -> int:
    res = shell.run("start", jobdir, extra_env=extra_env, timeout=15)
    assert res.returncode == 0, res.stderr
    out = res.stdout.decode().strip()
    assert out.startswith("started "), out
    return int(out.split()[1])


def attach(shell: Shell, jobdir: Path, skip: int = 0, timeout: float = 60) -> tuple[int, bytes]:
    res = shell.run("attach", jobdir, str(skip), timeout=timeout)
    return res.returncode, res.stdout


def run_job(shell: Shell, jobdir: Path, args: Iterable[str | bytes],
            meta: Mapping[str, object] | None = None, env: Iterable[str] | None = None,
            extra_env: Mapping[str, str] | None = None, timeout: float = 60,
            release: tuple[Path, int] | None = None) -> JobResult:
    """Write a job, start it, follow it with `attach JOBDIR 0` until it ends; parsed lines.

    release=(FILE, N): FILE is created once the spool holds N S lines, for an engine that
    waits for FILE: a test that wants N samples waits for them, not for a time that a busy
    machine may not give the agent."""
    meta = {"interval_ms": 100, "run": jobdir.name, **(meta or {})}
    write_job(jobdir, args, meta, env)
    start_job(shell, jobdir, extra_env)
    releaser = None
    if release is not None:
        releaser = threading.Thread(target=_release_after_samples, args=(jobdir, *release, timeout),
                                    daemon=True)
        releaser.start()
    rc, out = attach(shell, jobdir, 0, timeout=timeout)
    if releaser is not None:
        releaser.join(timeout)
    return JobResult(jobdir, parse_lines(out), rc, out, spool_lines(jobdir))


def _release_after_samples(jobdir: Path, file: Path, samples: int, timeout: float) -> None:
    # released on a timeout too: the engine ends and the test's own checks say what was missing
    waiting.wait_until(lambda: sum(1 for line in spool_lines(jobdir) if line[:1] == ["S"]) >= samples,
                       timeout)
    file.touch()


# -- cleanup ---------------------------------------------------------------------------------

def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _pgrp_members(pgid: int) -> list[int]:
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(entry))
    return members


def cleanup_job(jobdir: Path) -> None:
    """SIGKILL the job's supervisor (if it still runs this jobdir) and the engine's group."""
    spid = _read_int(jobdir / "pid")
    if spid:
        try:
            cmdline = Path(f"/proc/{spid}/cmdline").read_bytes()
        except OSError:
            cmdline = b""
        if str(jobdir).encode() in cmdline:
            try:
                os.kill(spid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    epid = _read_int(jobdir / "engine.pid")
    if epid:
        for pid in _pgrp_members(epid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    for pid in tagged_pids(f"{jobdir}/"):   # what left the group (setsid) keeps the job's tag
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def stop_jobs_under(runs: Path) -> list[int]:
    """Stop every job under the runs directory `runs` (a SIGSTOPped supervisor is resumed
    first, then killed with the rest) and SIGKILL whatever is still tagged with one of them.
    The pids that were still tagged: a test asserts there were none."""
    for pid_file in runs.glob("*/pid"):
        try:
            os.kill(int(pid_file.read_text()), signal.SIGCONT)
        except (ValueError, ProcessLookupError, OSError):
            pass
    for job in runs.glob("*"):
        cleanup_job(job)
    left = tagged_pids(f"{runs}/", prefix=True)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return left


def tagged_pids(value: str, prefix: bool = False) -> list[int]:
    """Live processes whose environment holds ORCH_JOB=VALUE (any value starting with VALUE
    when `prefix`): the tag the agent gives every process of a job (docs/agent-protocol.md)."""
    want = f"ORCH_JOB={value}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(item == want or (prefix and item.startswith(want)) for item in environ) \
                and alive(int(entry)):
            found.append(int(entry))
    return found


def alive(pid: int) -> bool:
    """Exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")
