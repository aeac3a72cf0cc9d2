"""A matrix's grid over two flags as a table of mean tok/s (rows: the first flag's values,
columns: the second's), the same in the report's group section (document/group_facts.py) and
`orch table` (table/session.py)."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from orchestrator.config.configs import expand_configs
from orchestrator.config.matrix import Matrix
from orchestrator.report.format import markdown as md
from orchestrator.report.format.formatters import STATS
from orchestrator.stats.values import is_missing


def pivot(matrix: Matrix | None, means: Mapping[str, float | None]) -> md.Table | None:
    """A grid over two flags as rows = the first flag's values, columns = the second's, cells
    = mean tok/s (`means`: config name -> mean, e.g. of a config's ok runs); None when the
    matrix has no such grid (or crosses it with several `configs`)."""
    if matrix is None or len(matrix.grid) != 2 or len(matrix.configs) > 1:
        return None
    (rflag, rvalues), (cflag, cvalues) = matrix.grid.items()
    names = [name for name, _ in expand_configs(matrix)]    # the grid's product order
    if not any(not is_missing(means.get(n)) for n in names):
        return None
    mean = STATS["mean"].fmt
    corner = f"{rflag.lstrip('-')} ↓ {cflag.lstrip('-')} →"
    table = md.Table([md.md_escape(corner)] + [md.md_escape(_grid_value(v)) for v in cvalues],
                     ["---"] + ["---:"] * len(cvalues))
    for i, rv in enumerate(rvalues):
        cells = [mean(means.get(names[i * len(cvalues) + j])) for j in range(len(cvalues))]
        table.rows.append([md.md_escape(_grid_value(rv))] + cells)
    return table


def pivot_caption(matrix: Matrix) -> str:
    rflag, cflag = (f.lstrip("-") for f in matrix.grid)
    return f"**Mean tok/s by {md.md_escape(rflag)} × {md.md_escape(cflag)}**:"


def _grid_value(value: Any) -> str:
    return ("on" if value else "off") if isinstance(value, bool) else str(value)
