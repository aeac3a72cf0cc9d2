"""Rows as the study's author orders and names them, the same in the report and `orch table`:
configs in the order the design file or the matrix lists them (`configs:`), each named by its
label, and the configs the design left out on purpose, with why.

A config neither lists (a grid's config of an older matrix, a run imported without a design
entry) keeps its place in run order after the listed ones, so no run is hidden by ordering.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from orchestrator.config.configs import expand_configs
from orchestrator.config.design import Design
from orchestrator.config.matrix import Matrix


def listed_configs(designs: Iterable[Design | None], matrices: Iterable[Matrix | None]
                   ) -> list[str]:
    """The configs in the order the sessions' design files and matrices write them (each
    session's in turn; a name listed twice keeps its first place)."""
    names: list[str] = []
    for design in designs:
        if design is not None:
            names += list(design.configs)
    for matrix in matrices:
        if matrix is not None:
            names += [name for name, _ in expand_configs(matrix)]
    return list(dict.fromkeys(names))


def in_order(configs: Iterable[str], listed: Sequence[str]) -> list[str]:
    """`configs` (in run order, repeats allowed) once each: the listed ones in `listed`'s
    order, then the others in run order. A `builds:` cell (`name@build`) sits where its
    config is listed, its builds in run order."""
    seen = list(dict.fromkeys(configs))
    rank = {name: i for i, name in enumerate(listed)}

    def place(item: tuple[int, str]) -> tuple[int, int]:
        first, name = item
        return rank.get(name, rank.get(name.partition("@")[0], len(listed))), first

    return [name for _, name in sorted(enumerate(seen), key=place)]


def config_label(config: str, matrix: Matrix | None, design: Design | None) -> str:
    """A config as the reader sees it: the matrix's `labels:` entry, else the design file's
    `label:`, else its name."""
    if matrix is not None and matrix.label(config) != config:
        return matrix.label(config)
    label = design.config_label(config) if design is not None else None
    return label or config


@dataclass(frozen=True)
class LeftOut:
    """A config not run on purpose for a model (a design's `left_out:`)."""

    config: str          # as the design names it (a config of `configs:` or free text)
    label: str           # its label when `configs:` describes it, else the name
    reason: str


def left_out(designs: Iterable[Design | None], model: str) -> list[LeftOut]:
    """The configs the sessions' design files left out of `model`'s runs, with why: each
    `left_out:` entry for every model or scoped `MODEL:CONFIG` to this one, once each."""
    out: dict[str, LeftOut] = {}
    for design in designs:
        if design is None:
            continue
        for config, reason in design.left_out_for(model):
            out.setdefault(config, LeftOut(config, config_label(config, None, design),
                                           reason.strip()))
    return list(out.values())
