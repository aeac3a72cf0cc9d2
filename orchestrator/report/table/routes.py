"""`orch routes` as markdown: the routing figures of one traced run and its cache replay
(the figures themselves are computed in results/routes.py and results/replay.py)."""
from __future__ import annotations

from typing import Any

from orchestrator.report.format.markdown import Table, render
from orchestrator.results.routes import ROWS, display


def figures_markdown(figures: dict[str, Any]) -> str:
    """The figures as one markdown table: figure, value, unit, JSON key."""
    table = Table(["figure", "value", "unit", "key"], ["---", "---:", "---", "---"])
    for key, label, unit, decimals in ROWS:
        if key in figures:
            table.rows.append([label, display(figures[key], decimals), unit, f"`{key}`"])
    return render(table)


def replay_markdown(replayed: dict[str, Any]) -> str:
    table = Table(["budget MiB", "policy", "decode hit %", "cumulative hit %", "MiB read"],
                  ["---:", "---", "---:", "---:", "---:"])
    for row in replayed["replay"]:
        table.rows.append([f'{row["budget_mib"]:g}', row["policy"],   # as the user gave it
                           display(row["hit_pct_decode"], 3), display(row["hit_pct_cum"], 3),
                           display(row["read_mib"], 1)])
    cycle = display(replayed["token_cycle_mib"], 0)
    return (f"### Cache replay\n\n{render(table)}\n\nOne token cycle (k experts in every "
            f"layer): {cycle} MiB. A global LRU cache smaller than that evicts each layer's "
            f"experts before the next token needs them: its decode hit rate falls towards 0 "
            f"(exactly 0 from about k experts under it).")
