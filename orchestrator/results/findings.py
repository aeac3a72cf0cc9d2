"""The Findings of a report: which differences the data support, which they do not, and
which are exact, per (model, device) group, taken from the A/B rows (results/ab.py: the one
owner of every change, interval, p-value and verdict; nothing is recomputed here).

- supported: the Holm-corrected test finds the config faster or slower than its baseline;
- exact: cache hit and flash read per token follow from the routing and the cache, not from
  timing: their differences (zero included) are facts with no noise;
- not supported: every other compared config: no significant difference, not tested (a
  single run on a side), or no run that ended ok.
Nothing is text: the words are report/document/findings.py's.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from orchestrator.results.ab import ABGroup, ABRow, Verdict
from orchestrator.stats.values import is_missing


@dataclass(frozen=True)
class GroupFindings:
    model: str
    device: str
    supported: list[ABRow] = field(default_factory=list)
    exact: list[ABRow] = field(default_factory=list)
    not_supported: list[ABRow] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.supported or self.exact or self.not_supported)


def has_exact(row: ABRow) -> bool:
    """Whether the row states a deterministic difference (cache hit or flash read)."""
    return not is_missing(row.cache_hit_delta_pp) or not is_missing(row.read_delta_pct)


def findings(groups: Sequence[ABGroup]) -> list[GroupFindings]:
    """Each group's compared configs sorted into what the data support, what is exact and
    what they do not support, in the A/B rows' order; groups without a comparison left out."""
    out = []
    for g in groups:
        found = GroupFindings(g.model, g.device)
        for row in g.rows:
            if row.is_baseline:
                continue
            if row.verdict in (Verdict.FASTER, Verdict.SLOWER):
                found.supported.append(row)
            else:
                found.not_supported.append(row)
            if row.ids and has_exact(row):
                found.exact.append(row)
        if found:
            out.append(found)
    return out
