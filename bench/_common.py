"""Shared by the benches in bench/: rounds of orch against its baseline, the figure line, goals.

A busy machine slows orch and its baseline alike only if both run at nearly the same moment.
So every bench measures them INTERLEAVED: `interleave` runs one measurement of each per round,
the order rotated every round (A B, B A, A B, ...) so a drift of the machine hits both sides,
and `figure` compares them round by round: the ratio of each round, then the MEDIAN of those
ratios (what the goal is checked against) and their range (min..max) over the rounds. One
round that a neighbour's burst of load slowed moves the median by at most one rank.

Every bench prints one line per figure, fields separated by two spaces, so `bench/run` can
collect them and a person can still read them:

    NAME  orch VALUE UNIT  BASELINE VALUE UNIT  ratio R  range LO..HI  rounds N  goal GOAL  VERDICT
    (then optionally `  (NOTE)`, on the same line)

NAME and BASELINE (the label of the baseline program or call) hold no spaces; VALUE is the
median of that side's rounds (a number, thousands separators allowed); R is the median of the
per-round ratios orch/baseline (so not exactly the quotient of the two medians), LO..HI their
smallest and largest, N the rounds; GOAL is `<=X`/`>=X` on the ratio, `<Xs` on orch's own
median in seconds, or `report` (no goal: the figure is only tracked); VERDICT is MET, NOT MET
or REPORT. A bench that cannot measure a figure here prints `NAME  SKIPPED (why)`.
"""
from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:          # benches import orchestrator from this checkout
    sys.path.insert(0, str(ROOT))

LINE = re.compile(r"^(?P<name>\S+)  orch (?P<orch>\S+) (?P<unit>\S+)  (?P<base_label>\S+) "
                  r"(?P<base>\S+) (?P<base_unit>\S+)  ratio (?P<ratio>\S+)  "
                  r"range (?P<low>\S+)\.\.(?P<high>\S+)  rounds (?P<rounds>\d+)  "
                  r"goal (?P<goal>\S+)  (?P<verdict>MET|NOT MET|REPORT)(?:  (?P<note>.*))?$")
SKIP = re.compile(r"^(?P<name>\S+)  SKIPPED(?: (?P<note>.*))?$")
_GOAL = re.compile(r"^(<=|>=|<|>)([0-9.]+)(s?)$")


def options(doc: str, quick: str, rounds: tuple[int, int],
            extra: Callable[[argparse.ArgumentParser], None] | None = None) -> argparse.Namespace:
    """A bench's command line: --quick (help `quick`), --rounds (default rounds[0] with --quick,
    else rounds[1]) and whatever `extra` adds. The description is the docstring's first part."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help=quick)
    parser.add_argument("--rounds", type=int, help="rounds of orch and its baseline, interleaved "
                        f"(default {rounds[1]}, {rounds[0]} with --quick)")
    if extra is not None:
        extra(parser)
    args = parser.parse_args()
    if args.rounds is None:
        args.rounds = rounds[0] if args.quick else rounds[1]
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    return args


def interleave(measures: Mapping[str, Callable[[], float]], rounds: int) -> dict[str, list[float]]:
    """Call every measure once per round, the order rotated by one each round; each measure's
    values in round order. With two measures that is A B, B A, A B, ...: neither side is
    always the one that runs first (a warmer cache) or last (closer to a load that builds up)."""
    names = list(measures)
    values: dict[str, list[float]] = {name: [] for name in names}
    for index in range(rounds):
        for offset in range(len(names)):
            name = names[(index + offset) % len(names)]
            values[name].append(measures[name]())
    return values


def best_of(measure: Callable[[], float], times: int) -> Callable[[], float]:
    """A measure that takes the least of `times` calls: for timings of a few ms, where one
    preemption would be the whole difference, the minimum is the machine's real speed."""
    return lambda: min(measure() for _ in range(times))


def timed(action: Callable[[], object]) -> Callable[[], float]:
    """A measure of the wall seconds of one call of action."""
    def measure() -> float:
        start = time.perf_counter()
        action()
        return time.perf_counter() - start
    return measure


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


def figure(name: str, orch: Sequence[float], unit: str, base_label: str, base: Sequence[float],
           goal: str, note: str | None = None) -> str:
    """Print (and return) one figure line from the rounds of orch and of its baseline (same
    length, same unit, round i of one measured next to round i of the other)."""
    if not orch or len(orch) != len(base):
        raise ValueError(f"{name}: {len(orch)} rounds of orch against {len(base)} of the baseline")
    ratios = [o / b if b else float("inf") for o, b in zip(orch, base)]
    ratio, orch_value = statistics.median(ratios), statistics.median(orch)
    verdict = {True: "MET", False: "NOT MET", None: "REPORT"}[meets(goal, ratio, orch_value)]
    # 3 decimals: 0.988 is not 0.99
    line = (f"{name}  orch {num(orch_value)} {unit}  {base_label} "
            f"{num(statistics.median(base))} {unit}  ratio {ratio:.3f}  "
            f"range {min(ratios):.3f}..{max(ratios):.3f}  rounds {len(ratios)}  goal {goal}  "
            f"{verdict}")
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
        fields["note"] = (fields["note"] or "").strip().removeprefix("(").removesuffix(")")
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
