"""Files orch ships to devices from the repository's agent/ folder (installed as the
`orchestrator.agent` data package): the agent itself and the Python engines it can run
(moe_probe.py, llama_token.py). A module of its own at the bottom of the layers, because both
the engines that name these files and the run layer that pushes them need it."""
from __future__ import annotations

from importlib import resources
from pathlib import Path

AGENT_NAME = "orch-agent.sh"


def shipped_file(name: str) -> Path:
    """A file shipped in agent/ (the agent itself, moe_probe.py, ...)."""
    return Path(str(resources.files("orchestrator.agent").joinpath(name)))


def agent_source() -> Path:
    return shipped_file(AGENT_NAME)
