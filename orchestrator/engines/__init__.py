"""Engine adapters by name (DESIGN §5)."""
from __future__ import annotations

from .base import CellSpec, EngineAdapter, RunParser, TokenRow

__all__ = ["CellSpec", "EngineAdapter", "RunParser", "TokenRow", "get_adapter", "ENGINE_NAMES"]

ENGINE_NAMES = ("moe-probe", "bmoe")


def get_adapter(name: str, options: dict | None = None) -> EngineAdapter:
    if name == "moe-probe":
        from .moe_probe import MoeProbeAdapter

        return MoeProbeAdapter()
    if name == "bmoe":
        from .bmoe import BmoeAdapter

        return BmoeAdapter()
    raise KeyError(f"unknown engine {name!r} (known: {', '.join(ENGINE_NAMES)})")
