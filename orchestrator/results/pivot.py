"""`orch table --pivot model`: the models of one session side by side, one row per config
that the models share, one column per model (its mean decode tok/s).

Configs of two models share a row when they have the same name, else the same settings (an
imported run's `flags` as key=value pairs, db/runs.parse_settings) once the keys that only
say which model ran (stats/config_key.py MODEL_KEYS) are set aside, else the same label in the import's design
file. Matches are tried in that order, and never put two configs of one model in one row (a
row is one config per model). A config no other model matches keeps a row of its own.
A cell is the config's mean tok/s (stats/config_figures.py: the mean of its ok runs' means).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from orchestrator.config.design import Design, session_design
from orchestrator.db.rows import RunRow, parse_settings
from orchestrator.db.runs import Runs, Sessions
from orchestrator.stats.config_figures import RunResult, combine
from orchestrator.stats.config_key import without_model_keys
from orchestrator.stats.figures import RunFigures


@dataclass(frozen=True)
class Cell:
    model: str
    config: str
    mean: float | None                   # mean of the ok runs' means; None: none ended ok
    run_ids: tuple[int, ...]             # the ok runs behind it


@dataclass
class PivotRow:
    cells: dict[str, Cell] = field(default_factory=dict)    # model -> its config
    matched_by: str = ""                 # "name", "settings", "label" (comma-joined), "": alone

    @property
    def names(self) -> list[str]:
        return list(dict.fromkeys(c.config for c in self.cells.values()))


@dataclass(frozen=True)
class Pivot:
    device: str
    models: list[str]                    # the columns, in run order
    rows: list[PivotRow]


def _settings(flags: str | None) -> frozenset[tuple[str, str]]:
    return frozenset(without_model_keys(parse_settings(flags)).items())


def pivots(runs: Sequence[RunRow], figures: Mapping[int, RunFigures],
           design: Design | None = None) -> list[Pivot]:
    """One pivot per device of the session's runs (`figures`: run id -> its figures)."""
    out = []
    for device in dict.fromkeys(r.device for r in runs):
        mine = [r for r in runs if r.device == device]
        out.append(_pivot(device, mine, figures, design))
    return out


def _pivot(device: str, runs: Sequence[RunRow], figures: Mapping[int, RunFigures],
           design: Design | None) -> Pivot:
    models = list(dict.fromkeys(r.model or "-" for r in runs))
    keys = list(dict.fromkeys((r.model or "-", r.config) for r in runs))
    cells, settings, labels = {}, {}, {}
    for model, config in keys:
        members = [r for r in runs if (r.model or "-", r.config) == (model, config)]
        combined = combine([RunResult(r.id, r.status, figures[r.id]) for r in members])
        cells[model, config] = Cell(model, config, combined.get("mean"),
                                    tuple(rid for rid in combined.ok
                                          if figures[rid].mean is not None))
        # a config whose runs disagree in settings has none to match by
        found = {_settings(r.flags) for r in members}
        settings[model, config] = found.pop() if len(found) == 1 else frozenset()
        labels[model, config] = design.config_label(config) if design is not None else None
    rows = [PivotRow({k[0]: cells[k]}) for k in keys]
    row_of = {k: rows[i] for i, k in enumerate(keys)}
    for how, key_of in (("name", lambda k: k[1]), ("settings", lambda k: settings[k] or None),
                        ("label", lambda k: labels[k])):
        for a in keys:
            for b in keys:
                ra, rb = row_of[a], row_of[b]
                if ra is rb or key_of(a) is None or key_of(a) != key_of(b):
                    continue
                if set(ra.cells) & set(rb.cells):
                    continue                 # one config per model in a row
                ra.cells.update(rb.cells)
                hows = [h for h in (ra.matched_by, rb.matched_by, how) if h]
                ra.matched_by = ", ".join(dict.fromkeys(", ".join(hows).split(", ")))
                for k, r in row_of.items():
                    if r is rb:
                        row_of[k] = ra
    kept = list({id(r): r for r in (row_of[k] for k in keys)}.values())
    return Pivot(device, models, kept)


def session_pivots(store: Any, session_id: int, quantile: str = "linear") -> list[Pivot] | None:
    """The pivots of a stored session (None when it has no runs): its runs' figures and its
    design file's labels (`orch table --pivot model`)."""
    rows = Runs(store).current(session_id)
    if not rows:
        return None
    figures = Runs(store).figures(rows, quantile_method=quantile)
    return pivots(rows, figures, session_design(Sessions(store).one(session_id)))
