"""Device transports (docs/plugins.md): one class per device kind behind one interface
(base.py). Device kinds are plugins: each is an `orch.transports` entry point (orch's own in
pyproject.toml); `orchestrator.config.inventory.open_transport` builds one for a device of the
inventory."""
from __future__ import annotations

from orchestrator.transports.base import (
    CommandResult,
    LinkLost,
    Transport,
    TransportError,
)

__all__ = ["CommandResult", "LinkLost", "Transport", "TransportError"]
