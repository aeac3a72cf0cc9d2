"""Engine adapters (DESIGN §5). Engines are plugins: each is an `orch.engines` entry point
(orch's own in pyproject.toml); see orchestrator/plugins.py and docs/plugins.md."""
from __future__ import annotations

from orchestrator.engines.base import CellSpec, EngineAdapter, RunParser, TokenRow
from orchestrator.plugins import engine_names, make_adapter

__all__ = ["CellSpec", "EngineAdapter", "RunParser", "TokenRow", "get_adapter", "engine_names"]


def get_adapter(name: str, options: dict | None = None) -> EngineAdapter:
    """The adapter for `name`; `options` is the matrix's engine_options. An unknown name raises
    UnknownPlugin (a KeyError listing the known ones), a bad option ValueError naming the key,
    a plugin that cannot be imported PluginError (a ConfigError)."""
    return make_adapter(name, options)
