"""Shared by the benches in bench/: the figure line format, goal checks and timing helpers.

Every bench prints one line per figure, fields separated by two spaces, so `bench/run` can
collect them and a person can still read them:

    NAME  orch VALUE UNIT  BASELINE VALUE UNIT  ratio R  goal GOAL  VERDICT[  (NOTE)]

NAME and BASELINE (the label of the baseline program or call) hold no spaces; VALUE and R
are numbers (thousands separators allowed); GOAL is `<=X`/`>=X` on the ratio, `<Xs` on orch's
own value in seconds, or `report` (no goal: the figure is only tracked); VERDICT is MET,
NOT MET or REPORT. The format is the one bench/report already prints, so it needs no change.
A bench that cannot measure a figure here prints `NAME  SKIPPED (why)`.
"""
from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Sequence

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:          # benches import orchestrator from this checkout
    sys.path.insert(0, str(ROOT))

LINE = re.compile(r"^(?P<name>\S+)  orch (?P<orch>\S+) (?P<unit>\S+)  (?P<base_label>\S+) "
                  r"(?P<base>\S+) (?P<base_unit>\S+)  ratio (?P<ratio>\S+)  goal (?P<goal>\S+)  "
                  r"(?P<verdict>MET|NOT MET|REPORT)(?:  (?P<note>.*))?$")
SKIP = re.compile(r"^(?P<name>\S+)  SKIPPED(?: (?P<note>.*))?$")
_GOAL = re.compile(r"^(<=|>=|<|>)([0-9.]+)(s?)$")


def num(value: float) -> str:
    """A number with about three significant digits; big ones with thousands separators."""
    if value != value or value in (float("inf"), float("-inf")):
        return "nan"
    size = abs(value)
    if size >= 10_000:
        return f"{value:,.0f}"
    if size >= 100:
        return f"{value:.0f}"
    if size >= 10:
        return f"{value:.1f}"
    if size >= 1:
        return f"{value:.2f}"
    if size >= 0.01:
        return f"{value:.3f}"
    return f"{value:.2g}"


def meets(goal: str, ratio: float, orch: float) -> bool | None:
    """Whether a goal holds: `<=X`/`>=X`/`<X`/`>X` on the ratio, with a trailing `s` on
    orch's value in seconds. None for `report` (nothing to meet)."""
    match = _GOAL.match(goal)
    if match is None:
        return None
    op, limit, absolute = match.group(1), float(match.group(2)), bool(match.group(3))
    value = orch if absolute else ratio
    return {"<=": value <= limit, ">=": value >= limit, "<": value < limit,
            ">": value > limit}[op]


def figure(name: str, orch: float, unit: str, base_label: str, base: float, goal: str,
           ratio: float | None = None, note: str | None = None) -> str:
    """Print (and return) one figure line. ratio defaults to orch / base."""
    if ratio is None:
        ratio = orch / base if base else float("inf")
    verdict = {True: "MET", False: "NOT MET", None: "REPORT"}[meets(goal, ratio, orch)]
    line = (f"{name}  orch {num(orch)} {unit}  {base_label} {num(base)} {unit}  "
            f"ratio {ratio:.3f}  goal {goal}  {verdict}")  # 3 decimals: 0.988 is not 0.99
    if note:
        line += f"  ({note})"
    print(line, flush=True)
    return line


def skipped(name: str, why: str) -> None:
    print(f"{name}  SKIPPED ({why})", flush=True)


def parse(line: str) -> dict[str, str] | None:
    """A figure or SKIPPED line as a dict of its fields; None for any other line."""
    match = LINE.match(line.rstrip("\n"))
    if match:
        fields = match.groupdict()
        note = (fields["note"] or "").strip()
        if note.startswith("(") and note.endswith(")"):
            note = note[1:-1]
        fields["note"] = note
        return fields
    match = SKIP.match(line.rstrip("\n"))
    if match:
        return {"name": match["name"], "verdict": "SKIPPED",
                "note": (match["note"] or "").strip().removeprefix("(").removesuffix(")")}
    return None


def wall(argv: Sequence[str], **kwargs) -> float:
    """Wall seconds of one run of argv (output discarded, must exit 0)."""
    kwargs.setdefault("stdout", subprocess.DEVNULL)
    kwargs.setdefault("stdin", subprocess.DEVNULL)
    start = time.perf_counter()
    subprocess.run(argv, check=True, timeout=600, **kwargs)
    return time.perf_counter() - start
