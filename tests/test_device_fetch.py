"""Every file orch reads from a device comes through one fetch (transports/fetch.py,
docs/reliability.md "Files fetched from a device are checked and bounded"): checked on the
device first (a regular file once links are followed; no FIFO, no device), within its kind's
bound, streamed with that bound and a timeout. On the local device, a real sshd and the
emulated phone (whose shell is mksh with a toybox-only PATH): the path and the commands
differ per transport. Every call runs under an alarm (bounded): a hang fails the test instead
of the suite."""
from __future__ import annotations

import os
import shutil
import signal
import textwrap
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import waiting
from device_targets import KINDS, Target, device_target

from orchestrator.transports.base import CommandTimedOut, RemoteFileNotFound, Transport
from orchestrator.transports.fetch import (
    ROUTE_TRACE,
    SPOOL_LINE,
    FetchRefused,
    FileKind,
    bounded_output,
    fetch_file,
)
from orchestrator.transports.local import LocalTransport

pytestmark = pytest.mark.timeout(120)
BOUND_S = 30.0    # far above what a refusal takes; never what a test checks
TINY = FileKind("test file", 1000, "a bound a test can exceed")


class Hung(BaseException):
    """The alarm rang: the fetch did not return."""


def bounded(call: Callable[[], object]) -> object:
    def ring(_signum: int, _frame: object) -> None:
        raise Hung(f"the fetch still ran after {BOUND_S:g} s")
    previous = signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, BOUND_S)
    try:
        return call()
    except Hung as exc:
        pytest.fail(str(exc))
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture(params=["local", "ssh", "adb"])
def device(request, tmp_path) -> Iterator[tuple[Transport, Path]]:
    """(a connected transport, a directory it and this test both see as the same path)."""
    if request.param == "local":
        transport: Transport = LocalTransport("local", str(tmp_path / "dev"))
        where = tmp_path / "files"
    elif request.param == "ssh":
        from orchestrator.transports.ssh import SshTransport
        sshd = request.getfixturevalue("sshd")
        transport = SshTransport("dev1", **{**sshd.transport_kwargs(),
                                            "workdir": str(sshd.dir / f"wd-{uuid.uuid4().hex[:8]}")})
        where = sshd.dir / f"files-{uuid.uuid4().hex[:8]}"
    else:
        from orchestrator.transports.adb import AdbTransport
        phone = request.getfixturevalue("phone")
        transport = AdbTransport("emu", serial=phone.serial, adb_port=phone.adb_port,
                                 workdir=f"{phone.data_dir}/orch")
        where = Path(phone.data_dir) / "files"
    where.mkdir(parents=True)
    transport.connect()
    try:
        yield transport, where
    finally:
        transport.close()


def test_a_regular_file_is_fetched_whole(device):
    transport, where = device
    data = bytes(range(256)) * 3 + b"\n\r\n\0end"
    (where / "trace.csv").write_bytes(data)
    assert bounded(lambda: fetch_file(transport, str(where / "trace.csv"), TINY)) == data
    (where / "link").symlink_to(where / "trace.csv")   # a link to a regular file is fine
    assert bounded(lambda: fetch_file(transport, str(where / "link"), TINY)) == data


@pytest.mark.parametrize("kind", ["zero", "fifo", "dir"])
def test_a_special_file_is_refused_at_once(device, kind):
    """A link to /dev/zero, a FIFO nobody writes, a directory: refused with what it is, never
    opened (a FIFO would block the read for ever, /dev/zero never ends)."""
    transport, where = device
    path = where / f"route-{kind}.csv"
    if kind == "zero":
        path.symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        path.mkdir()
    with pytest.raises(FetchRefused) as refused:
        bounded(lambda: fetch_file(transport, str(path), ROUTE_TRACE))
    message = str(refused.value)
    assert "is not a regular file" in message and str(path) in message, message
    assert {"zero": "character", "fifo": "fifo", "dir": "directory"}[kind] in message.lower()
    assert "\n" not in message


def test_a_file_over_its_bound_is_refused(device):
    transport, where = device
    (where / "big").write_bytes(b"x" * (TINY.max_bytes + 1))
    with pytest.raises(FetchRefused) as refused:
        bounded(lambda: fetch_file(transport, str(where / "big"), TINY))
    assert f"is {TINY.max_bytes + 1} bytes, over the test file bound" in str(refused.value)
    (where / "fits").write_bytes(b"x" * TINY.max_bytes)
    assert len(bounded(lambda: fetch_file(transport, str(where / "fits"), TINY))) == \
        TINY.max_bytes


def test_nothing_there_is_not_found(device):
    transport, where = device
    (where / "dangling").symlink_to(where / "gone")
    for name in ("missing", "dangling"):
        with pytest.raises(RemoteFileNotFound):
            bounded(lambda: fetch_file(transport, str(where / name), TINY))


def test_a_file_larger_than_its_stat_says_is_cut_at_its_bound(tmp_path):
    """The read itself is bounded too: a device whose `stat` answers a small size (a file that
    grew after the check, a lying tool) still sends no more than the bound plus one byte, and
    the fetch is refused."""
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    (stubs / "stat").write_text("#!/bin/sh\necho 10\n")
    (stubs / "stat").chmod(0o755)
    transport = LocalTransport("local", str(tmp_path / "dev"),
                               env={"PATH": f"{stubs}:{os.environ['PATH']}"})
    transport.connect()
    path = tmp_path / "big"
    path.write_bytes(b"y" * (TINY.max_bytes * 50))
    with pytest.raises(FetchRefused) as refused:
        bounded(lambda: fetch_file(transport, str(path), TINY))
    assert "is more, over the test file bound" in str(refused.value)


def test_a_read_that_hangs_times_out_and_leaves_nothing(tmp_path):
    """A read that never ends (a FIFO swapped in after the check; here a `head` that never
    returns) ends at the fetch's timeout with one line, and the device command is gone."""
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    marker = f"3000.{uuid.uuid4().int % 10**9:09d}"   # a sleep no other process runs
    (stubs / "head").write_text(f"#!/bin/sh\nsleep {marker}\n")
    (stubs / "head").chmod(0o755)
    transport = LocalTransport("local", str(tmp_path / "dev"),
                               env={"PATH": f"{stubs}:{os.environ['PATH']}"})
    transport.connect()
    (tmp_path / "f").write_bytes(b"data")
    with pytest.raises(CommandTimedOut) as late:
        bounded(lambda: fetch_file(transport, str(tmp_path / "f"), TINY, timeout=1.0))
    assert "did not finish within 1 s" in str(late.value)
    assert waiting.wait_until(lambda: not _running(marker), 10), \
        "the device command outlived its fetch"


def _running(marker: str) -> bool:
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and marker.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                return True
        except OSError:
            continue
    return False


# -- orch run ----------------------------------------------------------------------------------

TRACING_ENGINE = """\
#!{sh}
# fake_bmoe, whose route trace is a link to /dev/zero (--zero-trace) or a FIFO (--fifo-trace)
trace=""; special=""; prev=""
for a in "$@"; do
  [ "$prev" = --route-trace ] && trace=$a
  case $a in --zero-trace|--fifo-trace) special=$a ;; esac
  prev=$a
done
case $special in
  --zero-trace) ln -s /dev/zero "$trace" ;;
  --fifo-trace) mkfifo "$trace" ;;
esac
exec sh {fake} "$@"
"""


@pytest.fixture(params=KINDS)
def target(request, workspace) -> Target:
    return device_target(request, workspace)


def test_orch_run_a_special_route_trace_costs_a_warning_not_the_run(workspace, target):
    """A traced cell whose trace is a link to /dev/zero or a FIFO: `orch run` neither reads
    it until MemoryError nor blocks on it; the run keeps its tokens with one warning naming
    what the file is, the next cell runs, and nothing is left running."""
    from agent_helpers import stop_jobs_under
    from cli_helpers import orch

    from orchestrator.db.runs import Runs
    from orchestrator.db.store import Store
    from orchestrator.record import load_record

    fake = Path(__file__).resolve().parent / "engines" / "fake_bmoe.sh"
    (workspace / "tracing_bmoe.sh").write_text(TRACING_ENGINE.replace("{fake}", str(fake))
                                               .replace("{sh}", target.sh))
    (workspace / "m.yaml").write_text(textwrap.dedent("""\
        name: special-traces
        engine: bmoe
        binary: {local: tracing_bmoe.sh}
        models: {m: /m.gguf}
        prompt: p
        tokens: 4
        cooldown: 0
        sample_interval: 0.2s
        route_trace: true
        configs:
          zero: --delay 0.001 --zero-trace
          fifo: --delay 0.001 --fifo-trace
          after: --delay 0.001
        """))
    try:
        code, out = bounded(lambda: orch("run", "m.yaml", "--device", target.device))
        store = Store.open("orch.db")
        runs = {r.config: r for r in Runs(store).current()}
        assert code == 0, out
        assert set(runs) == {"zero", "fifo", "after"}, out
        for config, what in (("zero", "character"), ("fifo", "fifo")):
            run = runs[config]
            assert run.status == "ok" and load_record(run.summary).tokens == 4, out
            said = [w for w in run.warnings or [] if w.startswith("route trace:")]
            assert len(said) == 1 and "is not a regular file" in said[0] and \
                what in said[0].lower(), run.warnings
        assert runs["after"].status == "ok"
        assert not [r for r in runs.values() if r.status == "running"]
    finally:
        left = stop_jobs_under(target.runs) if target.runs.exists() else []
    assert not left, f"processes of the test's runs survived: {left}"


def test_a_spool_line_is_held_to_its_bound():
    """The spool is streamed, not fetched: only a line is held, and a line without end (an
    engine printing no newline) is cut at SPOOL_LINE's bound yet counts as one line; the
    bound is import's (orchestrator/line_bound.py), one owner for both."""
    from orchestrator.engines.bmoe_format import MAX_LINE
    from orchestrator.line_bound import CUT
    from orchestrator.run.stream import LineSplitter

    assert SPOOL_LINE.max_bytes == MAX_LINE == LineSplitter()._max == 65536  # noqa: SLF001

    splitter = LineSplitter(max_line=100)
    out = list(splitter.feed(b"O\tshort\nO\t" + b"z" * 60))
    for _ in range(1000):                      # 60 kB more of the same line, no newline
        out += splitter.feed(b"z" * 60)
        assert len(splitter._pending) <= 100   # noqa: SLF001 - what memory holds
    out += splitter.feed(b"zz\nX\t0\t0\t5\n")
    assert out == ["O\tshort", "O\t" + "z" * 98 + CUT, "X\t0\t0\t5"]


def test_a_command_read_whole_is_bounded_too(device):
    """What orch reads whole from a command (the agent's facts, which quote device files) is
    bounded like a fetched file: an endless output is refused at its bound, and the command's
    own exit status and stderr come through."""
    transport, _ = device
    result = bounded(lambda: bounded_output(transport, ["sh", "-c", "echo hi; echo oops >&2; "
                                                        "exit 7"], TINY, timeout=30))
    assert (result.rc, result.stdout) == (7, b"hi\n") and b"oops" in result.stderr
    with pytest.raises(FetchRefused) as refused:
        bounded(lambda: bounded_output(transport, ["sh", "-c", "while :; do echo x; done"],
                                       TINY, timeout=30))
    assert "over its bound" in str(refused.value)


def test_ctrl_c_during_a_hung_fetch_leaves_nothing_running(workspace):
    """A route trace fetch that hangs (here the device's `head` never returns): Ctrl-C ends
    `orch run` with its interrupt code, the run is not left `running`, and the device command
    is gone."""
    import subprocess
    import sys

    from sqlalchemy import select

    from orchestrator.db import schema
    from orchestrator.db.store import Store

    stubs = workspace / "stubs"
    stubs.mkdir()
    marker = f"3000.{uuid.uuid4().int % 10**9:09d}"
    real_head = shutil.which("head")
    (stubs / "head").write_text(f'#!/bin/sh\ncase "$*" in *route.csv*) sleep {marker} ;;\n'
                                f'  *) exec {real_head} "$@" ;; esac\n')   # the trace's fetch only
    (stubs / "head").chmod(0o755)
    (workspace / "devices.yaml").write_text(textwrap.dedent(f"""\
        devices:
          local:
            kind: local
            workdir: {workspace}/dev-local
            env: {{PATH: "{stubs}:{os.environ['PATH']}"}}
        """))
    fake = Path(__file__).resolve().parent / "engines" / "fake_bmoe.sh"
    (workspace / "tracing_bmoe.sh").write_text(
        f'#!/bin/sh\nprev=""\nfor a in "$@"; do [ "$prev" = --route-trace ] && '
        f'echo x > "$a"; prev=$a; done\nexec sh {fake} "$@"\n')
    (workspace / "m.yaml").write_text(textwrap.dedent("""\
        name: hung-fetch
        engine: bmoe
        binary: {local: tracing_bmoe.sh}
        models: {m: /m.gguf}
        prompt: p
        tokens: 4
        cooldown: 0
        route_trace: true
        configs:
          a: --delay 0.001
        """))
    env = {k: v for k, v in os.environ.items() if k != "ORCH_DB"}
    proc = subprocess.Popen([str(Path(sys.executable).parent / "orch"), "run", "m.yaml",
                             "--device", "local"], cwd=workspace, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        assert waiting.wait_until(lambda: _running(marker), 60), "the fetch never started"
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, out
    assert waiting.wait_until(lambda: not _running(marker), 10), "the fetch outlived orch"
    (run,) = Store.open(str(workspace / "orch.db")).fetch(select(schema.run))
    assert run.status == "interrupted", (run.status, out)
