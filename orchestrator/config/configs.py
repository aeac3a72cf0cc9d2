"""A matrix's configs as cells see them: `configs:` as written, crossed with the `grid:`
product, each a (name, flag string[, route trace]) in the one order every plan, table and
check uses. Apart from the matrix model (config/matrix.py) because plans, path checks, quality
probes and the report's pivot read the expansion without the model's validation rules."""
from __future__ import annotations

import itertools
import shlex
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from orchestrator.config.matrix_values import ConfigSpec


class ConfigSource(Protocol):
    """What the expansion reads of a matrix (config/matrix.py Matrix is one): declared here
    so that this module needs nothing of the model and the model can use it."""

    @property
    def configs(self) -> Mapping[str, str | ConfigSpec]: ...

    @property
    def grid(self) -> Mapping[str, Sequence[Any]]: ...

    @property
    def route_trace(self) -> bool: ...


def flag_value(flag: str, value: object) -> tuple[str, list[str]]:
    """One grid entry -> (name part, flag tokens). Booleans switch a bare flag on/off."""
    short = flag.lstrip("-")
    if isinstance(value, bool):
        return (f"{short}={'on' if value else 'off'}", [flag] if value else [])
    return (f"{short}={value}", [flag, str(value)])


def expand_configs(matrix: ConfigSource) -> list[tuple[str, str]]:
    """(name, flag string) pairs: `configs` as written, crossed with the `grid` product."""
    return [(name, flags) for name, flags, _ in expand_config_specs(matrix)]


def _flags_and_trace(matrix: ConfigSource, spec: str | ConfigSpec) -> tuple[str, bool]:
    if isinstance(spec, ConfigSpec):
        own = spec.route_trace
        return spec.flags, matrix.route_trace if own is None else own
    return spec, matrix.route_trace


def expand_config_specs(matrix: ConfigSource) -> list[tuple[str, str, bool]]:
    """(name, flag string, route_trace) triples, in `expand_configs`' order: a grid-crossed
    config traces as its `configs` entry says, a grid-only one as the matrix says."""
    grid_items: list[tuple[str, str]] = []
    if matrix.grid:
        flags = list(matrix.grid)
        for combo in itertools.product(*(matrix.grid[f] for f in flags)):
            parts = [flag_value(f, v) for f, v in zip(flags, combo)]
            name = ",".join(p[0] for p in parts)
            tokens = [t for p in parts for t in p[1]]
            grid_items.append((name, shlex.join(tokens)))
    if not matrix.configs:
        return [(name, flags, matrix.route_trace) for name, flags in grid_items]
    base = [(name, *_flags_and_trace(matrix, spec)) for name, spec in matrix.configs.items()]
    if not grid_items:
        return base
    return [(f"{cname}+{gname}", f"{cflags} {gflags}".strip(), trace)
            for cname, cflags, trace in base for gname, gflags in grid_items]
