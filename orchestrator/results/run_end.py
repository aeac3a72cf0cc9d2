"""What `orch run` prints when it ends, read once for report/terminal/run_end.py: each
device's session (its runs and their figures, for `--runs` and the failure and warning
lines) and the configs of every device side by side. A config's figure is its ok runs'
mean tok/s with the 95% interval over them, and with two devices the ratio of the second to
the first, exactly as `orch compare -d A -d B` computes them (results/comparison.py), so the
closing table and a later `orch compare` agree."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from orchestrator.db.runs import Sessions
from orchestrator.db.store import Store
from orchestrator.results import comparison
from orchestrator.results.listings import Listing, session_listing
from orchestrator.results.query import Side


@dataclass(frozen=True)
class RunEnd:
    """The sessions one `orch run` made, by device (in the order the devices were given)."""

    listings: dict[str, Listing]               # device -> its session's runs
    configs: comparison.SideComparison         # one side per device that has runs

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
    return RunEnd(listings, comparison.build(store, sides))
