"""The device behind each side of `orch compare`: its facts (SoC/CPU, cores, RAM, OS, CPU
governor, storage) and where they came from, so a ratio between two devices is read beside
what the devices are.

A side's facts are its session's own snapshot (what the agent probed when the session ran,
or, for an import, the design file's `device:`), else the device's newest probe, which may
postdate the runs and says so. No facts: none is invented (the view prints —).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from orchestrator.db.runs import devices_by_name
from orchestrator.db.store import Store
from orchestrator.results.query import Side

DESIGN_SOURCE = "design file"       # config/design.py DeviceFacts.facts() marks its facts so


@dataclass(frozen=True)
class SideDevice:
    """One side's device: the facts a comparison shows (raw values; the view formats them)
    and where they came from."""

    name: str
    facts: dict[str, Any] = field(default_factory=dict)
    source: str = ""                # "design file" | "probe" | "" (none)
    at: Any = None                  # when a probe read them (None for a design file)
    snapshot: bool = False          # the session's own facts, not the device's newest probe
    session_id: int | None = None

    def get(self, key: str) -> Any:
        return self.facts.get(key)

    @property
    def soc(self) -> str | None:
        f = self.facts
        return " / ".join(str(x) for x in dict.fromkeys(
            (f.get("prop.ro.soc.model") or f.get("prop.ro.board.platform"),
             f.get("cpu_model"))) if x) or None

    @property
    def os(self) -> str | None:
        f = self.facts
        text = str(f.get("os") or "")
        if f.get("prop.ro.build.version.sdk"):
            text += f" (SDK {f['prop.ro.build.version.sdk']})"
        return text.strip() or None


def side_devices(store: Store, sides: Sequence[Side]) -> list[SideDevice]:
    """Per side, its device's facts and their source (see the module doc)."""
    stored = devices_by_name(store, {s.device for s in sides})
    out = []
    for side in sides:
        own = side.session.device_facts
        if own:
            facts = dict(own)
            source = DESIGN_SOURCE if facts.get("source") == DESIGN_SOURCE else "probe"
            at = None if source == DESIGN_SOURCE else side.session.started_at
            out.append(SideDevice(side.device, facts, source, at, True, side.session.id))
            continue
        dev = stored.get(side.device)
        facts = dict(dev.facts or {}) if dev is not None else {}
        out.append(SideDevice(side.device, facts, "probe" if facts else "",
                              dev.facts_at if facts and dev is not None else None, False,
                              side.session.id))
    return out
