"""Device transports (DESIGN §5): one class per device kind behind one interface. Device
kinds are plugins: each is an `orch.transports` entry point (orch's own in pyproject.toml);
see orchestrator/plugins.py and docs/plugins.md."""
from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.plugins import device_kind
from orchestrator.transports.base import (
    CommandResult,
    LinkLost,
    Transport,
    TransportError,
)

if TYPE_CHECKING:  # config.inventory imports transports.base: no import at run time
    from orchestrator.config.inventory import Inventory

__all__ = ["CommandResult", "LinkLost", "Transport", "TransportError", "open_transport"]


def open_transport(inventory: "Inventory", name: str) -> Transport:
    """Build (not yet connect) the transport for a named device of the inventory."""
    entry = inventory.get(name)
    return device_kind(entry.kind).from_entry(name, entry, inventory.workdir(name))
