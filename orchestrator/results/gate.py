"""`orch compare --fail-on regression[:PCT]`: the CI gate's verdict on a comparison.

The gate computes nothing of its own: each (config, other side) takes the comparison's
Holm-corrected test (results/comparison.py), the same one the table's verdict column reads.
A *regression* is a comparison the table calls "slower" (significant after Holm, ratio below
1) whose slowdown, on the ratio's point estimate, is more than PCT percent (PCT 0: any
significant slowdown).
"""
from __future__ import annotations

from dataclasses import dataclass

from orchestrator.errors import ConfigError
from orchestrator.results.comparison import SideComparison
from orchestrator.stats.uncertainty import Comparison


@dataclass(frozen=True)
class GateCase:
    """One compared config against one other side: a JUnit testcase, a summary row."""

    model: str
    config: str
    reference: str              # the reference side's label
    other: str                  # the other side's label
    comparison: Comparison | None   # None: the config has no figure on one of the two
    regression: bool

    @property
    def tested(self) -> bool:
        """Whether the comparison had a test behind it (one run per side has none)."""
        return self.comparison is not None and self.comparison.p_adjusted is not None


@dataclass(frozen=True)
class GateResult:
    threshold_pct: float
    cases: list[GateCase]

    @property
    def regressions(self) -> list[GateCase]:
        return [c for c in self.cases if c.regression]

    @property
    def passed(self) -> bool:
        return not self.regressions


def parse_fail_on(spec: str) -> float:
    """`regression` or `regression:PCT` (PCT a non-negative number of percent, `%` allowed):
    the slowdown in percent beyond which a significant slowdown fails the gate."""
    kind, _, pct = spec.partition(":")
    if kind.strip() != "regression":
        raise ConfigError(f"--fail-on {spec}: want regression or regression:PCT "
                          f"(e.g. regression:5)")
    if not pct.strip():
        return 0.0
    try:
        value = float(pct.strip().rstrip("%"))
    except ValueError:
        raise ConfigError(f"--fail-on {spec}: PCT must be a number of percent "
                          f"(e.g. regression:5)") from None
    if not value >= 0 or value == float("inf"):
        raise ConfigError(f"--fail-on {spec}: PCT must be 0 or more")
    return value


def is_regression(c: Comparison | None, threshold_pct: float) -> bool:
    """The table's "slower" verdict (Holm-corrected p < 0.05, ratio < 1) beyond the
    threshold."""
    if c is None or c.p_adjusted is None or not c.significant or c.ratio is None:
        return False
    return c.ratio < 1.0 and (1.0 - c.ratio) * 100.0 > threshold_pct


def gate(comp: SideComparison, threshold_pct: float = 0.0) -> GateResult:
    """Every config on the reference and another side, judged (the table's rows, in order)."""
    cases = []
    for row in comp.rows:
        if row.means[0] is None:
            continue        # nothing to regress from
        for j, other in enumerate(comp.others, 1):
            if row.means[j] is None and not (row.failed and row.failed[j]):
                continue    # never run there: not a compared config
            c = row.vs_reference[j - 1]
            cases.append(GateCase(row.model, row.config, comp.reference.label, other.label,
                                  c, is_regression(c, threshold_pct)))
    return GateResult(threshold_pct, cases)
