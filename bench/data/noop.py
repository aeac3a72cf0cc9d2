"""An engine that does nothing (bench/engine_overhead: the agent's per-cell CPU)."""
