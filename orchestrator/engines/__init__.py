"""Engine adapters by name (DESIGN §5)."""
from __future__ import annotations

from .base import CellSpec, EngineAdapter, RunParser, TokenRow

__all__ = ["CellSpec", "EngineAdapter", "RunParser", "TokenRow", "get_adapter", "ENGINE_NAMES"]

ENGINE_NAMES = ("moe-probe", "bmoe", "llama-bench", "llama-cli", "llama-completion", "llama-token",
                "generic")


def get_adapter(name: str, options: dict | None = None) -> EngineAdapter:
    """The adapter for `name`; `options` is the matrix's engine_options (only `generic` reads
    them here; a bad one raises ValueError naming the key)."""
    if name == "moe-probe":
        from .moe_probe import MoeProbeAdapter

        return MoeProbeAdapter()
    if name == "bmoe":
        from .bmoe import BmoeAdapter

        return BmoeAdapter()
    if name == "llama-bench":
        from .llama_bench import LlamaBenchAdapter

        return LlamaBenchAdapter()
    if name in ("llama-cli", "llama-completion"):
        from .llama_cli import LlamaCliAdapter

        # one adapter: both print the same timing block; the name is kept for the run rows
        return LlamaCliAdapter(name)
    if name == "llama-token":
        from .llama_token import LlamaTokenAdapter

        return LlamaTokenAdapter()
    if name == "generic":
        from .generic import GenericAdapter

        return GenericAdapter(options)
    raise KeyError(f"unknown engine {name!r} (known: {', '.join(ENGINE_NAMES)})")
