"""Expand a matrix into the ordered list of cells a device runs."""
from __future__ import annotations

import random
import shlex
from dataclasses import dataclass

from orchestrator.config.matrix import Matrix, expand_config_specs


@dataclass(frozen=True)
class Cell:
    model: str                 # model name from the matrix ("-" when the engine has none)
    model_path: str | None
    config: str
    flags: str                 # the flag string as written / generated
    repeat: int                # 0-based repeat index
    order: int = 0             # position in the run order
    route_trace: bool = False  # the engine writes a route trace (not part of the key: a
                               # matrix that turns tracing on resumes its earlier cells)

    @property
    def key(self) -> str:
        """Identifies the cell within its matrix: the unit --resume works on."""
        return f"{self.model}|{self.config}|{self.repeat}"

    @property
    def argv_flags(self) -> list[str]:
        return shlex.split(self.flags)


Config = tuple[str, str, bool]   # name, flag string, route_trace


def _units(configs: list[Config], pairs: list[list[str]]) -> list[list[Config]]:
    """Configs grouped into what runs back to back: a pair at its first member's place, every
    other config alone. `Matrix` has checked that each paired name is a config, once."""
    by_name = {config[0]: config for config in configs}
    paired = {name: i for i, pair in enumerate(pairs) for name in pair}
    units: list[list[Config]] = []
    placed: set[int] = set()
    for config in configs:
        name = config[0]
        if name not in paired:
            units.append([config])
        elif paired[name] not in placed:
            placed.add(paired[name])
            units.append([by_name[n] for n in pairs[paired[name]]])
    return units


def plan_cells(matrix: Matrix, seed: int | None = None, rounds: range | None = None,
               first_order: int = 0) -> list[Cell]:
    """All cells of `rounds` (default: the first `repeat.min`) in run order. Models are the
    outer loop; within a model: as-written: A A A B B B; interleaved: A B A B A B; shuffled:
    a seeded permutation (`seed` overrides the matrix's, so a run can record the seed it
    drew). Adaptive repeats plan each further round on its own (`rounds=range(k, k + 1)`,
    `first_order` = where the run order stands), which is one pass over the configs whatever
    the order: an added round is always interleaved."""
    rounds = range(matrix.repeat.min) if rounds is None else rounds
    configs = expand_config_specs(matrix)
    units = _units(configs, matrix.pairs)
    models: list[tuple[str, str | None]] = list(matrix.models.items()) or [("-", None)]
    base = matrix.seed if seed is None else seed
    # the first rounds keep the permutation a seed always gave; a later round gets its own
    rng = random.Random(base if rounds.start == 0 else f"{base}/{rounds.start}")
    cells: list[Cell] = []
    for model, path in models:
        # A unit is one config, or an A/B pair that always runs back to back.
        if matrix.order == "interleaved":
            block = [(u, r) for r in rounds for u in units]
        else:
            block = [(u, r) for u in units for r in rounds]
        if matrix.order == "shuffled":
            rng.shuffle(block)
        for unit, rep in block:
            for name, flags, trace in unit:
                cells.append(Cell(model=model, model_path=path, config=name, flags=flags,
                                  repeat=rep, route_trace=trace))
    return [Cell(**{**c.__dict__, "order": first_order + i}) for i, c in enumerate(cells)]
