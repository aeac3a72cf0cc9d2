"""moe-probe, orch's built-in synthetic expert-streaming engine
(docs/architecture.md, "moe-probe, the built-in engine").

It writes bmoe-cli's formats, so its output is parsed by the bmoe adapter's parser.
"""
from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict

from orchestrator.engines.base import CellSpec
from orchestrator.engines.bmoe import BmoeAdapter
from orchestrator.shipped import shipped_file


class MoeProbeOptions(BaseModel):
    """The engine_options moe-probe reads (build_argv): the device's interpreter and the
    directory of its synthetic expert files (default `<workdir>/probe-cache`)."""

    model_config = ConfigDict(extra="forbid")
    python: str = "python3"
    cache_dir: str | None = None


class MoeProbeAdapter(BmoeAdapter):
    name = "moe-probe"
    options_model = MoeProbeOptions

    def builtin_binary(self) -> Path:
        return shipped_file("moe_probe.py")

    def build_argv(self, cell: CellSpec) -> list[str]:
        python = str(cell.extra.get("python", "python3"))
        cache_dir = str(cell.extra.get("cache_dir", f"{cell.extra['workdir']}/probe-cache"))
        # a session's prompts and token counts come as requests on stdin (bmoe-cli's protocol)
        workload = ["--session"] if cell.session else ["--prompt", cell.prompt, "-n",
                                                        str(cell.tokens)]
        return [python, cell.binary, *workload, "--cache-dir", cache_dir, *cell.flags, "--csv", cell.csv_path,
                *cell.route_trace_argv()]
