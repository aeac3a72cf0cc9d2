"""The agent's session feeder (docs/agent-protocol.md, "Sessions") under mksh + a toybox-only
PATH, dash and bash: a session's requests reach the engine's stdin one at a time, each after
the previous turn's BMOE_DONE (or non-fatal BMOE_ERROR) plus its idle time; `cancel` at a
turn's deadline; `close` and EOF after the last; T lines mark each step; the sampling loop
goes on through the idle gaps and forks nothing more. The engine here is a shell script that
speaks bmoe-cli's session protocol (docs: /reference §8), so every shell runs it."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from agent_helpers import alive, cleanup_job, parse_lines, run_job, write_job

pytestmark = pytest.mark.timeout(120)

# A session engine in POSIX sh: every request is echoed as REQ <line> on stderr; a prompt
# "slow" waits for the next line (the cancel) before its BMOE_DONE; "bad" is a recoverable
# error; "fatal" a fatal one (and the engine exits 1); close or EOF ends it.
ENGINE = r"""
echo 'BMOE_READY {"load_s":0.01}'
n=0
while IFS= read -r l; do
  echo "REQ $l" >&2
  case $l in
    *'"cmd":"close"'*) echo CLOSED; exit 0 ;;
    *'"prompt":"fatal"'*) echo 'BMOE_ERROR {"id":9,"fatal":true,"msg":"model file vanished"}'; exit 1 ;;
    *'"prompt":"bad"'*) echo 'BMOE_ERROR {"id":8,"fatal":false,"msg":"empty prompt"}' ;;
    *'"prompt":"slow"'*)
      n=$((n + 1)); echo "BMOE_BEGIN {\"id\":$n}"
      IFS= read -r c; echo "REQ $c" >&2
      echo "BMOE_DONE {\"id\":$n,\"cancelled\":true,\"tokens\":1}" ;;
    *'"prompt":"glued"'*)   # the answer streamed without a newline, the DONE after it
      n=$((n + 1)); echo "BMOE_BEGIN {\"id\":$n}"; printf '%s' "an answer "
      echo "BMOE_DONE {\"id\":$n,\"cancelled\":false,\"tokens\":2}" ;;
    *'"cmd":"generate"'*)
      n=$((n + 1)); echo "BMOE_BEGIN {\"id\":$n}"; sleep 0.1
      echo "BMOE_DONE {\"id\":$n,\"cancelled\":false,\"tokens\":4}" ;;
  esac
done
echo EOF
"""


def request(turn: int, prompt: str, idle_ms: int = 0, deadline_ms: int = 0) -> str:
    body = json.dumps({"cmd": "generate", "id": turn, "prompt": prompt, "n_predict": 4,
                       "clear_kv": turn == 1}, separators=(",", ":"))
    return f"{idle_ms}\t{deadline_ms}\t{body}"


def run_session(shell, job: Path, requests: list[str], interval_ms: int = 100):
    (job / "engine.sh").write_text(ENGINE)
    (job / "session").write_text("".join(f"{r}\n" for r in requests))
    try:
        return run_job(shell, job, ["sh", str(job / "engine.sh")],
                       meta={"session": "session", "interval_ms": interval_ms,
                             "timeout_s": 60})
    finally:
        cleanup_job(job)


def turn_events(res) -> list[tuple[int, int, str]]:
    return [(int(t[0]), int(t[1]), t[2]) for t in res.tagged("T")]


def test_session_feeds_turns_with_idle(shell, tmp_path):
    job = tmp_path / "job"
    job.mkdir()
    res = run_session(shell, job, [request(1, "hello"), request(2, "glued"),
                                   request(3, "again", idle_ms=600)])
    assert res.attach_rc == 0 and res.x[:2] == ["0", "0"], res.raw
    events = turn_events(res)
    assert [(turn, ev) for turn, _, ev in events] == [
        (1, "sent"), (1, "done"), (2, "sent"), (2, "done"), (3, "sent"), (3, "done"),
        (3, "close")]
    times = {(turn, ev): t for turn, t, ev in events}
    assert times[(3, "sent")] - times[(2, "done")] >= 600
    # the engine read each request once, in order, then close, then ended itself
    reqs = [e[4:] for e in res.payloads("E") if e.startswith("REQ ")]
    assert [json.loads(r)["prompt"] for r in reqs[:3]] == ["hello", "glued", "again"]
    assert 'an answer BMOE_DONE {"id":2,"cancelled":false,"tokens":2}' in res.payloads("O")
    assert reqs[3] == '{"cmd":"close"}' and "CLOSED" in res.payloads("O")
    # sampled through the gap, each sample after its turn's T sent line
    order = [line[0] for line in res.lines]
    sent3 = next(i for i, line in enumerate(res.lines) if line[:1] == ["T"]
                 and line[1] == "3" and line[3] == "sent")
    done2 = next(i for i, line in enumerate(res.lines) if line[:1] == ["T"]
                 and line[1] == "2" and line[3] == "done")
    assert order[done2:sent3].count("S") >= 3
    assert (job / "session.pos").read_text().split() == ["3", "close"]


def test_session_cancel_error_and_fatal(shell, tmp_path):
    job = tmp_path / "job"
    job.mkdir()
    res = run_session(shell, job, [request(1, "bad"), request(2, "slow", deadline_ms=300),
                                   request(3, "fatal"), request(4, "never")])
    events = [(turn, ev) for turn, _, ev in turn_events(res)]
    assert events == [(1, "sent"), (1, "error"), (2, "sent"), (2, "cancel"), (2, "done"),
                      (3, "sent"), (3, "fatal")], res.raw
    reqs = [e[4:] for e in res.payloads("E") if e.startswith("REQ ")]
    assert '{"cmd":"cancel"}' in reqs and not any("never" in r for r in reqs)
    assert res.x[0] == "1"   # the engine's own exit after its fatal error
    assert not alive(int((job / "engine.pid").read_text()))


@pytest.mark.slow
def test_session_engine_that_ignores_close_is_stopped(shell, tmp_path):
    """An engine that neither answers nor ends is stopped 10 s after its input was closed
    (here: a cancel nobody answers), with a W line; nothing of it is left."""
    job = tmp_path / "job"
    job.mkdir()
    (job / "session").write_text(request(1, "x", deadline_ms=100) + "\n")
    write_job(job, ["sh", "-c", "exec sleep 60"],
              {"session": "session", "interval_ms": 200, "run": job.name})
    try:
        from agent_helpers import attach, start_job
        start_job(shell, job)
        rc, out = attach(shell, job, 0, timeout=60)
    finally:
        cleanup_job(job)
    lines = parse_lines(out)
    assert rc == 0
    assert [line[3] for line in lines if line[0] == "T"] == ["sent", "cancel"]
    assert any("did not end 10 s after turn 1's cancel" in "\t".join(line) for line in lines)
    assert lines[-1][0] == "X" and lines[-1][2] in ("15", "9")


def test_session_loop_forks_only_sleep(shell, tmp_path):
    """The feeder adds one `mkfifo` per job and nothing to the loop: every external command
    the agent runs is logged (the engine's own `sleep`s, one per turn, too)."""
    import os
    import shutil

    from agent_helpers import attach, start_job

    wrapped = tmp_path / "wrapped"
    wrapped.mkdir()
    log = tmp_path / "exec.log"
    real_path = shell.environ()["PATH"]
    for tool in ("sleep", "cat", "date", "setsid", "readlink", "mv", "sed", "grep", "head",
                 "tail", "cut", "wc", "od", "printf", "echo", "test", "kill", "mkfifo", "rm"):
        real = shutil.which(tool, path=real_path) or "/nonexistent"
        script = wrapped / tool
        script.write_text(f'#!/bin/sh\necho {tool} >> "{log}"\nexec "{real}" "$@"\n')
        script.chmod(0o755)
    job = tmp_path / "job"
    job.mkdir()
    (job / "engine.sh").write_text(ENGINE)
    (job / "session").write_text("".join(f"{r}\n" for r in [
        request(1, "a"), request(2, "b", idle_ms=500), request(3, "c", idle_ms=500)]))
    write_job(job, ["sh", str(job / "engine.sh")],
              {"session": "session", "interval_ms": 50, "run": job.name})
    try:
        start_job(shell, job, extra_env={"PATH": f"{wrapped}{os.pathsep}{real_path}"})
        rc, out = attach(shell, job, 0, timeout=60)
    finally:
        cleanup_job(job)
    assert rc == 0
    lines = parse_lines(out)
    assert [line[3] for line in lines if line[0] == "T"] == \
        ["sent", "done"] * 3 + ["close"]
    names = log.read_text().split()
    samples = sum(1 for line in lines if line[0] == "S")
    others = [n for n in names if n != "sleep"]
    assert set(others) <= {"readlink", "setsid", "date", "cat", "mv", "tail", "grep", "mkfifo",
                           "rm"}, others
    assert others.count("mkfifo") == 1 and others.count("rm") <= 1, others
    assert samples >= 15 and names.count("sleep") <= samples + 2 + 3   # + the engine's 3
