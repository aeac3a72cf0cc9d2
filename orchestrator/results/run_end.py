"""What `orch run` prints when it ends, read once for report/terminal/run_end.py: each
device's session (its runs and their figures, for `--runs` and the failure and warning
lines) and the configs of every device side by side. A config's figure is its ok runs'
mean tok/s with the 95% interval over them, and with two devices the ratio of the second to
the first, exactly as `orch compare -d A -d B` computes them (results/comparison.py), so the
closing table and a later `orch compare` agree.

When a device's previous session of the same matrix measured another engine build, the
comparison of the two builds (`orch compare --builds A B -d DEVICE -m MATRIX`: the same
comparison.build_side sides and comparison.build) is summarized as a BuildChange, for the
line "engine build changed since session N (A → B): ..."."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from orchestrator.db.runs import Sessions
from orchestrator.db.store import Store
from orchestrator.db.runs import Runs
from orchestrator.errors import ConfigError
from orchestrator.results import comparison
from orchestrator.results.history import build_label
from orchestrator.results.listings import Listing, session_listing
from orchestrator.results.query import Side


@dataclass(frozen=True)
class BuildChange:
    """A device's session measured build `after`; its previous session of the matrix,
    `since`, measured `before`: their comparison's significant changes (Holm-corrected)."""

    device: str
    matrix: str
    since: int                                  # the previous session's id
    before: str
    after: str
    slower: list[float]                         # the significantly slower configs' ratios
    faster: list[float]                         # the significantly faster configs' ratios
    configs: int                                # configs compared (a ratio on both builds)

    @property
    def slower_pct(self) -> float | None:
        """The slower configs' typical change: their ratios' geometric mean, in percent."""
        return _pct(comparison.geometric_mean(self.slower))

    @property
    def faster_pct(self) -> float | None:
        return _pct(comparison.geometric_mean(self.faster))

    @property
    def command(self) -> list[str]:
        """The `orch compare` that shows the table behind it."""
        return ["orch", "compare", "--builds", self.before, self.after, "-d", self.device,
                "-m", self.matrix]


@dataclass(frozen=True)
class RunEnd:
    """The sessions one `orch run` made, by device (in the order the devices were given)."""

    listings: dict[str, Listing]               # device -> its session's runs
    configs: comparison.SideComparison         # one side per device that has runs
    build_changes: list[BuildChange] = field(default_factory=list)

    @property
    def devices(self) -> list[str]:
        return [side.device for side in self.configs.sides]

    @property
    def models(self) -> list[str]:
        """The models of the configs, first seen first ("-" for a run without one)."""
        return list(dict.fromkeys(row.model for row in self.configs.rows))


def run_end(store: Store, sessions: Mapping[str, int]) -> RunEnd:
    """`sessions`: device -> the session `orch run` ran (or resumed) on it."""
    listings = {device: session_listing(store, sid) for device, sid in sessions.items()}
    sides = [Side(device, device, Sessions(store).one(sid),
                  [r for r in listings[device].rows if r.device == device])
             for device, sid in sessions.items()]
    sides = [side for side in sides if side.rows]
    changes = [c for side in sides if (c := build_change(store, side)) is not None]
    return RunEnd(listings, comparison.build(store, sides), changes)


def build_change(store: Store, side: Side) -> BuildChange | None:
    """The device's build change since its previous session of the matrix, when the engine
    build differs (one build each) and the two builds' comparison has significant changes;
    else None."""
    matrix = side.session.matrix_name
    earlier = Runs(store).session_ids(matrix=matrix, device=side.device,
                                      before=side.session.id) if matrix else []
    if not earlier:
        return None
    before = {build_label(r) for r in Runs(store).current(earlier[0])
              if r.device == side.device}
    after = {build_label(r) for r in side.rows}
    if len(before) != 1 or len(after) != 1 or None in before | after or before == after:
        return None
    a, b = before.pop(), after.pop()
    assert a is not None and b is not None
    try:
        comp = comparison.build(store, [comparison.build_side(store, x, side.device, matrix)
                                        for x in (a, b)])
    except ConfigError:         # a label that names several builds: no line, not a failure
        return None
    tests = [c for row in comp.rows for c in row.vs_reference if c is not None and c.ratio]
    significant = [c.ratio for c in tests if c.significant and c.ratio is not None]
    if not significant:
        return None
    return BuildChange(side.device, matrix, earlier[0], a, b,
                       [r for r in significant if r < 1], [r for r in significant if r > 1],
                       len(tests))


def _pct(ratio: float | None) -> float | None:
    return None if ratio is None else (ratio - 1.0) * 100.0
