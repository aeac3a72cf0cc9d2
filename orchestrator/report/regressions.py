"""The report's regressions section: for each session and device of the report whose matrix
ran on that device before, what moved beyond its interval since the last earlier session and
since the first one (results/history.py gives the points).

Per (model, config as measured: results/measured.py): the session's figure (mean tok/s over its ok runs, or one run's
repetitions) against the same figure of the earlier session: the ratio of geometric means with
its 95% interval and Welch p-value (uncertainty.compare: two sessions' runs are not paired),
Holm-corrected across every test of the section; "moved" only when the corrected p-value is
below 0.05. A config the earlier session did not have, or that has one measurement on either
side, is shown without a verdict.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from orchestrator.db.runs import RunRow, Runs
from orchestrator.db.store import Store
from orchestrator.report.cells import id_list, interval_cell, mean_cell, verdict_cell
from orchestrator.report.formatting import ratio, when
from orchestrator.report.markdown import Table, md_escape
from orchestrator.results.history import build_label, point_samples
from orchestrator.results.measured import config_labels
from orchestrator.stats.uncertainty import (
    Comparison,
    compare,
    correct,
    mean_interval,
)
from orchestrator.stats.values import DASH

Key = tuple[str, str]


def _earlier(store: Store, matrix: str, device: str, session_id: int) -> list[int]:
    """The sessions of `matrix` before `session_id` with current runs on the device, oldest
    first."""
    return sorted(Runs(store).session_ids(matrix=matrix, device=device, before=session_id))


def _by_key(rows: Sequence[RunRow], labels: dict[int, str]) -> dict[Key, list[RunRow]]:
    """(model, config as measured): a config edited since, under the same name, is another
    row (results/measured.py), never a regression of the old one."""
    out: dict[Key, list[RunRow]] = {}
    for r in rows:
        out.setdefault((r.model or "-", labels[r.id]), []).append(r)
    return out


def sections(store: Store, rows: Sequence[RunRow]) -> list[dict[str, Any]]:
    """One context per (session, device) of the report's runs that has earlier sessions of
    its matrix on its device (nothing when none has: the report reads as before)."""
    out = []
    groups: dict[tuple[int, str], list[Any]] = {}
    for r in rows:
        groups.setdefault((r.session_id, r.device), []).append(r)
    for (sid, device), current in groups.items():
        matrix = current[0].matrix_name
        if not matrix:
            continue
        earlier = _earlier(store, matrix, device, sid)
        if not earlier:
            continue
        out.append(_section(store, sid, device, matrix, current, earlier[-1], earlier[0]))
    return out


def _side(store: Store, sid: int, device: str) -> list[Any]:
    return [r for r in store.runs(sid) if r.device == device]


def _section(store: Store, sid: int, device: str, matrix: str, current: list[Any],
             last: int, first: int) -> dict[str, Any]:
    bases = [last] if last == first else [last, first]
    sides = [current] + [_side(store, b, device) for b in bases]
    values = Runs(store).figures([r for side in sides for r in side])
    labels = config_labels([r for side in sides for r in side])
    keyed = [_by_key(side, labels) for side in sides]
    samples = [{k: point_samples(v, values, "mean")[0] for k, v in side.items()}
               for side in keyed]
    keys = list(keyed[0])
    raw: list[list[Comparison | None]] = [
        [compare(samples[j][k], samples[0][k]) if k in samples[j] and samples[j][k]
         and samples[0][k] else None for j in range(1, len(sides))] for k in keys]
    fixed = iter(correct([c for row in raw for c in row if c is not None]))
    tests = [[next(fixed) if c is not None else None for c in row] for row in raw]
    labels = [f"session {b} ({_builds(sides[i + 1])})" for i, b in enumerate(bases)]
    head = ["Model", "Config", f"session {sid} tok/s [95% CI]"]
    for label in (["since last"] + (["since first"] if len(bases) > 1 else [])):
        head += [f"{label}: ratio", "95% CI", "verdict"]
    table = Table([md_escape(h) for h in head], ["---", "---"] + ["---:"] * (len(head) - 2))
    moved = []
    for k, row in zip(keys, tests):
        now = mean_cell(mean_interval(samples[0][k])) if samples[0][k] else \
            f"failed (runs {id_list([r.id for r in keyed[0][k]])})"
        cells = [k[0], k[1], now]
        for j, (label, c) in enumerate(zip(labels, row), 1):
            absent = DASH if samples[0][k] else ""
            if not samples[j].get(k):
                absent = f"not in {label.split(' (')[0]}" if k not in keyed[j] else \
                    f"failed in {label.split(' (')[0]}"
            cells += [ratio(c.ratio if c else None), interval_cell(c),
                      verdict_cell(c) if c is not None else absent or DASH]
            if c is not None and c.significant and c.ratio not in (None, 1.0):
                moved.append(f"{k[1]} ({k[0]}): {c.delta_pct:+.1f}% "
                             f"[{c.ci_low_pct:+.1f}%, {c.ci_high_pct:+.1f}%] since {label}")
        table.rows.append([md_escape(x) for x in cells])
    if all(k[0] == "-" for k in keys):
        table.headers, table.aligns = table.headers[1:], table.aligns[1:]
        table.rows = [r[1:] for r in table.rows]
    s0 = store.session_row(sid)
    return {"session": sid, "device": md_escape(device), "matrix": md_escape(matrix),
            "started": when(s0.started_at) if s0 is not None else "", "build": md_escape(
                _builds(current)), "bases": [md_escape(x) for x in labels], "table": table,
            "moved": [md_escape(x) for x in moved], "tests": sum(
                1 for row in tests for c in row if c is not None and c.p_value is not None)}


def _builds(rows: Sequence[RunRow]) -> str:
    names = list(dict.fromkeys(b for b in (build_label(r) for r in rows) if b))
    return ", ".join(names) if names else "build unknown"
