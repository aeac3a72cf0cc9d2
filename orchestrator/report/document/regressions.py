"""The report's regressions section, rendered: per session and device with earlier sessions of
its matrix on the device, what moved beyond its interval since the last earlier session and
since the first (the numbers: results/regressions.py, each a results/comparison.py result).
"moved" only when the Holm-corrected p-value is below 0.05; a config the earlier session did
not have, or that has one run on either side, is shown without a verdict.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from orchestrator.report.document.request import SectionRequest
from orchestrator.report.format.cells import id_list, interval_cell, mean_cell, verdict_cell
from orchestrator.report.format.formatters import ratio, when
from orchestrator.report.format.markdown import Table, md_escape
from orchestrator.results.comparison import Absence, ConfigRow, SideComparison
from orchestrator.results.regressions import Regression
from orchestrator.results.report_data import ReportData
from orchestrator.stats.values import DASH

Key = tuple[str, str]
CURRENT = 1        # the session's side in each comparison (the earlier one is the reference)


def _rows(comp: SideComparison) -> dict[Key, ConfigRow]:
    return {(r.model, r.config): r for r in comp.rows}


def section(reg: Regression) -> dict[str, Any]:
    """The template context of one (session, device)."""
    compared = [(side, builds, _rows(comp)) for side, builds, comp in reg.against]
    keys = list(dict.fromkeys(k for _, _, rows in compared for k, r in rows.items()
                              if CURRENT in r.on))
    labels = [f"{side.label} ({builds})" for side, builds, _ in compared]
    head = ["Model", "Config", f"session {reg.session_id} tok/s [95% CI]"]
    for label in (["since last"] + (["since first"] if len(compared) > 1 else [])):
        head += [f"{label}: ratio", "95% CI", "verdict"]
    table = Table([md_escape(h) for h in head], ["---", "---"] + ["---:"] * (len(head) - 2))
    moved, tests = [], 0
    for k in keys:
        now_row = next(rows[k] for _, _, rows in compared if k in rows)
        now = now_row.means[CURRENT]
        cells = [k[0], k[1], mean_cell(now) if now is not None else
                 f"failed (runs {id_list(now_row.failed[CURRENT])})"]
        for i, ((side, _, rows), label) in enumerate(zip(compared, labels)):
            row = rows.get(k)
            c = row.vs_reference[0] if row is not None else None
            absent = DASH if now is not None else ""
            if row is None or row.means[0] is None:
                why = row.absence(0) if row is not None else Absence.NEVER_RUN
                absent = f"{'failed in' if why is Absence.FAILED else 'not in'} {side.label}"
            cells += [ratio(c.ratio if c else None), interval_cell(c),
                      verdict_cell(c) if c is not None else absent or DASH]
            if c is not None and c.p_value is not None:
                tests += 1
            if c is not None and c.significant and c.ratio not in (None, 1.0):
                moved.append(f"{k[1]} ({k[0]}): {c.delta_pct:+.1f}% "
                             f"[{c.ci_low_pct:+.1f}%, {c.ci_high_pct:+.1f}%] since {label}"
                             # a step at this session: against the last earlier one
                             + (_acknowledged(reg, k, c.ratio) if i == 0 else ""))
        table.rows.append([md_escape(x) for x in cells])
    if all(k[0] == "-" for k in keys):
        table.headers, table.aligns = table.headers[1:], table.aligns[1:]
        table.rows = [r[1:] for r in table.rows]
    s0 = reg.session
    return {"session": reg.session_id, "device": md_escape(reg.device),
            "matrix": md_escape(reg.matrix),
            "started": when(s0.started_at) if s0 is not None else "",
            "build": md_escape(reg.builds), "bases": [md_escape(x) for x in labels],
            "table": table, "moved": [md_escape(x) for x in moved], "tests": tests}


def _acknowledged(reg: Regression, key: Key, ratio: float | None) -> str:
    """A slowdown's id (`orch ack ID`), and its acknowledgement when it has one."""
    if ratio is None or ratio >= 1.0:
        return ""
    cid = reg.step_id(*key)
    ack = reg.acks.get(cid)
    if ack is None:
        return f"; id {cid}"
    return f"; id {cid}, acknowledged: {ack.text}, {when(ack.created_at)[:10]}"


def sections(found: Sequence[Regression]) -> list[dict[str, Any]]:
    return [section(reg) for reg in found]


TEMPLATE = "regressions.md.j2"


def context(data: ReportData, request: SectionRequest) -> dict[str, Any]:
    """Earlier sessions of the report's matrices on its devices (results/regressions.py)."""
    return {"regressions": sections(data.regressions)}
