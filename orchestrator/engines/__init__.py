"""Engine adapters by name (DESIGN §5)."""
from __future__ import annotations

from orchestrator.engines.base import CellSpec, EngineAdapter, RunParser, TokenRow

__all__ = ["CellSpec", "EngineAdapter", "RunParser", "TokenRow", "get_adapter", "ENGINE_NAMES"]

ENGINE_NAMES = ("moe-probe", "bmoe", "llama-bench", "llama-cli", "llama-completion", "llama-token",
                "generic")


def get_adapter(name: str, options: dict | None = None) -> EngineAdapter:
    """The adapter for `name`; `options` is the matrix's engine_options (only `generic` reads
    them here; a bad one raises ValueError naming the key)."""
    if name == "moe-probe":
        from orchestrator.engines.moe_probe import MoeProbeAdapter

        return MoeProbeAdapter()
    if name == "bmoe":
        from orchestrator.engines.bmoe import BmoeAdapter

        return BmoeAdapter()
    if name == "llama-bench":
        from orchestrator.engines.llama_bench import LlamaBenchAdapter

        return LlamaBenchAdapter()
    if name in ("llama-cli", "llama-completion"):
        from orchestrator.engines.llama_cli import LlamaCliAdapter

        # one adapter: both print the same timing block; the name is kept for the run rows
        return LlamaCliAdapter(name)
    if name == "llama-token":
        from orchestrator.engines.llama_token import LlamaTokenAdapter

        return LlamaTokenAdapter()
    if name == "generic":
        from orchestrator.engines.generic import GenericAdapter

        return GenericAdapter(options)
    raise KeyError(f"unknown engine {name!r} (known: {', '.join(ENGINE_NAMES)})")
