"""What opens a (model, device) group section (group.md.j2): the model's facts and, for a
matrix that is a grid over two flags, the pivot of mean tok/s (format/grid.py, as `orch table`
shows it)."""
from __future__ import annotations

from typing import Any

from orchestrator.report.document.request import SectionRequest
from orchestrator.report.format import grid
from orchestrator.report.format import markdown as md
from orchestrator.results.model_facts import ModelFacts
from orchestrator.results.report_data import Group, ReportData

TEMPLATE = "group.md.j2"


def group_context(group: Group, data: ReportData, request: SectionRequest) -> dict[str, Any]:
    return group_facts_and_pivot(group)


_SOURCES = {"design file": "given by the design file", "GGUF header": "from the GGUF header",
            "engine settings": "from the engine's settings"}


def facts_line(facts: ModelFacts) -> str | None:
    """"`qwen` (given by the design file): Q4_K_M, 17.23 GiB; ≈1.51× device RAM (11.4 GiB)":
    the model's key (the heading shows its label), where its facts came from, the facts."""
    line = facts.line()
    if not line:
        return None
    where = ", ".join(_SOURCES.get(s, s) for s in facts.sources)
    return f"{md.md_code(facts.name)}{f' ({md.md_escape(where)})' if where else ''}: " \
        + md.md_escape(line)


def group_facts_and_pivot(g: Group) -> dict[str, Any]:
    """What opens a (model, device) section: the model's facts (file size, arch, layers,
    experts, top-k, size against the device's RAM), and for a grid over two flags the pivot of
    mean tok/s, the same as `orch table` shows (results/model_facts.py, report/format/grid.py)."""
    if g.facts is None:
        return {"facts": None, "pivot": None, "pivot_caption": None}
    facts = facts_line(g.facts)
    matrix = g.pivot_matrix
    pivot = grid.pivot(matrix, {a.config: a.values.get("mean") for a in g.configs})
    return {"facts": facts, "pivot": pivot,
            "pivot_caption": grid.pivot_caption(matrix)
            if pivot is not None and matrix is not None else None}
