"""Live sessions (docs/sessions.md, "Live sessions"): a matrix `session:` of 3 turns with a 5 s
idle before the third, run by `orch run` with moe-probe --session on `local`, over the real
sshd and on the emulated phone (mksh + toybox): the stored turns, the samples of the idle gap
with their turn, the third turn's re-warm; a cancel at a deadline and a fatal BMOE_ERROR, each
with nothing left running. The 5 s idle is real time: one such run per transport."""
from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path

import pytest
from agent_helpers import stop_jobs_under
from cli_helpers import adb_device, orch, ssh_device

from orchestrator.db.runs import Runs
from orchestrator.db.store import Store

pytestmark = pytest.mark.timeout(240)

# moe-probe's geometry of matrices/session.yaml: a 16 MiB expert file, a cache that holds it,
# an idle gap of 5 s evicting 1 - e^-1 of it (--idle-evict-tau 5)
GEOMETRY = ("--io pread --cache-mb 16 --io-threads 2 --layers 4 --experts 64 "
            "--expert-mb 0.0625 --top-k 4 --compute-kb 1 --idle-evict-tau 5")


def matrix(ws: Path, turns: str, flags: str = GEOMETRY, python: str | None = None) -> Path:
    path = ws / "s.yaml"
    options = f"engine_options: {{python: {python}}}\n" if python else ""
    path.write_text(textwrap.dedent(f"""\
        name: live-session
        engine: moe-probe
        tokens: 24
        cooldown: 0s
        timeout: 120s
        sample_interval: 0.25s
        configs:
          probe: {flags}
        """) + options + "session:\n" + textwrap.indent(textwrap.dedent(turns), "  "))
    return path


THREE_TURNS = """\
    - prompt: "explain how experts stream from flash"
    - prompt: "and the cache"
    - prompt: "and after an idle gap"
      idle: 5s
    """


def the_run(ws: Path):
    store = Store.open(str(ws / "orch.db"))
    (run,) = Runs(store).current()
    return store, run


def check_three_turns(ws: Path) -> None:
    """What the acceptance asks of the 3-turn session, on any transport."""
    store, run = the_run(ws)
    assert run.status == "ok", (run.status, run.cause)
    turns = run.record.turns
    assert [t.turn for t in turns] == [1, 2, 3]
    assert all(t.prompt_tokens and t.context_tokens and t.tokens == 24 for t in turns)
    assert [t.clear_kv for t in turns] == [True, False, False]
    assert [t.idle_before_s for t in turns] == [0.0, 0.0, 5.0]
    assert turns[1].context_tokens < turns[2].context_tokens   # the chat went on
    # the third turn re-warms: the idle gap evicted part of the warm cache
    assert turns[2].cache_hit_pct < turns[1].cache_hit_pct
    # the gap is at least the 5 s asked, measured on the device (T lines)
    assert turns[2].started_ms - turns[1].ended_ms >= 5000
    samples = store.frame("sample", [run.id])
    gap = samples[(samples.t_ms > turns[1].ended_ms) & (samples.t_ms < turns[2].started_ms)]
    assert len(gap) >= 5 and set(gap.turn) == {2}          # sampled through the idle gap
    assert gap.rss_kb.notna().all() and gap.mem_avail_kb.notna().all()
    assert set(samples.turn.dropna().astype(int)) == {1, 2, 3}
    tokens = store.frame("token", [run.id])
    assert tokens.groupby("turn").size().to_dict() == {1: 24, 2: 24, 3: 24}
    sent = [r.get("prompt") for r in run.record.extra["session"]]
    assert sent == ["explain how experts stream from flash", "and the cache",
                    "and after an idle gap"]
    # ... and the per-turn table shows it (orch table's Turns, as json)
    code, out = orch("table", "--db", str(ws / "orch.db"), "--tables", "turns",
                     "--format", "json")
    assert code == 0, out
    rows = {row["turn"]: row for row in json.loads(out)}
    assert [rows[n]["kind"] for n in (1, 2, 3)] == ["first", "warm", "after idle"]
    assert rows[3]["idle_before_s"] == 5.0
    assert rows[3]["cache_hit_pct"] < rows[2]["cache_hit_pct"]


def nothing_left(runs_dir: Path) -> None:
    assert stop_jobs_under(runs_dir) == []
    for pid_file in runs_dir.glob("*/engine.pid"):
        pid = int(pid_file.read_text())
        assert not Path(f"/proc/{pid}").exists() or \
            Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"


@pytest.fixture
def ws(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ORCH_DB", raising=False)
    return tmp_path


def local_runs() -> Path:
    return Path(os.environ["XDG_CACHE_HOME"]) / "orch" / "devices" / "local" / "runs"


def test_three_turns_on_local(ws):
    code, out = orch("run", str(matrix(ws, THREE_TURNS)))
    assert code == 0, out
    check_three_turns(ws)
    nothing_left(local_runs())


def test_three_turns_over_ssh(ws, sshd):
    (ws / "devices.yaml").write_text("devices:\n" + ssh_device("ssh-test", sshd, f"{ws}/remote"))
    code, out = orch("run", str(matrix(ws, THREE_TURNS)), "--device", "ssh-test")
    assert code == 0, out
    check_three_turns(ws)
    nothing_left(ws / "remote" / "runs")


def test_three_turns_on_the_emulated_phone(ws, phone):
    """mksh + toybox feed the engine's stdin; moe-probe runs on the host's python (a stock
    phone has none: its path is given as engine_options.python)."""
    (ws / "devices.yaml").write_text("devices:\n" + adb_device("emu", phone))
    code, out = orch("run", str(matrix(ws, THREE_TURNS, python=sys.executable)),
                     "--device", "emu")
    assert code == 0, out
    check_three_turns(ws)
    nothing_left(Path(phone.data_dir) / "orch" / "runs")


def test_cancel_at_a_deadline_is_recorded_not_a_failure(ws):
    """Turn 2 asks for far more tokens than its deadline lets it make: orch cancels it, the
    engine ends it with a cancelled BMOE_DONE, turn 3 runs, the run is ok."""
    turns = """\
        - prompt: "first"
        - prompt: "a long answer please"
          n_predict: 4000
          deadline: 0.3s
        - prompt: "third"
        """
    # --compute-kb 256: about 60 tok/s, so turn 2 would run for a minute without its cancel
    code, out = orch("run", str(matrix(ws, turns, flags=GEOMETRY + " --compute-kb 256")))
    assert code == 0, out
    store, run = the_run(ws)
    assert run.status == "ok", (run.status, run.cause)
    one, two, three = run.record.turns
    assert two.cancelled is True and 0 < two.tokens < 4000
    assert not one.cancelled and not three.cancelled and three.tokens == 24
    events = [line.split("\t")[2] for line in Runs(store).output_lines(run.id, "T")]
    assert events == ["sent", "done", "sent", "cancel", "done", "sent", "done", "close"]
    nothing_left(local_runs())


def test_fatal_error_fails_the_run_with_its_message(ws):
    """moe-probe's --fail-at-turn 2 ends the session with a fatal BMOE_ERROR halfway through
    turn 2: the run fails with that message, turn 3 is never sent, nothing runs on."""
    code, out = orch("run", str(matrix(ws, THREE_TURNS.replace("idle: 5s", "idle: 0s"),
                                       flags=GEOMETRY + " --fail-at-turn 2")))
    store, run = the_run(ws)
    assert run.status == "failed"
    assert "fatal BMOE_ERROR in turn 2" in run.cause and "--fail-at-turn" in run.cause
    assert [t.turn for t in run.record.turns] == [1, 2]
    assert run.record.turns[1].error
    nothing_left(local_runs())


def test_timeout_mid_session_leaves_nothing_running(ws):
    """The cell timeout covers the whole session: it stops the engine in the middle of a
    turn, the run is `timeout`, its finished turns are kept and nothing runs on."""
    turns = """\
        - prompt: "first"
        - prompt: "a long answer please"
          n_predict: 1000000
        """
    # The timeout is long enough for turn 1's 24 tokens on a busy CI machine (1.5 s was not),
    # and turn 2 is far longer than it: the timeout falls in turn 2 whatever the load.
    path = matrix(ws, turns, flags=GEOMETRY + " --compute-kb 64 --ctx-size 2000000")
    path.write_text(path.read_text().replace("timeout: 120s", "timeout: 8s"))
    orch("run", str(path))
    store, run = the_run(ws)
    assert run.status == "timeout", (run.status, run.cause)
    first = run.record.turns[0]
    assert first.turn == 1 and first.tokens == 24 and first.ended_ms is not None
    assert len(run.record.turns) == 1 or run.record.turns[1].extra.get("incomplete")
    nothing_left(local_runs())


@pytest.mark.slow
def test_link_lost_in_the_idle_gap_resends_nothing(ws, sshd):
    """The SSH link drops while the session waits out its idle gap: orch reconnects and
    re-attaches from the last stored line; the agent on the device sent each request once,
    and the stored turns, T lines and samples are those of an undisturbed run."""
    import threading

    from waiting import wait_until

    (ws / "devices.yaml").write_text("devices:\n" + ssh_device("ssh-test", sshd, f"{ws}/remote"))

    def in_the_gap() -> bool:   # turn 2's T done is in the device's spool
        spools = list((ws / "remote").glob("runs/*/spool"))
        return bool(spools) and any(line.startswith("T\t2\t") and line.endswith("\tdone")
                                    for line in spools[0].read_text().splitlines())

    def cut() -> None:
        assert wait_until(in_the_gap, 60, 0.05), "turn 2 never ended"
        sshd.kill_connections()

    killer = threading.Thread(target=cut)
    killer.start()
    code, out = orch("run", str(matrix(ws, THREE_TURNS)), "--device", "ssh-test",
                     "--link-grace", "60")
    killer.join()
    assert code == 0, out
    assert "link to ssh-test lost" in out
    check_three_turns(ws)
    store, run = the_run(ws)
    events = [line.split("\t")[2] for line in Runs(store).output_lines(run.id, "T")]
    assert events == ["sent", "done"] * 3 + ["close"]
    (stdout,) = list((ws / "remote").glob("runs/*/stdout"))
    assert stdout.read_text().count("BMOE_BEGIN") == 3
    nothing_left(ws / "remote" / "runs")


def test_ctrl_c_in_the_idle_gap_stops_the_session(ws):
    """Ctrl-C while the session waits out its idle gap: orch stops the engine (the agent's
    kill: its group and every tagged process), the run is `interrupted`, nothing runs on."""
    import signal
    import subprocess

    from waiting import wait_until

    runs_dir = local_runs()
    earlier = set(runs_dir.glob("*/spool"))   # an earlier test's jobs on this worker's `local`

    def in_the_gap() -> bool:   # turn 2's T done is in this run's spool
        return any(line.startswith("T\t2\t") and line.endswith("\tdone")
                   for spool in set(runs_dir.glob("*/spool")) - earlier
                   for line in spool.read_text().splitlines())

    proc = subprocess.Popen([sys.executable, "-m", "orchestrator.entry", "run",
                             str(matrix(ws, THREE_TURNS))], cwd=ws, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True,
                            # SIGINT as a terminal leaves it: a suite started in the
                            # background hands its children an ignored one, which orch keeps
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        assert wait_until(in_the_gap, 90, 0.05), "turn 2 never ended"
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, out
    store, run = the_run(ws)
    assert run.status == "interrupted"
    nothing_left(runs_dir)


def test_resume_reruns_a_session_whose_turns_changed(ws):
    """`--resume` keeps a session run whose requests are those of the matrix, and runs the
    cell again (superseding it) once a turn changed, as after a change of flags."""
    turns = """\
        - prompt: "one"
        - prompt: "two"
        """
    path = matrix(ws, turns)
    code, out = orch("run", str(path))
    assert code == 0, out
    code, out = orch("run", str(path), "--resume")
    assert code == 0, out
    store = Store.open(str(ws / "orch.db"))
    assert len(Runs(store).current(include_superseded=True)) == 1
    path.write_text(path.read_text().replace('"two"', '"two, edited"'))
    code, out = orch("run", str(path), "--resume")
    assert code == 0, out
    runs = Runs(store).current(include_superseded=True)
    assert len(runs) == 2
    (current,) = Runs(store).current()
    assert [r["prompt"] for r in current.record.extra["session"]] == ["one", "two, edited"]


@pytest.mark.slow
def test_cancel_and_fatal_on_the_emulated_phone(ws, phone):
    """Under mksh + toybox: a cancel at a deadline, then a fatal error in the next turn; the
    run fails with the engine's message and nothing of it runs on."""
    (ws / "devices.yaml").write_text("devices:\n" + adb_device("emu", phone))
    turns = """\
        - prompt: "a long answer please"
          n_predict: 4000
          deadline: 0.3s
        - prompt: "then"
        - prompt: "never sent"
        """
    path = matrix(ws, turns, flags=GEOMETRY + " --compute-kb 256 --fail-at-turn 2",
                  python=sys.executable)
    orch("run", str(path), "--device", "emu")
    store, run = the_run(ws)
    assert run.status == "failed" and "fatal BMOE_ERROR in turn 2" in run.cause, run.cause
    one, two = run.record.turns
    assert one.cancelled is True and two.error
    events = [line.split("\t")[2] for line in Runs(store).output_lines(run.id, "T")]
    assert events == ["sent", "cancel", "done", "sent", "fatal"]
    nothing_left(Path(phone.data_dir) / "orch" / "runs")
