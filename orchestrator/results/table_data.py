"""What `orch table` shows of a stored session, read and computed once (report/table/session.py
lays it out): the session's runs and their figures (with `--trim`/the quantile method asked
for), each (model, device) group's model facts and configs combined (ConfigFigures: the
pivot's cells), its A/B groups, the comparability caveats and the design file. Each group's
runs are in the author's config order (results/rows.py), a config's runs in run order.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from orchestrator.config.design import Design, session_design
from orchestrator.config.matrix import Matrix
from orchestrator.config.stored_matrix import stored_matrix
from orchestrator.db.rows import RunRow, SessionRow
from orchestrator.db.runs import Runs, Sessions
from orchestrator.db.store import Store
from orchestrator.results import ab
from orchestrator.results.drift import Caveat, session_warnings
from orchestrator.results.exclude import Excluded, split
from orchestrator.results.model_facts import ModelFacts, facts_for_group
from orchestrator.results.query import by_model_and_device
from orchestrator.results.rows import LeftOut, config_label, in_order, left_out, listed_configs
from orchestrator.results.trim import resolve_trim
from orchestrator.stats.config_figures import ConfigFigures, RunResult, combine_all
from orchestrator.stats.figures import RunFigures
from orchestrator.stats.values import is_missing

GroupKey = tuple[str, str]      # (model, device)


@dataclass(frozen=True)
class TableData:
    session_id: int
    session: SessionRow
    rows: list[RunRow]                       # the session's current runs, in run order
    figures: dict[int, RunFigures]           # by run id
    trim: int                                # tokens left out of the per-token figures
    groups: list[tuple[GroupKey, list[RunRow]]]
    facts: dict[GroupKey, ModelFacts]
    configs: dict[GroupKey, dict[str, ConfigFigures]]   # each group's configs combined
    ab_groups: list[ab.ABGroup] = field(default_factory=list)
    caveats: list[Caveat] = field(default_factory=list)
    design: Design | None = None             # an import's design file
    matrix: Matrix | None = None             # the session's stored matrix, parsed
    order: list[str] = field(default_factory=list)     # its configs in the author's order
    left_out: dict[str, list[LeftOut]] = field(default_factory=dict)  # model -> not run

    def label(self, config: str) -> str:
        """A config as its rows name it (results/rows.py config_label)."""
        return config_label(config, self.matrix, self.design)
    excluded: list[Excluded] = field(default_factory=list)   # left out on purpose, with why


def table_data(store: Store, session_id: int, quantile: str = "linear",
               baseline: ab.Baselines | None = None, trim: int | None = None,
               with_ab: bool = False, exclude: Sequence[str] = ()) -> TableData | None:
    """The session's tables' data; None when it has no runs. `trim`: `--trim N` (None: the
    session's own `trim:`, results/trim.py); `with_ab`: its A/B groups too; `exclude`:
    `--exclude` values, which with the design's `exclude:` leave runs out
    (results/exclude.py)."""
    rows = Runs(store).current(session_id)
    if not rows:
        return None
    session = Sessions(store).one(session_id)
    rows, excluded = split(rows, {session_id: session_design(session)}, exclude)
    if not rows:
        return None
    trim = resolve_trim(trim, [session])
    # each run's figures (stored, or computed for another trim or quantile method)
    figures = Runs(store).figures(rows, trim=trim, quantile_method=quantile)
    design, matrix = session_design(session), stored_matrix(session.matrix_text)
    order = in_order((r.config for r in rows), listed_configs([design], [matrix]))
    rank = {name: i for i, name in enumerate(order)}
    groups = [(key, sorted(members, key=lambda r: rank[r.config]))   # stable: run order
              for key, members in by_model_and_device(rows)]
    facts = {key: facts_for_group(store, session, key[0], key[1], members)
             for key, members in groups}
    configs = {}
    for key, members in groups:
        by_config: dict[str, list[RunResult]] = {}
        for r in members:
            by_config.setdefault(r.config, []).append(RunResult(r.id, r.status, figures[r.id]))
        configs[key] = combine_all(by_config)
    ab_groups = ab.session_groups(store, session_id, rows, figures, baseline) if with_ab else []
    return TableData(session_id, session, rows, figures, trim, groups, facts, configs,
                     ab_groups, session_warnings(store, session_id), design, matrix, order,
                     {model: left_out([design], model) for model, _ in dict.fromkeys(
                         key for key, _ in groups)}, excluded)


def deltas_to_first(means: Sequence[float | None]) -> list[float | None]:
    """Each measured mean after the first row minus the first measured one (the variants
    table's "(+0.05)"), unrounded; None for the first row, a mean not measured, and all when
    none is. In the rows' order: the first measured row is what the others are told against."""
    base = next((m for m in means if not is_missing(m)), None)
    return [m - base if i > 0 and base is not None and m is not None and not is_missing(m)
            else None for i, m in enumerate(means)]
