"""A device's facts as a document says them: with the precision they were given and where
they came from (a design file's, a probe's, the session's snapshot)."""
from __future__ import annotations

from typing import Any

from orchestrator.report.format.formatters import gib_from_kb, when
from orchestrator.stats.values import DASH

DESIGN_SOURCE = "design file"    # config/design.py DeviceFacts.facts() marks its facts so


def ram_text(facts: dict[str, Any]) -> str:
    """The device's RAM with the precision it was given: a design file's GiB as written
    (11.4 GiB), a probe's MemTotal in GiB with its kB as read."""
    if facts.get("source") == DESIGN_SOURCE:
        given = facts.get("ram_gib")
        if isinstance(given, (int, float)):
            return f"{given:g} GiB"
        # stored by an older orch: only the kB computed from the GiB given, so the GiB alone
        return gib_from_kb(facts["mem_total_kb"]) if facts.get("mem_total_kb") else DASH
    if facts.get("mem_total_kb"):
        return f"{gib_from_kb(facts['mem_total_kb'])} ({facts['mem_total_kb']} kB)"
    return DASH


def facts_source(dev: Any) -> str:
    """Where a device's facts came from, as a reader needs it said."""
    if (dev.facts or {}).get("source") == DESIGN_SOURCE:
        return "given by the design file"
    if not dev.facts:
        return DASH
    how = "snapshot when the session ran" if dev.snapshot else "probed by the agent"
    return f"{how}, {when(dev.facts_at)}" if dev.facts_at is not None else how
