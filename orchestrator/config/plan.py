"""Expand a matrix into the ordered list of cells a device runs."""
from __future__ import annotations

import random
import shlex
from dataclasses import dataclass

from orchestrator.config.configs import expand_config_specs
from orchestrator.config.matrix import Matrix
from orchestrator.config.session import SessionRequest, config_session, resolve
from orchestrator.errors import ConfigError
from orchestrator.stats.config_key import ConfigKey


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
    build: str | None = None   # `builds:`: the llama.cpp version this cell runs (its config
                               # name ends in `@build`, so the key tells builds apart)
    binary: str | None = None  # ... and that build's cached binary (else the matrix's binary)
    # a session cell's turns, resolved (config/session.py); empty for a one-shot cell
    session: tuple[SessionRequest, ...] = ()
    tokens: int | None = None  # a warm-up cell's own token count (else the matrix's)

    @property
    def config_key(self) -> ConfigKey:
        """The config this cell measures (stats/config_key.py)."""
        return ConfigKey.of(self.model, self.config, self.flags, build=self.build)

    @property
    def key(self) -> str:
        """Identifies the cell within its matrix: the unit --resume works on."""
        return self.config_key.cell(self.repeat)

    @property
    def matrix_config(self) -> str:
        """The config's name in the matrix (`t1` for a `builds:` cell `t1@0.3.30`)."""
        return self.config[:-len(self.build) - 1] if self.build else self.config

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
    # a build is one more dimension: every unit once per build, the builds of a unit next to
    # each other (interleaved: t1@A t1@B t2@A t2@B, round after round)
    builds: list[tuple[str | None, str | None]] = \
        list(matrix.build_binaries().items()) or [(None, None)]
    units = [(unit, build) for unit in _units(configs, matrix.pairs) for build in builds]
    models: list[tuple[str, str | None]] = \
        list(matrix.models.items()) or [("-", None)]  # type: ignore[arg-type]  # a {local: FILE} model is a ModelFile until run/model_push.py puts its device path in
    base = matrix.seed if seed is None else seed
    # the first rounds keep the permutation a seed always gave; a later round gets its own
    rng = random.Random(base if rounds.start == 0 else f"{base}/{rounds.start}")
    sessions = {name: _session(matrix, name) for name, _, _ in configs}
    cells: list[Cell] = []
    for model, path in models:
        # A unit is one config, or an A/B pair that always runs back to back.
        if matrix.order == "interleaved":
            block = [(u, r) for r in rounds for u in units]
        else:
            block = [(u, r) for u in units for r in rounds]
        if matrix.order == "shuffled":
            rng.shuffle(block)
        for (unit, (build, binary)), rep in block:
            for name, flags, trace in unit:
                cells.append(Cell(model=model, model_path=path,
                                  config=f"{name}@{build}" if build else name, flags=flags,
                                  repeat=rep, route_trace=trace, build=build, binary=binary,
                                  session=sessions[name]))
    return [Cell(**{**c.__dict__, "order": first_order + i}) for i, c in enumerate(cells)]


def _session(matrix: Matrix, config: str) -> tuple[SessionRequest, ...]:
    turns = config_session(matrix, config)
    if turns is None:
        return ()
    try:
        return resolve(matrix, turns)
    except ValueError as exc:
        raise ConfigError(f"config {config}: {exc}") from None
