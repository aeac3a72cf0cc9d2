"""Runs left out of every figure on purpose, each with its reason: a design file's
`exclude: {GLOB: REASON}` (config/design.py) and `--exclude RUN[=REASON]` on `orch report`,
`orch table` and `orch compare` (docs/report.md, "Leaving a run out").

A left-out run is in no mean, interval, A/B row, finding or plot; the document lists it
under Left out with why, so that leaving it out is never a silent edit. RUN is a run id or
a glob over the run's imported file (its path in the study folder, or its name alone).
"""
from __future__ import annotations

import dataclasses
import fnmatch
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from orchestrator.config.design import Design, session_design
from orchestrator.db.rows import RunRow
from orchestrator.errors import ConfigError
from orchestrator.results.query import Side

CLI_REASON = "no reason given"


@dataclass(frozen=True)
class Excluded:
    """A run left out on purpose: why, and who said so."""

    run: RunRow
    reason: str
    pattern: str         # the design's glob, or the --exclude RUN that matched
    from_design: bool    # the design file's `exclude:` (else `--exclude`)


def _file_matches(run: RunRow, glob: str) -> bool:
    path = run.source_file or ""
    name = path.rsplit("/", 1)[-1]
    return bool(path) and (fnmatch.fnmatchcase(path, glob) or fnmatch.fnmatchcase(name, glob))


def _spec(spec: str) -> tuple[str, str]:
    """(RUN, reason) of `RUN` or `RUN=REASON`."""
    run, eq, why = spec.partition("=")
    return run.strip(), why.strip() if eq and why.strip() else CLI_REASON


def _cli_matches(run: RunRow, target: str) -> bool:
    return str(run.id) == target if target.isdigit() else _file_matches(run, target)


def check(rows: Sequence[RunRow], specs: Sequence[str]) -> None:
    """A spec that names no run of `rows` is a ConfigError naming what it can match."""
    for spec in specs:
        target, _ = _spec(spec)
        if not target or not any(_cli_matches(r, target) for r in rows):
            raise ConfigError(f"--exclude {spec}: no run {target!r} here (give a run id or "
                              f"a glob over the runs' files, e.g. "
                              f"{_example(rows)})")


def split(rows: Sequence[RunRow], designs: Mapping[int, Design | None],
          specs: Sequence[str] = ()) -> tuple[list[RunRow], list[Excluded]]:
    """(the runs every figure takes, the runs left out with why), in the rows' order.
    `designs`: session id -> its design file; `specs`: `--exclude` values (`check`ed)."""
    check(rows, specs)
    return _split(rows, designs, specs)


def _split(rows: Sequence[RunRow], designs: Mapping[int, Design | None],
           specs: Sequence[str]) -> tuple[list[RunRow], list[Excluded]]:
    kept: list[RunRow] = []
    out: list[Excluded] = []
    for run in rows:
        found = _excluded(run, designs.get(run.session_id), specs)
        if found is None:
            kept.append(run)
        else:
            out.append(found)
    return kept, out


def _excluded(run: RunRow, design: Design | None, specs: Sequence[str]) -> Excluded | None:
    for spec in specs:
        target, why = _spec(spec)
        if _cli_matches(run, target):
            return Excluded(run, why, target, from_design=False)
    if design is not None and run.source_file:
        hit = design.exclusion(run.source_file)
        if hit is not None:
            return Excluded(run, hit[1].strip(), hit[0], from_design=True)
    return None


def _example(rows: Sequence[RunRow]) -> str:
    first = rows[0] if rows else None
    if first is None:
        return "7"
    return f"{first.id}" + (f" or '{first.source_file}'" if first.source_file else "")


def split_sides(sides: Sequence[Side], specs: Sequence[str] = ()
                ) -> tuple[list[Side], list[tuple[str, Excluded]]]:
    """`orch compare`'s sides without their left-out runs, and (side label, run left out)."""
    check([r for side in sides for r in side.rows], specs)
    kept: list[Side] = []
    gone: list[tuple[str, Excluded]] = []
    for side in sides:
        design = session_design(side.session)
        rows, out = _split(side.rows, {r.session_id: design for r in side.rows}, specs)
        kept.append(dataclasses.replace(side, rows=rows))
        gone += [(side.label, e) for e in out]
    return kept, gone
