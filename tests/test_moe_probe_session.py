"""moe-probe --session (agent/moe_probe.py): bmoe-cli's session protocol (docs/formats.md,
"Session mode") spoken by a real subprocess fed JSON requests on stdin, and what the bmoe
run parser makes of its lines: turns, the warm cache and its idle eviction, KV reuse, cancel,
rejected requests, a fatal error, the CSV's turn column.

No test sleeps for the idle gap: a request's `simulate_idle_s` adds idle time, and a large
--idle-evict-tau keeps the real gaps between requests (milliseconds) from evicting anything,
so the hit rates are the routing's alone and the same on every run.
"""
from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from orchestrator.engines.bmoe import BmoeRunParser
from orchestrator.engines.bmoe_session import turns_from_lines

PROBE = Path(__file__).resolve().parents[1] / "agent" / "moe_probe.py"
# 4 layers x 64 experts x 64 KiB = 16 MiB; a 16 MiB cache holds every expert, so only the
# idle eviction ever drops one
GEOMETRY = ["--layers", "4", "--experts", "64", "--top-k", "4", "--expert-mb", "0.0625",
            "--compute-kb", "1", "--cache-mb", "16"]
TAU = "1000"            # real gaps evict nothing; simulate_idle_s=1000 evicts 1-1/e = 63%
WAIT = 30.0             # the bound of every wait: it only ends a broken test


class ProbeSession:
    """moe-probe --session as a subprocess: requests written to its stdin, its stdout lines
    collected by a reader thread (so a wait never blocks on a pipe)."""

    def __init__(self, tmp_path: Path, *flags: str, csv: bool = True) -> None:
        self.csv = tmp_path / "session.csv" if csv else None
        argv = [sys.executable, str(PROBE), "--session", "--cache-dir", str(tmp_path / "cache"),
                *GEOMETRY, "--idle-evict-tau", TAU, *flags]
        if self.csv:
            argv += ["--csv", str(self.csv)]
        self.stderr = (tmp_path / "stderr.txt").open("w")
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=self.stderr, text=True, bufsize=1)
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.p.stdout is not None
        for line in self.p.stdout:
            self.lines.append(line.rstrip("\n"))
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def send(self, **request: Any) -> None:
        assert self.p.stdin is not None
        self.p.stdin.write(json.dumps(request) + "\n")
        self.p.stdin.flush()

    def generate(self, rid: int, prompt: str, n: int = 24, **more: Any) -> None:
        self.send(cmd="generate", id=rid, prompt=prompt, n_predict=n, **more)

    def wait_for(self, tag: str) -> dict[str, Any]:
        """The next `BMOE_<tag>` line's object (other lines pass by)."""
        while True:
            line = self._queue.get(timeout=WAIT)
            assert line is not None, f"stdout ended before BMOE_{tag}: {self.lines[-5:]}"
            if line.startswith(f"BMOE_{tag} "):
                return json.loads(line.split(" ", 1)[1])

    def end(self, close: bool = True) -> int:
        """Close the session (a `close` request, else EOF), wait for the exit; its code."""
        assert self.p.stdin is not None
        if close:
            self.send(cmd="close")
        self.p.stdin.close()
        return self.wait_exit()

    def wait_exit(self) -> int:
        rc = self.p.wait(timeout=WAIT)
        self._reader.join(WAIT)
        self.stderr.close()
        return rc

    def stop(self) -> None:
        """However the test ended: nothing of the session survives it."""
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait(timeout=WAIT)
        if not self.stderr.closed:
            self.stderr.close()
        assert self.p.poll() is not None
        with pytest.raises(ProcessLookupError):
            os.kill(self.p.pid, 0)   # reaped: the pid is gone

    def record(self):
        """The bmoe run parser's record of what the session wrote (stdout and CSV)."""
        parser = BmoeRunParser()
        rows = []
        if self.csv and self.csv.exists():
            for line in self.csv.read_text().splitlines():
                rows += parser.feed("C", line)
        for line in self.lines:
            parser.feed("O", line)
        return parser, parser.record(), rows


@pytest.fixture
def session(tmp_path):
    made: list[ProbeSession] = []

    def start(*flags: str, csv: bool = True) -> ProbeSession:
        made.append(ProbeSession(tmp_path, *flags, csv=csv))
        return made[-1]
    yield start
    for s in made:
        s.stop()


def test_three_turns_warm_cache_idle_rewarm_and_kv_reuse(session):
    s = session()
    ready = s.wait_for("READY")
    assert ready["arch"] == "moe-probe" and ready["n_ctx"] == 4096 and ready["n_expert_used"] == 4
    assert ready["load_s"] >= 0 and ready["think_ctl"] == "template"
    s.generate(1, "explain how experts stream from flash")
    s.generate(2, "and the cache", clear_kv=False)
    s.generate(3, "and after an idle gap", clear_kv=False, simulate_idle_s=1000)
    assert s.end() == 0
    begins = [json.loads(x.split(" ", 1)[1]) for x in s.lines if x.startswith("BMOE_BEGIN ")]
    done = [json.loads(x.split(" ", 1)[1]) for x in s.lines if x.startswith("BMOE_DONE ")]
    assert [b["id"] for b in begins] == [d["id"] for d in done] == [1, 2, 3]
    one, two, three = done
    # the cache stays warm across turns; the idle gap evicts 1-exp(-1) of it and turn 3 re-warms
    assert two["cache_hit_pct"] > one["cache_hit_pct"]
    assert three["cache_hit_pct"] < two["cache_hit_pct"]
    assert three["read_mib"] > two["read_mib"]
    assert (one["evicted_pct"], two["evicted_pct"]) == (0.0, 0.0)
    assert 60 <= three["evicted_pct"] <= 66 and three["idle_s"] >= 1000
    # a new chat prefills its preamble and message; a continued one only the new message
    assert one["n_prompt"] == 6 + 6 and one["n_past"] == 12 + 24
    assert two["n_prompt"] == 3 + 2 < one["n_prompt"]
    assert two["n_past"] == one["n_past"] + two["n_prompt"] + 24
    assert three["n_past"] == two["n_past"] + three["n_prompt"] + 24
    for d in done:
        assert d["tokens"] == 24 and not d["cancelled"] and len(d["text"].split()) == 24
        assert d["tok_s"] > 0 and d["prefill_tps"] > 0 and d["load_s"] == ready["load_s"]
    # per token: a PROGRESS line, a LOAD line only when experts were read
    progress = [json.loads(x.split(" ", 1)[1]) for x in s.lines if x.startswith("BMOE_PROGRESS ")]
    assert [p["step"] for p in progress] == list(range(1, 25)) * 3
    assert "".join(p["delta_text"] for p in progress[:24]) == one["text"]
    loads = [x for x in s.lines if x.startswith("BMOE_LOAD ")]
    assert len(loads) == sum(1 for p in progress if p["read_mb"] > 0)


def test_parser_builds_turns_from_the_stream(session):
    s = session()
    s.generate(7, "one two three four")
    s.generate(8, "five six", clear_kv=False)
    s.generate(9, "seven", clear_kv=True, simulate_idle_s=2000)
    assert s.end(close=False) == 0          # EOF ends the session once the queue is served
    parser, record, rows = s.record()
    done = [json.loads(x.split(" ", 1)[1]) for x in s.lines if x.startswith("BMOE_DONE ")]
    turns = record.turns
    assert [t.turn for t in turns] == [1, 2, 3] and [t.request_id for t in turns] == [7, 8, 9]
    for t, d in zip(turns, done):
        assert (t.tokens, t.prompt_tokens, t.context_tokens) == (d["tokens"], d["n_prompt"],
                                                                  d["n_past"])
        assert (t.decode_tps, t.prefill_s, t.cache_hit_pct, t.read_mib) == (
            d["tok_s"], d["prefill_s"], d["cache_hit_pct"], d["read_mib"])
        assert t.compute_s_per_token == d["compute_s_tok"] and t.text == d["text"]
        assert t.cancelled is False and t.error is None
        assert t.extra["evicted_pct"] == d["evicted_pct"]   # keys without a field: extra
    assert turns[0].load_s == done[0]["load_s"] and turns[1].load_s is None
    assert turns[0].ttft_s == pytest.approx(done[0]["load_s"] + done[0]["prefill_s"])
    assert turns[1].ttft_s == done[1]["prefill_s"]
    assert turns[2].context_tokens == turns[2].prompt_tokens + 24   # clear_kv: n_past restarts
    # the run: every turn's tokens, the first turn's prompt, every trailer kept
    assert record.complete is True and record.errors == []
    assert record.tokens == 72 == len(rows)
    assert (record.prompt_tokens, record.prefill_s) == (turns[0].prompt_tokens,
                                                       turns[0].prefill_s)
    assert record.read_mib == pytest.approx(sum(d["read_mib"] for d in done))
    assert record.extra["trailer"] is None and len(record.extra["trailers"]) == 3
    assert [tr["tokens"] for tr in record.extra["trailers"]] == [24, 24, 24]
    assert record.text == "\n\n".join(d["text"] for d in done)
    assert parser.failure() is None
    # the importer's entry point reads the same lines to the same turns
    assert turns_from_lines(s.lines) == turns


def test_csv_turn_column_and_a_trailer_per_turn(session):
    s = session()
    s.generate(1, "a b c", n=5)
    s.generate(2, "d e", n=7, clear_kv=False)
    assert s.end() == 0
    lines = s.csv.read_text().splitlines()
    assert "n_ctx=4096" in lines[1]
    header = next(x for x in lines if x.startswith("step,"))
    assert header == ("step,steps,wall_ms,io_ms,compute_ms,read_bytes,cache_hit_pct,stall_ms,"
                      "mgmt_ms,majflt,cpu_ms,turn")
    rows = [x.split(",") for x in lines if x[:1].isdigit()]
    assert [(int(r[0]), int(r[1]), int(r[-1])) for r in rows] == \
        [(i, 5, 1) for i in range(1, 6)] + [(i, 7, 2) for i in range(1, 8)]
    trailers = [x for x in lines if x.startswith("# summary ")]
    assert len(trailers) == 2 and "tokens=5 " in trailers[0] and "tokens=7 " in trailers[1]
    assert lines.index(trailers[0]) == lines.index(header) + 6   # right after turn 1's rows
    _, record, token_rows = s.record()
    assert [r.turn for r in token_rows] == [1] * 5 + [2] * 7
    assert [r.step for r in token_rows] == list(range(1, 6)) + list(range(1, 8))
    assert record.tokens == 12


def test_cancel_stops_the_turn_and_the_session_goes_on(session):
    s = session("-c", "1000000")
    s.generate(1, "a long answer please", n=500_000)
    s.wait_for("BEGIN")
    first = s.wait_for("PROGRESS")
    assert first["step"] == 1
    s.send(cmd="cancel")
    cancelled = s.wait_for("DONE")
    assert cancelled["id"] == 1 and cancelled["cancelled"] is True
    assert 1 <= cancelled["tokens"] < 500_000
    s.send(cmd="cancel")                     # nothing in flight: ignored
    s.generate(2, "short one", n=4, clear_kv=False)
    after = s.wait_for("DONE")
    assert after["id"] == 2 and after["cancelled"] is False and after["tokens"] == 4
    assert after["n_past"] == cancelled["n_past"] + after["n_prompt"] + 4
    assert s.end() == 0
    _, record, rows = s.record()
    assert [t.cancelled for t in record.turns] == [True, False]
    assert record.turns[0].tokens == cancelled["tokens"] and record.complete is True
    assert len(rows) == cancelled["tokens"] + 4
    assert len(record.extra["trailers"]) == 2      # a cancelled turn still ends with its trailer


def test_rejected_requests_fail_their_turn_only(session):
    s = session("-c", "64")
    s.generate(1, "   ", n=4)                                     # empty prompt
    s.generate(2, "fits", n=8)
    s.generate(3, "this one does not fit", n=60, clear_kv=False)  # 15 + 7 + 60 > 64
    s.send(cmd="sing", id=4)                                      # no such command
    s.generate(5, "fits again", n=4, clear_kv=False)
    assert s.end() == 0
    errors = [json.loads(x.split(" ", 1)[1]) for x in s.lines if x.startswith("BMOE_ERROR ")]
    # a command that is not a generate names no request: no turn failed
    assert [(e["id"], e["fatal"]) for e in errors] == [(1, False), (3, False), (None, False)]
    assert errors[0]["msg"] == "empty prompt"
    assert errors[1]["msg"].startswith("context overflow: 15 in context + 7 prompt + 60 to "
                                       "predict > n_ctx 64")
    assert "unknown cmd 'sing'" in errors[2]["msg"]
    assert not any(x == "BMOE_BEGIN {\"id\":1}" for x in s.lines)   # a rejection never begins
    _, record, rows = s.record()
    by_id = {t.request_id: t for t in record.turns}
    assert [t.turn for t in record.turns] == [1, 2, 3, 4]
    assert [r.turn for r in rows] == [2] * 8 + [4] * 4   # the CSV numbers the same turns
    assert by_id[1].error == "empty prompt" and by_id[1].tokens == 0
    assert by_id[3].error.startswith("context overflow") and by_id[3].tokens == 0
    assert by_id[2].error is None and by_id[5].error is None and by_id[5].tokens == 4
    assert by_id[5].context_tokens == 15 + 4 + 4   # the rejected turn 3 changed nothing
    assert record.errors == ["BMOE_ERROR: unknown cmd 'sing'"]
    assert record.tokens == 12 and record.complete is True
    assert record.prompt_tokens == by_id[2].prompt_tokens   # the first turn that ran


def test_fatal_error_ends_the_session_and_the_parser_says_why(session):
    s = session("--fail-at-turn", "2")
    s.generate(1, "first", n=6)
    s.generate(2, "second", n=10, clear_kv=False)
    s.generate(3, "never served", n=4, clear_kv=False)
    fatal = s.wait_for("ERROR")
    assert fatal["id"] == 2 and fatal["fatal"] is True
    assert s.wait_exit() == 1
    assert not any(x.startswith('BMOE_BEGIN {"id":3}') for x in s.lines)
    parser, record, rows = s.record()
    assert record.complete is False
    assert record.errors[0] == f"engine fatal error: {fatal['msg']}"
    assert parser.failure() == f"engine fatal error: {fatal['msg']}"
    one, two = record.turns
    assert one.error is None and one.tokens == 6
    assert two.error == fatal["msg"] and two.extra == {"incomplete": True, "fatal": True}
    assert two.tokens == 5 and two.text and len(two.text.split()) == 5   # from PROGRESS lines
    assert [r.turn for r in rows] == [1] * 6 + [2] * 5          # the dead turn's rows stay
    assert len(record.extra["trailers"]) == 1                    # ... without a trailer


def test_sigterm_mid_turn_exits_143_and_the_turn_is_unfinished(session):
    s = session("-c", "1000000")
    s.generate(1, "go on forever", n=500_000)
    s.wait_for("PROGRESS")
    s.p.send_signal(signal.SIGTERM)
    assert s.wait_exit() == 143
    _, record, rows = s.record()
    (turn,) = record.turns
    assert turn.extra == {"incomplete": True} and turn.error is None
    assert turn.tokens >= 1 and record.complete is False and rows
    assert record.tokens == turn.tokens


def test_one_shot_mode_prints_no_session_lines(tmp_path):
    r = subprocess.run([sys.executable, str(PROBE), "--cache-dir", str(tmp_path / "cache"),
                        *GEOMETRY, "-n", "3", "-p", "a b"], capture_output=True, text=True,
                       timeout=WAIT, check=False)
    assert r.returncode == 0 and "BMOE_" not in r.stdout and "generation: 3 tokens" in r.stdout


def test_route_trace_spans_the_turns(session, tmp_path):
    from orchestrator.engines.route_trace import read_route_trace

    trace = tmp_path / "route.csv"
    s = session("--route-trace", str(trace))
    s.generate(1, "a b", n=3)
    s.generate(2, "c", n=2, clear_kv=False)
    assert s.end() == 0
    rows = read_route_trace(trace).rows
    steps = {(t, p): sorted(g["step"].unique()) for (t, p), g in rows.groupby(["turn", "phase"])}
    # step = the absolute context position: a continued chat's prefill starts after turn 1
    assert steps == {(1, 0): list(range(8)), (1, 1): [8, 9, 10],
                     (2, 0): [11, 12, 13], (2, 1): [14, 15]}
