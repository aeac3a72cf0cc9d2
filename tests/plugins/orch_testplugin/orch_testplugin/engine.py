"""The `shbench` engine: a POSIX sh script that writes bmoe-format output, so orch's bmoe
parser reads it. The script ships with the plugin and orch pushes it to the device."""
from __future__ import annotations

from pathlib import Path

from orchestrator.engines.base import CellSpec, EngineAdapter, RunParser
from orchestrator.engines.bmoe import BmoeRunParser


class ShBenchAdapter(EngineAdapter):
    name = "shbench"
    writes_csv = True   # the agent tails the per-token CSV at cell.csv_path

    def build_argv(self, cell: CellSpec) -> list[str]:
        return [cell.binary, "--tokens", str(cell.tokens), "--csv", cell.csv_path, *cell.flags]

    def new_parser(self, prompt: str | None = None) -> RunParser:
        return BmoeRunParser(prompt=prompt)

    def builtin_binary(self) -> Path:
        return Path(__file__).with_name("shbench.sh")
