"""bmoe-cli's session lines (engines/bmoe_session.py) as turns: BMOE_DONE / BMOE_ERROR to
record.Turn, the run's figures over all turns, lines as a Windows driver saves them, and a
fatal BMOE_ERROR as the cause of a failed `orch run`."""
from __future__ import annotations

import json
import textwrap

import pytest
from agent_helpers import alive
from cli_helpers import orch
from waiting import wait_until

from orchestrator.db.runs import Runs
from orchestrator.db.store import Store
from orchestrator.engines.bmoe import BmoeRunParser
from orchestrator.engines.bmoe_session import SessionLines, session_fields, turns_from_lines


def line(tag: str, **fields) -> str:
    return f"BMOE_{tag} {json.dumps(fields, separators=(',', ':'))}"


def done(rid: int, tokens: int, tok_s: float, **more) -> str:
    fields = dict(id=rid, cancelled=False, tokens=tokens, tok_s=tok_s, prefill_s=0.5,
                  prefill_tps=20.0, load_s=3.0, cache_hit_pct=50.0, n_prompt=10, n_past=10 + tokens,
                  compute_s_tok=0.1, io_s_tok=0.2, cache_resident_mib=100.0,
                  cache_budget_mib=200.0, read_mib=10.0, stall_s_tok=0.05, mgmt_s_tok=0.01,
                  majflt_tok=1.0, cpu_s_tok=0.3, token_demand_mib=4.0, mtp_drafted=0,
                  reasoning="", text=f"answer {rid}")
    fields.update(more)
    return line("DONE", **fields)


def test_done_lines_become_turns_and_other_keys_go_to_extra():
    lines = [line("READY", load_s=3.0, arch="qwen3moe", n_ctx=2048, think_ctl="template",
                  n_expert_used=8),
             line("BEGIN", id=1), line("PROGRESS", step=1, steps=4, delta_text="x"),
             done(1, 4, 2.0),
             line("BEGIN", id=2), done(2, 8, 4.0, n_prompt=3, n_past=25, cancelled=True)]
    one, two = turns_from_lines(lines)
    assert (one.turn, one.request_id, one.tokens, one.decode_tps) == (1, 1, 4, 2.0)
    assert (one.prompt_tokens, one.context_tokens, one.prefill_s, one.prefill_tps) == \
        (10, 14, 0.5, 20.0)
    assert (one.cache_hit_pct, one.read_mib, one.compute_s_per_token, one.io_s_per_token,
            one.stall_s_per_token, one.mgmt_s_per_token) == (50.0, 10.0, 0.1, 0.2, 0.05, 0.01)
    assert one.load_s == 3.0 and one.ttft_s == 3.5 and one.text == "answer 1"
    assert one.extra["cpu_s_tok"] == 0.3 and one.extra["mtp_drafted"] == 0
    assert "load_s" not in one.extra and one.error is None and one.cancelled is False
    # later turns: the engine repeats the load, which they did not wait for
    assert two.load_s is None and two.ttft_s == 0.5 and two.extra["load_s"] == 3.0
    assert (two.prompt_tokens, two.context_tokens, two.cancelled) == (3, 25, True)


def test_windows_saved_lines_bom_crlf_and_prefixes():
    raw = "\ufeff" + "\r\n".join([
        "driver: starting",
        "[12:00:01] " + done(1, 4, 2.0),
        done(2, 4, 2.0) + "   ",
        "BMOE_DONE {not json}",
        ""]) + "\r\n"
    turns = turns_from_lines(raw.splitlines())
    assert [t.request_id for t in turns] == [1, 2]
    session = SessionLines()
    for x in raw.lstrip("\ufeff").splitlines():
        session.feed(x)
    assert len(session.errors) == 1 and "unreadable BMOE_DONE" in session.errors[0]


def test_errors_rejected_fatal_and_unfinished_turns():
    lines = [line("BEGIN", id=1), done(1, 4, 2.0),
             line("ERROR", id=2, fatal=False, msg="context overflow"),
             line("ERROR", id=None, fatal=False, msg="bad request line"),
             line("BEGIN", id=3),
             line("PROGRESS", step=1, delta_text="Hel"),
             line("PROGRESS", step=2, delta_text="lo", reset=1),
             line("PROGRESS", step=3, delta_text=" you"),
             line("ERROR", id=3, fatal=True, msg="failed to read expert 12 of layer 3")]
    session = SessionLines()
    assert all(session.feed(x) for x in lines)
    assert session.feed("plain text") is False
    one, two, three = session.turns()
    assert two.error == "context overflow" and two.tokens == 0 and two.request_id == 2
    assert three.error == "failed to read expert 12 of layer 3" and three.tokens == 3
    assert three.text == "lo you" and three.extra == {"incomplete": True, "fatal": True}
    assert session.fatal == "failed to read expert 12 of layer 3"
    assert session.errors == ["BMOE_ERROR: bad request line"]
    assert not session.complete()
    # a turn still in flight (the engine killed): unfinished, and asking again changes nothing
    live = SessionLines()
    for x in [line("BEGIN", id=1), line("PROGRESS", step=1, delta_text="a")]:
        live.feed(x)
    assert live.turns() == live.turns() and live.turns()[0].extra == {"incomplete": True}
    assert live.in_flight and not live.complete()
    live.feed(done(1, 1, 1.0))
    assert live.complete() and not live.complete(expected_turns=2)


def test_session_fields_are_over_every_turn():
    turns = turns_from_lines([done(1, 10, 2.0, read_mib=30.0, cache_hit_pct=40.0),
                              done(2, 30, 6.0, read_mib=10.0, cache_hit_pct=80.0,
                                   compute_s_tok=0.2, cache_resident_mib=150.0),
                              line("ERROR", id=3, fatal=False, msg="empty prompt")])
    f = session_fields(turns)
    assert f["tokens"] == 40 and f["read_mib"] == 40.0
    assert f["decode_tps"] == pytest.approx(40 / (10 / 2.0 + 30 / 6.0))   # all tokens / time
    assert f["cache_hit_pct"] == pytest.approx((10 * 40 + 30 * 80) / 40)  # token-weighted
    assert f["compute_s_per_token"] == pytest.approx((10 * 0.1 + 30 * 0.2) / 40)
    assert f["cpu_s_per_token"] == pytest.approx(0.3)
    assert (f["prompt_tokens"], f["load_s"], f["ttft_s"]) == (10, 3.0, 3.5)   # the first turn
    assert f["cache_resident_mib"] == 150.0                                    # at the end
    no_cache = session_fields(turns_from_lines([done(1, 4, 2.0, cache_hit_pct=-1.0)]))
    assert no_cache["cache_hit_pct"] == -1.0
    assert session_fields([]) == {"tokens": 0}


def test_one_shot_runs_are_read_as_before():
    """--progress prints BMOE_PROGRESS in one-shot runs too: no turns, the trailer's figures."""
    parser = BmoeRunParser()
    for x in ["step,steps,wall_ms", "1,1,100.0", "# summary tokens=1 tok/s=10.0"]:
        parser.feed("C", x)
    for x in [line("PROGRESS", step=1, steps=1, delta_text="hi"), "hi",
              "generation: 1 tokens, 0.100 s/token (10.000 tok/s)"]:
        parser.feed("O", x)
    record = parser.record()
    assert record.turns == [] and record.complete and record.tokens == 1
    assert record.extra["trailer"] == {"tokens": 1, "tok/s": 10.0}
    assert record.text == "hi" and parser.failure() is None


FAKE_SESSION_ENGINE = """\
#!/bin/sh
# a bmoe-cli whose session dies on its first request: READY, BEGIN, a token, a fatal error
csv=/dev/null
while [ $# -gt 0 ]; do case $1 in --csv) csv=$2; shift 2 ;; *) shift ;; esac; done
printf 'step,steps,wall_ms,io_ms,compute_ms,read_bytes,cache_hit_pct,turn\\n1,4,100.0,50.0,50.0,0,-1.00,1\\n' > "$csv"
echo 'BMOE_READY {"load_s":1.5,"arch":"x","n_ctx":512,"think_ctl":"template","n_expert_used":2}'
echo 'BMOE_BEGIN {"id":1}'
echo 'BMOE_PROGRESS {"step":1,"steps":4,"delta_text":"a"}'
echo 'BMOE_ERROR {"id":1,"fatal":true,"msg":"mmap of the model failed: ENOMEM"}'
exit 1
"""


def test_orch_run_fails_with_the_fatal_errors_message(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ORCH_DB", raising=False)
    (tmp_path / "devices.yaml").write_text(f"devices:\n  local:\n    kind: local\n"
                                           f"    workdir: {tmp_path}/dev\n")
    engine = tmp_path / "fake_session.sh"
    engine.write_text(FAKE_SESSION_ENGINE)
    (tmp_path / "m.gguf").write_bytes(b"GGUF" + bytes(4092))
    (tmp_path / "m.yaml").write_text(textwrap.dedent(f"""\
        name: fatal
        engine: bmoe
        binary: {{local: {engine.name}}}
        models: {{m: {tmp_path}/m.gguf}}
        prompt: p
        tokens: 4
        cooldown: 0
        sample_interval: 0.1s
        configs: {{a: --x 1}}
        """))
    code, out = orch("run", "m.yaml")
    (run,) = Runs(Store.open("orch.db")).current()
    assert run.status == "failed", out
    assert run.cause == "engine fatal error: mmap of the model failed: ENOMEM (exit code 1)"
    summary = run.summary
    assert summary["complete"] is False and summary["errors"][0] == run.cause.split(" (")[0]
    assert [t["error"] for t in summary["turns"]] == ["mmap of the model failed: ENOMEM"]
    pids = [int(f.read_text().split()[0]) for f in (tmp_path / "dev").glob("runs/*/*pid")]
    assert pids and wait_until(lambda: not any(alive(p) for p in pids), 10)   # nothing lives
