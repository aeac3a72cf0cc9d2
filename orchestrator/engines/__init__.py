"""Engine adapters (docs/engines.md): argv for a cell, C/O/E lines -> token rows and one
RunRecord. Engines are plugins: each is an `orch.engines` entry point (orch's own in
pyproject.toml); `orchestrator.plugins.get_adapter(name)` makes one (docs/plugins.md)."""
from __future__ import annotations

from orchestrator.engines.base import CellSpec, EngineAdapter, RunParser, TokenRow

__all__ = ["CellSpec", "EngineAdapter", "RunParser", "TokenRow"]
