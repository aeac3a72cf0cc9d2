"""Quality probes: graders, probe files, Wilson intervals, and a table
engine that reproduces hand-graded scores end to end through `orch run` on `local`."""
from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path

import pytest
from cli_helpers import orch
from conftest import FIXTURES
from sqlalchemy import func, select

from orchestrator.db.runs import Runs
from orchestrator.errors import ConfigError
from orchestrator.db import schema
from orchestrator.db.store import Store
from orchestrator.config.grading import grade
from orchestrator.config.probes import read_probes
from orchestrator.stats.proportions import paired_drop_bound, wilson

QUALITY = FIXTURES / "quality"

MATRIX = """\
    name: quality-table
    engine: generic
    binary: {local: engine.sh}
    engine_options:
      argv: ["/bin/sh", "{binary}", "{prompt}", "{flags}"]
      regex: {tok/s: '([0-9.]+) tok/s'}
    prompt: Speed test
    tokens: 8
    cooldown: 0
    sample_interval: 0.2s
    configs:
      good: --mode good
      bad: --mode bad
    quality:
      prompts: probes.jsonl
      grader: gsm8k
      tokens: 32
    """


def _setup(workspace: Path, probes: str | None = None) -> Path:
    shutil.copy(QUALITY / "table_engine.sh", workspace / "engine.sh")
    if probes is None:
        shutil.copy(QUALITY / "probes.jsonl", workspace / "probes.jsonl")
    else:
        (workspace / "probes.jsonl").write_text(probes)
    matrix = workspace / "q.yaml"
    matrix.write_text(textwrap.dedent(MATRIX))
    return matrix


# ---- graders -------------------------------------------------------------------------------

@pytest.mark.parametrize(("reply", "expected", "answer", "correct"), [
    ("3 + 4 = 7\n#### 7", "7", "7", True),
    ("#### 8\nno wait, 7", "7", "8", False),            # the number after the last ####
    ("first #### 3, then #### 1,234.", "1234", "1234", True),
    ("The total is 1,234.", "1,234", "1234", True),       # no ####: the last number
    ("about 12 or 13", "13", "13", True),
    ("#### 18.0", "18", "18", True),                      # compared as numbers
    ("costs $2,500.", "2500", "2500", True),
    ("#### -3", "-3", "-3", True),
    ("I do not know.", "5", None, False),
    ("", "5", None, False),
    ("#### none\nbut 4", "4", "4", True),                 # nothing after ####: the last number
])
def test_gsm8k_grader(reply, expected, answer, correct):
    graded = grade("gsm8k", reply, expected)
    assert (graded.answer, graded.correct) == (answer, correct)


def test_other_graders():
    assert grade("exact", "  Paris\n", "Paris").correct
    assert not grade("exact", "Paris, France", "Paris").correct
    assert grade("contains", "It is Paris, France.", "Paris").correct
    assert not grade("contains", "Lyon", "Paris").correct
    g = grade("regex:answer: (\\w+)", "answer: no\nanswer: yes", "yes")
    assert (g.answer, g.correct) == ("yes", True)           # the last match's group
    g = grade("regex:=\\s*([\\d,]+)", "x = 1,500", "1500")
    assert (g.answer, g.correct) == ("1500", True)          # numbers compare as numbers
    assert grade("regex:(\\d+)", "none here", "1").answer is None


# ---- statistics ----------------------------------------------------------------------------

def test_wilson_matches_published_values():
    # Newcombe (1998), Stat Med 17:857, table I: Wilson score intervals without correction
    for (k, n), (low, high) in {(81, 263): (0.2553, 0.3662), (15, 148): (0.0624, 0.1605),
                                (0, 20): (0.0, 0.1611), (1, 29): (0.0061, 0.1718)}.items():
        got = wilson(k, n)
        assert got == pytest.approx((low, high), abs=5e-5), (k, n)
    assert wilson(0, 0) is None


def test_paired_drop_bound():
    same = [True] * 10 + [False] * 5
    bound = paired_drop_bound(same, same)
    assert bound.drop == 0 and 0 < bound.upper < 0.1      # no drop seen, a small one not ruled out
    worse = paired_drop_bound(same, [False] * 15)
    assert worse.drop == pytest.approx(10 / 15) and worse.drop < worse.upper <= 1
    better = paired_drop_bound([False] * 15, [True] * 15)
    assert better.upper < 0                                # rules out any drop at all


# ---- probe files ---------------------------------------------------------------------------

@pytest.mark.parametrize(("line", "reason"), [
    ('{"id": 1, "prompt": "x"', "not JSON"),
    ('[1, 2]', "expected an object"),
    ('{"id": 1, "prompt": "x"}', "missing 'expected'"),
    ('{"id": 1, "prompt": "x", "answer": 3, "expected": 3}', "unknown key(s) 'answer'"),
    ('{"id": 1, "prompt": "", "expected": 3}', "prompt: expected a non-empty string"),
    ('{"id": 1, "prompt": "x", "expected": "three"}', "is not a number (grader gsm8k)"),
    ('{"id": "a", "prompt": "x", "expected": 3}', "id 'a' again (first on line 1)"),
])
def test_bad_probe_line_names_file_and_line(tmp_path, line, reason):
    path = tmp_path / "p.jsonl"
    path.write_text('{"id": "a", "prompt": "ok", "expected": 1}\n\n' + line + "\n")
    with pytest.raises(ConfigError) as info:
        read_probes(path, "gsm8k")
    assert str(info.value).startswith(f"{path}:3: ") and reason in str(info.value)


def test_shipped_probe_files_load():
    repo = Path(__file__).resolve().parent.parent
    assert len(read_probes(repo / "probes" / "gsm8k-15.jsonl", "gsm8k")) == 15
    assert len(read_probes(repo / "probes" / "gsm8k-3.jsonl", "gsm8k")) == 3


# ---- end to end ----------------------------------------------------------------------------

@pytest.mark.slow
def test_table_engine_reproduces_hand_graded_scores(workspace):
    matrix = _setup(workspace)
    code, out = orch("run", str(matrix))
    assert code == 0, out
    store = Store.open("orch.db")
    # probe invocations never become runs: the speed tables see the two speed cells only
    runs = Runs(store).current()
    assert sorted(r.config for r in runs) == ["bad", "good"]
    assert all(r.status == "ok" for r in runs)
    stored = store.fetch(select(schema.quality))
    assert len(stored) == 12 and {r.status for r in stored} == {"ok"}
    assert {r.probe_id: r.reply for r in stored if r.config == "good"}["q2"] == \
        "Adding it up, the total is 1,234."

    code, out = orch("quality", "--format", "json")
    assert code == 0, out
    data = json.loads(out)
    # by hand: good gets q1-q5 right and q6 wrong (41); bad gets q3 (18.0) q5 (2,500) q6 right
    assert data["configs"] == [
        {"config": "good", "correct": 5, "total": 6, "accuracy_pct": 83.33,
         "ci_low_pct": 43.65, "ci_high_pct": 96.99},
        {"config": "bad", "correct": 3, "total": 6, "accuracy_pct": 50.0,
         "ci_low_pct": 18.76, "ci_high_pct": 81.24},
    ]
    assert data["differ"] == [
        {"id": "q1", "expected": "7", "answers": {"good": "7", "bad": "8"}},
        {"id": "q2", "expected": "1,234", "answers": {"good": "1234", "bad": "12"}},
        {"id": "q4", "expected": "5", "answers": {"good": "5", "bad": None}},
        {"id": "q6", "expected": "42", "answers": {"good": "41", "bad": "42"}},
    ]

    code, out = orch("quality", "--format", "csv")
    assert code == 0 and out.splitlines()[2].startswith("-,bad,3,6,0,50.0,18.76,81.24,good,")
    code, out = orch("quality")
    assert code == 0 and "83.3% [43.6–97.0] (5/6)" in out and "- q4 (expected 5)" in out

    code, out = orch("report", "--no-plots")
    assert code == 0, out
    assert "**Quality beside speed** (6 probe question(s) per config, baseline good)" in out
    assert "50.0% [18.8–81.2] (3/6)" in out and "−33.3 pp" in out

    # --resume: every probe was answered ok, none runs again
    code, out = orch("run", str(matrix), "--resume")
    assert code == 0, out
    assert store.fetch(select(func.count()).select_from(schema.quality))[0][0] == 12


def test_bad_probe_line_exits_2_and_writes_nothing(workspace):
    good = (QUALITY / "probes.jsonl").read_text().splitlines()
    bad = '{"id": "q9", "prompt": 5, "expected": 1}'
    matrix = _setup(workspace, "\n".join([*good[:2], bad, *good[2:]]) + "\n")
    code, out = orch("run", str(matrix))
    assert code == 2
    assert f"{workspace / 'probes.jsonl'}:3: prompt: expected a non-empty string" in out
    assert not (workspace / "orch.db").exists()


def test_bad_grader_is_a_matrix_error(workspace):
    matrix = _setup(workspace)
    matrix.write_text(matrix.read_text().replace("grader: gsm8k", "grader: regex:(unclosed"))
    code, out = orch("run", str(matrix))
    assert code == 2 and f"{matrix}:16: quality.grader: regex: not a valid" in out
    assert not (workspace / "orch.db").exists()


@pytest.mark.slow
def test_failed_probe_is_counted_apart_and_rerun_on_resume(workspace):
    extra = '{"id": "q7", "prompt": "Q7: unknown to the table engine", "expected": 1}\n'
    matrix = _setup(workspace, (QUALITY / "probes.jsonl").read_text() + extra)
    code, out = orch("run", str(matrix))
    assert code == 0, out                    # a probe failing does not fail the speed session
    data = json.loads(orch("quality", "--format", "json")[1])
    assert [(c["correct"], c["total"]) for c in data["configs"]] == [(5, 6), (3, 6)]
    code, out = orch("quality", "--format", "csv")
    assert out.splitlines()[1].startswith("-,good,5,6,1,")    # failed: 1, not a wrong answer
    store = Store.open("orch.db")
    failed = store.fetch(select(schema.quality).where(schema.quality.c.status != "ok"))
    assert [(r.config, r.probe_id, r.status, r.rc) for r in failed] == \
        [("good", "q7", "failed", 3), ("bad", "q7", "failed", 3)]
    code, out = orch("run", str(matrix), "--resume")
    assert code == 0, out
    again = store.fetch(select(schema.quality).where(schema.quality.c.status != "ok"))
    assert len(again) == 2 and {r.id for r in again}.isdisjoint(r.id for r in failed)
    assert store.fetch(select(func.count()).select_from(schema.quality))[0][0] == 14
