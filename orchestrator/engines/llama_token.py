"""llama-token, orch's per-token llama.cpp engine (agent/llama_token.py).

It loads a GGUF through the llama-cpp-python bindings, decodes greedily one token per
llama_decode and writes bmoe-cli's formats, so its output is parsed by the bmoe adapter's
parser: llama.cpp runs get token rows, the `# summary` trailer and the stdout summary lines
like bmoe runs. argv: `PYTHON SCRIPT -m MODEL -p PROMPT -n TOKENS FLAGS --csv CSV`.

engine_options:
- `python`: the interpreter on the device that has llama-cpp-python (default `python3`);
  `orch` means the interpreter orch itself runs in, for the `local` device (where
  `orch engines build llama.cpp` installed the bindings).

A cell with `route_trace: true` adds `--route-trace PATH`: the routing llama.cpp computed, read
from its graph evaluation callback (agent/llama_token.py, RouteCapture).
"""
from __future__ import annotations

import sys
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from orchestrator.engines.base import CellSpec
from orchestrator.engines.bmoe import BmoeAdapter
from orchestrator.shipped import shipped_file


class LlamaTokenOptions(BaseModel):
    """The engine_options llama-token reads: `python` (see above)."""

    model_config = ConfigDict(extra="forbid")
    python: str = "python3"


class LlamaTokenAdapter(BmoeAdapter):
    name = "llama-token"
    options_model = LlamaTokenOptions

    def builtin_binary(self) -> Path:
        return shipped_file("llama_token.py")

    def build_argv(self, cell: CellSpec) -> list[str]:
        if not cell.model_path:
            raise ValueError("llama-token needs a model (`models:` in the matrix)")
        python = str(cell.extra.get("python", "python3"))
        if python == "orch":
            python = sys.executable
        return [python, cell.binary, "-m", cell.model_path, "-p", cell.prompt,
                "-n", str(cell.tokens), *cell.flags, "--csv", cell.csv_path,
                *cell.route_trace_argv()]
