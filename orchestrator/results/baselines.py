"""Which configs a (model, device) group's A/B rows are taken against (results/ab.py).

- `--baseline` (`-b CONFIG`, `-b MODEL:CONFIG`, repeatable: `parse_baselines` checks them
  against the runs once, for every command that takes them) where those configs ran in the
  group; else the matrix's `baseline_for(model)`; an imported session has no matrix: its
  design file's `baselines_for(model)` (config/design.py, one or several), else a config
  whose name has the word `baseline` or `base` (`qwen_base_ov`: study folders name their
  reference run so), else the group's first config in run order.
- A model may have several baselines (a design's `baseline: {MODEL: [a, b]}`, or two `-b
  MODEL:CONFIG`): each gets its own rows, and `members` says which configs each compares.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence

from orchestrator.config.design import Design
from orchestrator.config.matrix import Matrix
from orchestrator.db.rows import RunRow
from orchestrator.errors import ConfigError

Baselines = Mapping[str, Sequence[str]]     # model -> the configs its others are compared with

_BASE_WORD = re.compile(r"(?:^|[_-])(?:baseline|base)(?:$|[_-])", re.IGNORECASE)


def named_baseline(configs: Sequence[str]) -> str | None:
    """The first config whose name has `baseline` or `base` as a whole `_`/`-` separated
    word (`qwen_base_ov`, `baseline-k8`; not `database` or `basement`)."""
    return next((c for c in configs if _BASE_WORD.search(c)), None)


def choose_baselines(model: str, configs: Sequence[str], matrix: Matrix | None = None,
                     design: Design | None = None,
                     override: str | Sequence[str] | None = None) -> list[str]:
    """A group's baselines, in the order given: those of `override` that ran in the group,
    else the matrix's, else the import's design file's (those that ran; the first when none
    did, so that the reader is told it did not run), else a config named as one, else the
    first in run order."""
    wanted = [override] if isinstance(override, str) else list(override or [])
    ran = [c for c in wanted if c in configs]
    if ran:
        return ran
    if matrix is not None:
        return [matrix.baseline_for(model)]
    chosen = design.baselines_for(model) if design is not None else []
    if chosen:
        return [c for c in chosen if c in configs] or chosen[:1]
    return [named_baseline(configs) or next(iter(configs), "")]


def choose_baseline(model: str, configs: Sequence[str], matrix: Matrix | None = None,
                    design: Design | None = None, override: str | None = None) -> str:
    """The group's first baseline (`choose_baselines`)."""
    return choose_baselines(model, configs, matrix, design, override)[0]


def members(baselines: Sequence[str], configs: Sequence[str],
            paired: Callable[[str, str], bool],
            distance: Callable[[str, str], int] | None = None) -> dict[str, list[str]]:
    """baseline -> the configs its rows compare, in run order. One baseline: every other
    config. Several: a config paired with baselines (`pairs:`) goes under those; any other
    non-baseline config under the baseline it differs from in the fewest settings
    (`distance`: a study's second baseline is the base of its own variants, `cache 5000` of
    `cache 5000 + prefetch 1`), under each of the nearest when they tie, under the first
    baseline when nothing tells them apart."""
    if len(baselines) == 1:
        return {baselines[0]: [c for c in configs if c != baselines[0]]}
    out: dict[str, list[str]] = {b: [] for b in baselines}
    for c in configs:
        if c in baselines:
            # a later baseline against an earlier one only when a pair says so
            out.update({b: out[b] + [c] for b in baselines[:baselines.index(c)]
                        if paired(b, c)})
            continue
        under = [b for b in baselines if paired(b, c)]
        if not under and distance is not None:
            far = {b: distance(b, c) for b in baselines}
            under = [b for b in baselines if far[b] == min(far.values())]
        for b in under or baselines[:1]:
            out[b].append(c)
    return out


def _names(values: Sequence[str]) -> str:
    return ", ".join(values[:12]) + (", ..." if len(values) > 12 else "")


def parse_baselines(specs: Sequence[str], runs: Sequence[RunRow], where: str
                    ) -> dict[str, list[str]]:
    """`-b CONFIG` / `-b MODEL:CONFIG` (repeatable) as model -> configs, checked against the
    runs they apply to (`where` names them in messages: "session 3"). A bare CONFIG applies
    to every model that ran it; MODEL:CONFIG to that model (split at the last colon: config
    names never hold one, model names may); CONFIG may be a unique prefix of a config's name.
    Several for one model: each is a baseline with
    its own rows. An unknown config or model, or a config the model did not run: a one-line
    ConfigError naming the choices."""
    ran: dict[str, list[str]] = {}                # model -> its configs, in run order
    for r in runs:
        configs = ran.setdefault(r.model or "-", [])
        if r.config not in configs:
            configs.append(r.config)
    every = list(dict.fromkeys(c for cs in ran.values() for c in cs))
    chosen: dict[str, list[str]] = {}
    for spec in specs:
        model, colon, config = spec.rpartition(":")
        if not config:
            raise ConfigError(f"-b {spec}: no config named (give CONFIG or MODEL:CONFIG)")
        if colon and model not in ran:
            raise ConfigError(f"-b {spec}: no model {model!r} in {where} "
                              f"(models: {_names(list(ran))})")
        config = _by_prefix(spec, config, ran[model] if colon else every)
        if colon and config not in ran[model]:
            raise ConfigError(f"-b {spec}: model {model!r} did not run {config!r} in {where} "
                              f"(its configs: {_names(ran[model])})")
        if not colon and config not in every:
            raise ConfigError(f"-b {spec}: no config {config!r} in {where} "
                              f"(configs: {_names(every)})")
        for m in [model] if colon else [m for m, cs in ran.items() if config in cs]:
            if config not in chosen.setdefault(m, []):
                chosen[m].append(config)
    return chosen


def _by_prefix(spec: str, config: str, configs: Sequence[str]) -> str:
    """`config` itself when it ran, else the one config it is a prefix of (`-b base` for
    `baseline-k8`); several: a ConfigError naming them. None: `config` (refused below,
    with the list)."""
    if config in configs:
        return config
    found = [c for c in configs if c.startswith(config)]
    if len(found) > 1:
        raise ConfigError(f"-b {spec}: {config!r} begins several configs: {_names(found)} "
                          f"(give more of it)")
    return found[0] if found else config


def runs_where(runs: Sequence[RunRow]) -> str:
    """Where a set of runs comes from, for `parse_baselines`' messages: "session 3",
    "sessions 3, 4"."""
    sids = sorted({r.session_id for r in runs})
    return f"session{'s' if len(sids) != 1 else ''} {', '.join(map(str, sids))}"
