"""The comparison table's columns (`orch compare`, the report's comparison section), by key:
which exist, which show by default, and how each side is named in a header.

A header names a side by its session's name (`nodesign`), or its device (`-d`), not by the
full label with the session id ("nodesign (session 2)"): the lines above the table say which
session each name is. Where two sides would read alike, their full labels are kept.

By default, two sides fit in nine columns: Model, Config, each side's tok/s, the run ids of
every side in one column, and per other side its ratio, interval, Holm-corrected p and
verdict; the raw p-value is one `--columns` away. A row whose matched configs differ in more
than the side (results/confounds.py) carries DIFFERS after its config's name.
"""
from __future__ import annotations

from collections.abc import Sequence

from orchestrator.report.format import ab_rows as ab_table
from orchestrator.report.format.cells import id_list, interval_cell, mean_cell, verdict_cell
from orchestrator.report.format.formatters import ratio
from orchestrator.results.comparison import ConfigRow, SideComparison
from orchestrator.results.query import Side
from orchestrator.stats.values import DASH

DIFFERS = "≠"       # the mark of a row whose two sides' runs differ in settings or tokens
# key -> what the column holds (the `--columns` help and the error listing the valid keys)
COLUMN_KEYS = {
    "model": "the model",
    "config": "the config (always shown)",
    "tps": "each side's mean tok/s [95% CI]",
    "runs": "the run ids behind each side's figure, one column",
    "ratio": "each other side's ratio to the reference",
    "ci": "its 95% interval",
    "p": "its Welch p-value",
    "p_holm": "its Holm-corrected p-value",
    "verdict": "faster / slower / no significant difference",
}
DEFAULT = ("model", "config", "tps", "runs", "ratio", "ci", "p_holm", "verdict")
TEXT_COLUMNS = (("", "Model"), ("", "Config"))    # left-aligned; every other is a figure
_PAIR = {"ratio": "ratio", "ci": "95% CI", "p": "p", "p_holm": "p (Holm)",
         "verdict": "verdict"}


def side_names(sides: Sequence[Side]) -> list[str]:
    """How the headers name each side: its session's name for a `--session` side, else its
    label; the full labels when two names would be the same."""
    names = []
    for side in sides:
        s = side.session
        name = getattr(s, "name", None)
        by_session = name and side.label == f"{name} (session {s.id})"
        names.append(str(name) if by_session else side.label)
    return names if len(set(names)) == len(names) else [s.label for s in sides]


def _keys(keys: Sequence[str] | None) -> list[str]:
    chosen = list(keys) if keys else list(DEFAULT)
    return chosen if "config" in chosen else ["config", *chosen]


def columns(comp: SideComparison, keys: Sequence[str] | None = None
            ) -> list[tuple[str, str]]:
    """(group, name) of every column shown, in the order of `keys` (default DEFAULT): the
    group is a side, a pair of sides, or "" for the row's own columns."""
    names = side_names(comp.sides)
    ref = names[0]
    cols: list[tuple[str, str]] = []
    for key in _keys(keys):
        if key == "model":
            cols.append(("", "Model"))
        elif key == "config":
            cols.append(("", "Config"))
        elif key == "tps":
            cols += [(name, "tok/s [95% CI]") for name in names]
        elif key == "runs":
            cols.append(("", f"run ids ({'; '.join(names)})"))
        else:
            cols += [(f"{other}/{ref}", _PAIR[key]) for other in names[1:]]
    return cols


def config_text(row: ConfigRow) -> str:
    """The config's name, and the other sides' own names where --match paired them:
    "anon-long ↔ dense_weights=anon"."""
    others = [m for m in dict.fromkeys(row.matched) if m and m != row.config]
    return " ↔ ".join([row.config] + others)


def differs(row: ConfigRow) -> bool:
    """Whether the row's sides ran the config differently (DIFFERS)."""
    return any(row.differs)


def _pair_cell(key: str, c: object) -> str:
    from orchestrator.stats.uncertainty import Comparison

    comp = c if isinstance(c, Comparison) else None
    if key == "ratio":
        return ratio(comp.ratio if comp is not None else None)
    if key == "ci":
        return interval_cell(comp)
    if key == "p":
        return ab_table.p_cell(comp.p_value if comp is not None else None)
    if key == "p_holm":
        return ab_table.p_cell(comp.p_adjusted if comp is not None else None)
    return verdict_cell(comp)


def row_cells(row: ConfigRow, keys: Sequence[str] | None = None) -> list[str]:
    cells: list[str] = []
    for key in _keys(keys):
        if key == "model":
            cells.append(row.model)
        elif key == "config":
            cells.append(config_text(row) + (f" {DIFFERS}" if differs(row) else ""))
        elif key == "tps":
            cells += [mean_cell(interval) for interval in row.means]
        elif key == "runs":
            cells.append("; ".join(id_list(ids) if ids else DASH for ids in row.run_ids))
        else:
            cells += [_pair_cell(key, c) for c in row.vs_reference]
    return cells


def summary_cells(comp: SideComparison, keys: Sequence[str] | None = None) -> list[str]:
    counts = set(comp.summary_configs)
    label = (f"geometric mean ({counts.pop()} configs)" if len(counts) == 1
             else "geometric mean")
    cells: list[str] = []
    for key in _keys(keys):
        if key in ("model", "runs"):
            cells.append("" if key == "model" else DASH)
        elif key == "config":
            cells.append(label)
        elif key == "tps":
            cells += [DASH] * len(comp.sides)
        else:
            cells += [ratio(v) if key == "ratio" else DASH for v in comp.summary]
    return cells


def cell_rows(comp: SideComparison, keys: Sequence[str] | None = None
              ) -> tuple[list[tuple[str, str]], list[list[str]]]:
    """(columns, rows) as plain text: the matched configs, then the geometric-mean summary.
    The Model column goes when no run names a model."""
    cols = columns(comp, keys)
    rows = [row_cells(r, keys) for r in comp.matched]
    if comp.matched:
        rows.append(summary_cells(comp, keys))
    if all(r.model == "-" for r in comp.rows) and ("", "Model") in cols:
        at = cols.index(("", "Model"))
        cols = cols[:at] + cols[at + 1:]
        rows = [r[:at] + r[at + 1:] for r in rows]
    return cols, rows
