"""A matrix's `session:` block (docs/sessions.md, "Live sessions"): its turns resolved into the
plan's requests, the defaults, the layering (a config's own block wins), prompt files, and one
clear error per mistake; the engine's argv, the job's session file; the T stream line and what
the recorder does with it (samples carry the turn last begun; a replay rebuilds the events)."""
from __future__ import annotations

import json
import textwrap

import pytest

from orchestrator.config.matrix import load_matrix
from orchestrator.config.plan import plan_cells
from orchestrator.engines.base import CellSpec
from orchestrator.errors import ConfigError
from orchestrator.plugins import get_adapter
from orchestrator.run.stream import ProtocolError, TurnEvent, parse_line

BASE = """\
name: s
engine: moe-probe
tokens: 16
configs:
  a: --io pread
"""


def write(tmp_path, text: str, name: str = "m.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_turns_resolve_with_defaults_and_files(tmp_path):
    (tmp_path / "q2.txt").write_text("second\nline ü")
    loaded = load_matrix(write(tmp_path, BASE + textwrap.dedent("""\
        session:
          - prompt: first
          - prompt_file: q2.txt
            n_predict: 4
            think: true
          - prompt: third
            idle: 2m
            clear_kv: true
            deadline: 500ms
        """)))
    (cell,) = plan_cells(loaded.matrix)
    one, two, three = cell.session
    assert (one.turn, one.prompt, one.n_predict, one.clear_kv, one.idle_s) == \
        (1, "first", 16, True, 0.0)
    assert (two.prompt, two.n_predict, two.clear_kv, two.think) == ("second\nline ü", 4, False, True)
    assert (three.clear_kv, three.idle_s, three.deadline_s) == (True, 120.0, 0.5)
    idle, deadline, body = two.agent_line().split("\t")
    assert (idle, deadline) == ("0", "0") and "\n" not in body
    assert json.loads(body) == {"cmd": "generate", "id": 2, "prompt": "second\nline ü",
                                "n_predict": 4, "clear_kv": False, "think": True}
    assert three.agent_line().split("\t")[:2] == ["120000", "500"]
    assert "think" not in one.request()


def test_a_configs_own_session_wins(tmp_path):
    loaded = load_matrix(write(tmp_path, """\
        name: s
        engine: moe-probe
        session: [{prompt: shared}]
        configs:
          a: --io pread
          b: {flags: --io mmap, session: [{prompt: own}, {prompt: again, idle: 1s}]}
        grid: {--top-k: [2, 4]}
        """))
    cells = {c.config: c for c in plan_cells(loaded.matrix)}
    assert [r.prompt for r in cells["a+top-k=2"].session] == ["shared"]
    assert [r.prompt for r in cells["b+top-k=4"].session] == ["own", "again"]


def test_no_session_is_a_one_shot_cell(tmp_path):
    loaded = load_matrix(write(tmp_path, BASE + "prompt: hi\n"))
    assert plan_cells(loaded.matrix)[0].session == ()


@pytest.mark.parametrize("block,message", [
    ("session:\n  - prompt: a\n    idel: 5s\n", r"m.yaml:8: session.0.idel: is not a known key"),
    ("session:\n  - prompt: a\n    idle: -5s\n", r"m.yaml:8: session.0.idle: .*cannot be negative"),
    ("session:\n  - n_predict: 3\n", r"m.yaml:7: session.0: .*give the turn's `prompt` or `prompt_file`"),
    ("session:\n  - {prompt: a, prompt_file: b}\n", r"session.0: .*one of them"),
    ("session: []\n", r"m.yaml:6: session: needs at least 1 entry"),
    ("session:\n  - prompt: a\n    deadline: 0s\n", r"session.0.deadline: .*longer than 0 s"),
    ("session:\n  - prompt: a\n    idle: 20m\n", r"session: the turns' idle times add up to 1200 s"),
    ("session:\n  - prompt_file: nope.txt\n", r"m.yaml:7: session.0.prompt_file: cannot read .*nope.txt"),
])
def test_mistakes_are_one_clear_line(tmp_path, block, message):
    with pytest.raises(ConfigError, match=message):
        load_matrix(write(tmp_path, BASE + block))


def test_engine_without_a_session_mode_is_refused(tmp_path):
    text = BASE.replace("moe-probe", "llama-cli") + "models: {m: /m.gguf}\nbinary: /bin/true\n" \
        + "session: [{prompt: a}]\n"
    with pytest.raises(ConfigError, match=r"session: engine 'llama-cli' has no session mode "
                                          r"\(only bmoe, moe-probe"):
        load_matrix(write(tmp_path, text))


def test_a_session_prompt_file_must_be_utf8(tmp_path):
    (tmp_path / "bad.txt").write_bytes(b"\xff\xfe")
    with pytest.raises(ConfigError, match="is not UTF-8"):
        load_matrix(write(tmp_path, BASE + "session: [{prompt_file: bad.txt}]\n"))


@pytest.mark.parametrize("engine", ["bmoe", "moe-probe"])
def test_session_argv_has_no_prompt_or_count(engine):
    spec = CellSpec(binary="/e", model_path="/m", prompt="", tokens=16, flags=["--x"],
                    csv_path="/j/tokens.csv", extra={"workdir": "/w"}, session=True)
    argv = get_adapter(engine).build_argv(spec)
    assert "--session" in argv and "-n" not in argv and "-p" not in argv \
        and "--prompt" not in argv and argv[-2:] == ["--csv", "/j/tokens.csv"]


def test_t_lines_parse_and_garbled_ones_are_protocol_errors():
    assert parse_line("T\t3\t7870\tsent").turn == TurnEvent(3, 7870, "sent")
    for bad in ("T\t3", "T\tx\t1\tsent", "T\t1\t2\t"):
        with pytest.raises(ProtocolError):
            parse_line(bad)


class _Parser:
    def feed(self, tag, text):
        return []

    def record(self):  # pragma: no cover - not asked here
        raise AssertionError


def test_samples_carry_the_turn_last_begun_and_a_replay_rebuilds_the_events():
    from orchestrator.run.recorder import RunRecorder

    lines = ["H\tproto=1", "S\t10\trss_kb=1", "T\t1\t20\tsent", "S\t30\trss_kb=2",
             "T\t1\t40\tdone", "S\t50\trss_kb=3", "T\t2\t60\tsent", "S\t70\trss_kb=4"]
    rec = RunRecorder(store=None, run_id=1, parser=_Parser(), session=True)  # type: ignore[arg-type]
    rec.flush = lambda: None   # type: ignore[method-assign]
    for line in lines:
        rec.handle(line)
    assert [s["turn"] for s in rec._samples] == [0, 1, 1, 2]
    assert [o["stream"] for o in rec._outputs] == ["T", "T", "T"]
    # a resumed run replays its stored lines: the events come back, nothing is stored twice
    again = RunRecorder(store=None, run_id=1, parser=_Parser(), stored_lines=6, session=True)  # type: ignore[arg-type]
    again.flush = lambda: None   # type: ignore[method-assign]
    for line in lines:
        again.handle(line)
    assert [(e.turn, e.event) for e in again.turn_events] == [(1, "sent"), (1, "done"),
                                                               (2, "sent")]
    assert [s["turn"] for s in again._samples] == [2] and len(again._outputs) == 1
    one_shot = RunRecorder(store=None, run_id=1, parser=_Parser())  # type: ignore[arg-type]
    one_shot.flush = lambda: None   # type: ignore[method-assign]
    one_shot.handle("S\t10\trss_kb=1")
    assert one_shot._samples[0]["turn"] is None


def _requests(n: int, idle_last: float = 0.0):
    from orchestrator.config.session import SessionRequest

    return tuple(SessionRequest(turn=i, prompt=f"p{i}", n_predict=8, clear_kv=i == 1,
                                idle_s=idle_last if i == n else 0.0) for i in range(1, n + 1))


def _events(*spec: tuple[int, int, str]):
    return [TurnEvent(turn, t_ms, event) for turn, t_ms, event in spec]


def test_turns_take_orchs_times_and_the_plan_where_the_parser_is_silent():
    from orchestrator.record import Turn
    from orchestrator.run.session_turns import session_turns

    parsed = [Turn(turn=1, tokens=8, cache_hit_pct=80.0), Turn(turn=2, tokens=3, cancelled=True,
                                                              started_ms=999.0)]
    events = _events((1, 10, "sent"), (1, 500, "done"), (2, 500, "sent"), (2, 800, "cancel"),
                     (2, 900, "done"), (3, 5900, "sent"), (3, 6000, "error"))
    one, two, three = session_turns(parsed, events, _requests(3, idle_last=5.0))
    assert (one.started_ms, one.ended_ms, one.clear_kv, one.cache_hit_pct) == (10, 500, True, 80.0)
    assert two.started_ms == 999.0 and two.ended_ms == 900 and two.cancelled is True
    # turn 3: the parser had none (an engine whose error names no request), orch's facts stand
    assert (three.turn, three.idle_before_s, three.clear_kv, three.error) == \
        (3, 5.0, False, "BMOE_ERROR")
    assert three.extra["request"] == {"n_predict": 8, "think": None, "deadline_s": None,
                                      "prompt_chars": 2}


@pytest.mark.parametrize("events,turns,expected", [
    # every turn done, one of them cancelled: ok
    ([(1, 1, "sent"), (1, 2, "done"), (2, 3, "sent"), (2, 4, "cancel"), (2, 5, "done")], {},
     ("ok", None)),
    # a recoverable error fails the run, naming its turn
    ([(1, 1, "sent"), (1, 2, "error"), (2, 3, "sent"), (2, 4, "done")], {1: "empty prompt"},
     ("failed", "turn 1: empty prompt")),
    # the engine exited 0 halfway through turn 2
    ([(1, 1, "sent"), (1, 2, "done"), (2, 3, "sent")], {},
     ("failed", "turn 2 of 2 never ended (no BMOE_DONE)")),
    # a fatal error is the cause, whatever the exit said
    ([(1, 1, "sent"), (1, 2, "done"), (2, 3, "sent"), (2, 4, "fatal")], {2: "model vanished"},
     ("failed", "fatal BMOE_ERROR in turn 2: model vanished")),
])
def test_a_session_runs_status(events, turns, expected):
    from orchestrator.record import Turn
    from orchestrator.run.session_turns import session_status

    parsed = [Turn(turn=n, error=msg) for n, msg in turns.items()]
    assert session_status("ok", None, _events(*events), parsed, _requests(2)) == expected


def test_resume_sees_a_changed_session():
    from types import SimpleNamespace

    from orchestrator.record import RunRecord
    from orchestrator.run.session_turns import session_changed, stored_requests

    asked = _requests(2)
    same = SimpleNamespace(argv=["e", "--session"],
                           record=RunRecord(extra={"session": stored_requests(asked)}))
    assert not session_changed(same, asked)
    assert session_changed(same, _requests(3))
    assert session_changed(SimpleNamespace(argv=["e", "-p", "x"], record=RunRecord()), asked)
    assert session_changed(same, ())
    interrupted = SimpleNamespace(argv=["e", "--session"], record=RunRecord())
    assert not session_changed(interrupted, asked)


def test_a_lab_batch_carries_session_prompt_files_to_another_host(tmp_path):
    """A lab worker rebuilds the matrix from the batch's stored text on its own host, where the
    prompt files may not exist: the batch keeps their texts as read on the submitting host."""
    from types import SimpleNamespace

    from orchestrator.config.session import session_prompt_texts
    from orchestrator.lab.cell_task import loaded_from_batch

    (tmp_path / "q2.txt").write_text("second, from a file")
    loaded = load_matrix(write(tmp_path, BASE + "session:\n  - prompt: first\n"
                                          "  - prompt_file: q2.txt\n"))
    texts = session_prompt_texts(loaded.matrix)
    assert texts == {"q2.txt": "second, from a file"}
    (tmp_path / "q2.txt").unlink()               # the worker's host has no such file
    batch = SimpleNamespace(matrix_text=loaded.text, matrix_path="/elsewhere/m.yaml",
                            prompt_text=loaded.prompt_text, session_prompts=texts)
    (cell,) = plan_cells(loaded_from_batch(batch).matrix)
    assert [r.prompt for r in cell.session] == ["first", "second, from a file"]
