"""orch: a benchmark orchestrator for on-device LLM inference."""
__version__ = "0.1.0"
