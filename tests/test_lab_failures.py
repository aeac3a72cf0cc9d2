"""Failed lab cells grouped by cause (results/lab_failures.py) and their one line per group
(report/format/lab_failures.py), as `orch lab status`, `orch lab wait` and the report print
them: a cause said once for all the cells that failed with it. The lab end to end:
tests/test_lab_shapes.py."""
from __future__ import annotations

from types import SimpleNamespace

from orchestrator.report.document import left_out
from orchestrator.report.format.lab_failures import failure_group_line, failure_lines
from orchestrator.results.lab_failures import group_failures, without_runs


def _cell(device: str, key: str, state: str = "failed", error: str | None = None,
          run_id: int | None = None) -> SimpleNamespace:
    return SimpleNamespace(device=device, session_id=1, cell_key=key, state=state,
                           error=error, run_id=run_id)


def test_thirty_two_cells_with_one_cause_are_one_line() -> None:
    cause = "TypeError: Object of type ModelFile is not JSON serializable"
    cells = [_cell(f"d{i % 2}", f"m|c{i}|0", error=cause) for i in range(32)]
    groups = group_failures(cells, {})
    assert len(groups) == 1 and groups[0].count == 32 and groups[0].devices == ["d0", "d1"]
    assert failure_lines(groups) == [f"32 cells failed: {cause} (on d0, d1)"]


def test_the_cause_is_the_cells_then_its_runs_then_its_state() -> None:
    cells = [_cell("d", "a", error="first line\nsecond line"),
             _cell("d", "b", state="killed", run_id=7),
             _cell("d", "c", state="timeout", run_id=8),
             _cell("d", "ok", state="ok"), _cell("d", "q", state="queued"),
             _cell("d", "x", state="cancelled"), _cell("d", "k", state="kept")]
    groups = group_failures(cells, {7: "killed (signal 9)", 8: None})
    assert [(g.cause, g.count) for g in groups] == [
        ("first line", 1), ("killed (signal 9)", 1), ("ended timeout (no cause was stored)", 1)]
    assert failure_group_line(groups[1]) == "1 cell failed: killed (signal 9) (d b)"


def test_biggest_group_first_and_the_report_keeps_only_cells_without_a_run() -> None:
    cells = [_cell("d", "a", error="rare", run_id=1)] + \
        [_cell("d", f"k{i}", error="common", run_id=None if i else 2) for i in range(3)]
    groups = group_failures(cells, {})
    assert [(g.cause, g.count) for g in groups] == [("common", 3), ("rare", 1)]
    kept = without_runs(groups)
    assert [(g.cause, g.count) for g in kept] == [("common", 2)]
    data = SimpleNamespace(runs=[], excluded=[], lab_failed=kept)
    lines = left_out.context(data, None)["left_out"]   # type: ignore[arg-type]
    assert lines == [r"lab: 2 cells failed: common (d k1, d k2)"]
