"""A/B rows: every config of a (model, device) group against its model's baseline, with the
uncertainty a reader can check (docs/architecture.md, "Statistics").

- The baseline is chosen per group, never across models or devices: `--baseline` where that
  config ran in the group, else the matrix's `baseline_for(model)`; an imported session has
  no matrix: its design file's `baseline_for(model)` (config/design.py), else a config whose
  name has the word `baseline` or `base` (`qwen_base_ov`: study folders name their reference
  run so), else the group's first config in run order.
- Each config's mean decode tok/s comes with its 95% interval over its ok runs' means, and its
  change from the baseline with an interval on the % change and a p-value
  (`uncertainty.compare`): paired by round when both ran in every round back to back (an
  interleaved order, or the two are an A/B pair of the matrix), Welch's test otherwise.
- p-values are Holm-corrected across every comparison of one report or table, and a change is
  called faster or slower only when the corrected test says so.
- Cache hit and flash read per token are deterministic for a given routing: their differences
  are shown as they are, with no noise caveat.
- Runs that did not end ok take part in nothing.
- Baselines by name (`-b CONFIG`, `-b MODEL:CONFIG`): `parse_baselines` checks them against
  the runs once, for every command that takes them, and gives model -> config.
- A row that cannot be tested (a single run on a side) carries the noise floor: the largest
  spread between repeats of one config of its model and device (in the session, else in
  the newest earlier session that has repeats), which its change must beat to mean
  anything; and a single run's within-run interval when the statistics have one.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from orchestrator.config.design import Design, session_design
from orchestrator.config.matrix import Matrix
from orchestrator.config.stored_matrix import stored_matrix
from orchestrator.db.rows import RunRow
from orchestrator.db.runs import Runs, Sessions
from orchestrator.errors import ConfigError
from orchestrator.results.query import by_model_and_device
from orchestrator.results.rows import config_label
from orchestrator.stats.config_figures import ConfigFigures, RunResult, combine
from orchestrator.stats.figures import RunFigures
from orchestrator.stats.statistics import delta_pct
from orchestrator.stats.status import Status
from orchestrator.stats.uncertainty import ALPHA, Comparison, Interval, compare, correct
from orchestrator.stats.values import is_missing


class Verdict(StrEnum):
    """What an A/B row says about its config against the baseline."""

    BASELINE = "baseline"
    NO_OK_RUN = "no run ended ok"
    NOT_TESTED = "not tested"             # one measurement on a side: nothing to test
    FASTER = "faster"                     # the corrected test finds it faster
    SLOWER = "slower"
    NO_DIFFERENCE = "no significant difference"


@dataclass(frozen=True)
class ABRow:
    """One config of a group, against the group's baseline."""

    config: str
    label: str                         # the matrix's `labels:` entry, else the name
    is_baseline: bool
    interval: Interval                 # mean decode tok/s over the ok runs' means, 95% CI
    comparison: Comparison | None      # vs the baseline (None: the baseline, or no ok run)
    ids: tuple[int, ...]               # the ok runs every figure of the row comes from
    failed: tuple[int, ...]            # runs that did not end ok: in no figure
    cache_hit_pct: float | None
    read_mib_per_token: float | None
    cache_hit_delta_pp: float | None   # percentage points; deterministic, no interval
    read_delta_pct: float | None
    # untested rows: the largest spread (%) between repeats of one config, and which config
    noise_floor_pct: float | None = None
    noise_floor_from: str | None = None
    # one ok run: its own interval over its tokens (Runs.stats' tps_ci_low/high), if any
    within_run: tuple[float, float] | None = None
    # energy (docs/energy.md): mean J/token with its interval, and the change against the
    # baseline's, tested as tok/s is (ratio of geometric means; Holm over the energy tests)
    j_per_token: Interval | None = None
    energy: Comparison | None = None

    @property
    def verdict(self) -> Verdict:
        """What the row says about the config, claiming a difference only when the corrected
        test finds one (its words: report/format/ab_rows.py verdict_words)."""
        if self.is_baseline:
            return Verdict.BASELINE
        c = self.comparison
        if c is None:
            return Verdict.NO_OK_RUN
        if c.p_value is None:
            return Verdict.NOT_TESTED
        if c.significant and c.ratio is not None and c.ratio != 1.0:
            return Verdict.FASTER if c.ratio > 1.0 else Verdict.SLOWER
        return Verdict.NO_DIFFERENCE


@dataclass(frozen=True)
class ABGroup:
    model: str
    device: str
    baseline: str
    rows: list[ABRow]                  # the baseline first, then the others in run order
    note: str | None = None            # why there is no comparison (then `rows` is empty)
    family: int = 0                    # comparisons Holm-corrected together (the document's)


# ---- building the rows -------------------------------------------------------------------

def _paired(matrix: Matrix | None, base: str, config: str) -> bool:
    """Both configs ran in every round, back to back or in one interleaved pass."""
    if matrix is None:
        return False
    return matrix.order == "interleaved" or any(base in p and config in p for p in matrix.pairs)


def _by_round(runs: Sequence[RunRow], figures: Mapping[int, RunFigures],
              key: str = "mean") -> dict[tuple[int, int], float | None]:
    return {(r.session_id, r.repeat_index or 0): figures[r.id].get(key) for r in runs}


_BASE_WORD = re.compile(r"(?:^|[_-])(?:baseline|base)(?:$|[_-])", re.IGNORECASE)


def named_baseline(configs: Sequence[str]) -> str | None:
    """The first config whose name has `baseline` or `base` as a whole `_`/`-` separated
    word (`qwen_base_ov`, `baseline-k8`; not `database` or `basement`)."""
    return next((c for c in configs if _BASE_WORD.search(c)), None)


def choose_baseline(model: str, configs: Sequence[str], matrix: Matrix | None = None,
                    design: Design | None = None, override: str | None = None) -> str:
    """A group's baseline: `override` where it ran in the group, else the matrix's, else the
    import's design file's, else a config named as one, else the first in run order."""
    if override is not None and override in configs:
        return override
    if matrix is not None:
        return matrix.baseline_for(model)
    chosen = design.baseline_for(model) if design is not None else None
    return chosen or named_baseline(configs) or next(iter(configs), "")


Baselines = Mapping[str, str]           # model -> the config its others are compared with


def _names(values: Sequence[str]) -> str:
    return ", ".join(values[:12]) + (", ..." if len(values) > 12 else "")


def parse_baselines(specs: Sequence[str], runs: Sequence[RunRow], where: str) -> dict[str, str]:
    """`-b CONFIG` / `-b MODEL:CONFIG` (repeatable) as model -> config, checked against the
    runs they apply to (`where` names them in messages: "session 3"). A bare CONFIG applies
    to every model that ran it; MODEL:CONFIG to that model (split at the last colon: config
    names never hold one, model names may). An unknown config or model, a config the model
    did not run, or two choices for one model: a one-line ConfigError naming the choices."""
    ran: dict[str, list[str]] = {}                # model -> its configs, in run order
    for r in runs:
        configs = ran.setdefault(r.model or "-", [])
        if r.config not in configs:
            configs.append(r.config)
    every = list(dict.fromkeys(c for cs in ran.values() for c in cs))
    chosen: dict[str, tuple[str, str]] = {}      # model -> (config, the -b that chose it)
    for spec in specs:
        model, colon, config = spec.rpartition(":")
        if not config:
            raise ConfigError(f"-b {spec}: no config named (give CONFIG or MODEL:CONFIG)")
        if colon and model not in ran:
            raise ConfigError(f"-b {spec}: no model {model!r} in {where} "
                              f"(models: {_names(list(ran))})")
        if colon and config not in ran[model]:
            raise ConfigError(f"-b {spec}: model {model!r} did not run {config!r} in {where} "
                              f"(its configs: {_names(ran[model])})")
        if not colon and config not in every:
            raise ConfigError(f"-b {spec}: no config {config!r} in {where} "
                              f"(configs: {_names(every)})")
        for m in [model] if colon else [m for m, cs in ran.items() if config in cs]:
            if m in chosen and chosen[m][0] != config:
                raise ConfigError(f"-b {chosen[m][1]} and -b {spec}: two baselines for model "
                                  f"{m!r} (give one per model)")
            chosen[m] = (config, spec)
    return {m: config for m, (config, _) in chosen.items()}


def runs_where(runs: Sequence[RunRow]) -> str:
    """Where a set of runs comes from, for `parse_baselines`' messages: "session 3",
    "sessions 3, 4"."""
    sids = sorted({r.session_id for r in runs})
    return f"session{'s' if len(sids) != 1 else ''} {', '.join(map(str, sids))}"


def noise_floor(repeats: Mapping[str, Sequence[float | None]]) -> tuple[float, str] | None:
    """(largest spread in %, its config) over configs measured two or more times: the largest
    |change| between two repeats of one config (max/min − 1). A single-run change smaller
    than this is within what repeating one config already moves."""
    best: tuple[float, str] | None = None
    for config, values in repeats.items():
        xs = [float(v) for v in values if not is_missing(v) and float(v) > 0]
        if len(xs) < 2:
            continue
        spread = (max(xs) / min(xs) - 1) * 100
        if best is None or spread > best[0]:
            best = (spread, config)
    return best


# (model, device, session id) -> earlier repeats: {config as named for the reader: means}
EarlierRepeats = Callable[[str, str, int], Mapping[str, Sequence[float | None]]]


def store_repeats(store: Any) -> EarlierRepeats:
    """Earlier repeats from the store: the newest session before this one, on the device,
    whose runs of the model repeat a config (the device's most recent measure of noise)."""

    def earlier(model: str, device: str, session_id: int) -> dict[str, list[float | None]]:
        runs = Runs(store)
        for sid in runs.session_ids(device=device, before=session_id):
            ok = [r for r in Runs(store).current(sid)
                  if r.model == model and r.device == device and r.status == Status.OK]
            counts: dict[str, int] = {}
            for r in ok:
                counts[r.config] = counts.get(r.config, 0) + 1
            ok = [r for r in ok if counts[r.config] >= 2]
            if not ok:
                continue
            figures = runs.figures(ok)
            out: dict[str, list[float | None]] = {}
            for r in ok:
                out.setdefault(f"{r.config}, session {sid}", []).append(figures[r.id].mean)
            return out
        return {}
    return earlier


def _within_run(figures: Mapping[int, RunFigures], ids: Sequence[int]
                ) -> tuple[float, float] | None:
    if len(ids) != 1:
        return None
    low, high = figures[ids[0]].tps_ci_low, figures[ids[0]].tps_ci_high
    return None if low is None or high is None else (low, high)


def _with_noise_floor(group: ABGroup, members: Sequence[RunRow],
                      figures: Mapping[int, RunFigures],
                      earlier: EarlierRepeats | None) -> ABGroup:
    """The group's untested rows with the noise floor of the session's repeats of the group,
    else of the earlier ones."""
    def untested(r: ABRow) -> bool:
        return r.comparison is not None and r.comparison.p_value is None

    if not any(untested(r) for r in group.rows):
        return group
    repeats: dict[str, list[float | None]] = {}
    for r in members:
        if r.status == Status.OK:
            repeats.setdefault(r.config, []).append(figures[r.id].mean)
    floor = noise_floor(repeats)
    if floor is None and earlier is not None and members:
        floor = noise_floor(earlier(group.model, group.device, members[0].session_id))
    if floor is None:
        return group
    return replace(group, rows=[
        replace(r, noise_floor_pct=floor[0], noise_floor_from=floor[1]) if untested(r) else r
        for r in group.rows])


def _group(model: str, device: str, members: list[RunRow], figures: Mapping[int, RunFigures],
           matrix: Matrix | None, override: str | None,
           design: Design | None = None) -> ABGroup | None:
    configs: dict[str, list[Any]] = {}
    for r in members:
        configs.setdefault(r.config, []).append(r)
    if len(configs) < 2:
        return None                     # nothing to compare with
    baseline = choose_baseline(model, list(configs), matrix, design, override)
    if baseline not in configs:
        return ABGroup(model, device, baseline, [], f"The baseline {baseline} did not run in "
                                                    f"this group: no A/B comparison.")
    ok = {name: [r for r in rs if r.status == Status.OK] for name, rs in configs.items()}
    if not ok[baseline]:
        return ABGroup(model, device, baseline, [], f"The baseline {baseline} has no run that "
                                                    f"ended ok: no A/B comparison.")
    # each config's figures over its runs (stats/config_figures.py): the interval, the means
    # the tests take, the averaged cache hit and flash read
    combined = {name: combine([RunResult(r.id, r.status, figures[r.id]) for r in rs])
                for name, rs in configs.items()}
    base = combined[baseline]
    base_rounds = _by_round(ok[baseline], figures)
    rows = []
    for name in [baseline] + [c for c in configs if c != baseline]:
        config, good = combined[name], ok[name]
        comparison = None
        if good and name != baseline and _paired(matrix, baseline, name):
            rounds = _by_round(good, figures)
            keys = sorted(set(base_rounds) | set(rounds))
            comparison = compare([base_rounds.get(k) for k in keys],
                                 [rounds.get(k) for k in keys], paired=True)
        elif good and name != baseline:
            comparison = compare(base.of_runs("mean"), config.of_runs("mean"))
        hit, read = config.get("cache_hit_pct"), config.get("read_mib_per_token")
        base_hit = base.get("cache_hit_pct")
        joules, energy = _energy(figures, base, config, ok[baseline], good, name != baseline
                                 and _paired(matrix, baseline, name))
        rows.append(ABRow(
            config=name, label=config_label(name, matrix, design),
            is_baseline=name == baseline,
            interval=config.mean,
            comparison=comparison, ids=config.ok, failed=config.not_ok,
            cache_hit_pct=hit, read_mib_per_token=read,
            cache_hit_delta_pp=None if hit is None or base_hit is None else hit - base_hit,
            read_delta_pct=delta_pct(base.get("read_mib_per_token"), read),
            within_run=_within_run(figures, config.ok),
            j_per_token=joules, energy=energy if name != baseline else None))
    return ABGroup(model, device, baseline, rows)


def _energy(figures: Mapping[int, RunFigures], base: ConfigFigures, config: ConfigFigures,
            base_runs: Sequence[RunRow], good: Sequence[RunRow],
            paired: bool) -> tuple[Interval | None, Comparison | None]:
    """(mean J/token with its 95% interval, the change against the baseline's), or Nones
    where no ok run measured energy."""
    values = config.of_runs("j_per_token")
    if all(v is None for v in values):
        return None, None
    interval = config.interval("j_per_token")
    if paired:
        b = _by_round(base_runs, figures, "j_per_token")
        c = _by_round(good, figures, "j_per_token")
        keys = sorted(set(b) | set(c))
        return interval, compare([b.get(k) for k in keys], [c.get(k) for k in keys], paired=True)
    return interval, compare(base.of_runs("j_per_token"), values)


def ab_groups(runs: Sequence[RunRow], figures: Mapping[int, RunFigures],
              matrices: Mapping[int, Matrix | None],
              baseline: str | Baselines | None = None, alpha: float = ALPHA,
              designs: Mapping[int, Design | None] | None = None,
              earlier: EarlierRepeats | None = None) -> list[ABGroup]:
    """The A/B groups of these runs (run rows: id, session_id, model, device, config, status,
    repeat_index, order_index), each against its own baseline, with every comparison
    Holm-corrected together. `figures`: run id -> that run's figures (Runs.figures);
    `matrices`: session id -> its Matrix (None for an import); `designs`: session id -> its
    import's design file (None without one); `baseline` overrides the matrix's or the
    design's in every group where that config ran; a mapping (`parse_baselines`: model ->
    config) does so per model. `earlier` finds repeats of earlier sessions for the noise
    floor of untested rows (`store_repeats`); without it only the session's own count."""
    ordered = sorted(runs, key=lambda r: (r.session_id, r.order_index or 0, r.id))
    groups = []
    for (model, device), members in by_model_and_device(ordered):
        sid = members[0].session_id
        override = baseline.get(model) if isinstance(baseline, Mapping) else baseline
        group = _group(model, device, members, figures, matrices.get(sid), override,
                       (designs or {}).get(sid))
        if group is not None:
            groups.append(_with_noise_floor(group, members, figures, earlier))
    # Holm across the whole report: the correction's point is the number of comparisons a
    # reader is shown, not the number per table.
    flat = [r.comparison for g in groups for r in g.rows if r.comparison is not None]
    corrected = iter(correct(flat, alpha))
    family = sum(1 for c in flat if c.p_value is not None)
    # energy: its own Holm family, so that measuring energy never changes a tok/s verdict
    joules = iter(correct([r.energy for g in groups for r in g.rows if r.energy is not None],
                          alpha))
    return [replace(g, family=family, rows=[
        replace(r, comparison=r.comparison if r.comparison is None else next(corrected),
                energy=r.energy if r.energy is None else next(joules)) for r in g.rows])
        for g in groups]


def session_groups(store: Any, session_id: int, runs: Sequence[RunRow],
                   figures: Mapping[int, RunFigures],
                   baseline: Baselines | None = None) -> list[ABGroup]:
    """The A/B groups of one stored session (`orch table`); `figures`: Runs.figures of its
    runs, `baseline` the `-b` choices (`parse_baselines`)."""
    session = Sessions(store).one(session_id)
    matrix = stored_matrix(session.matrix_text)
    return ab_groups(runs, figures, {session_id: matrix}, baseline,
                     designs={session_id: session_design(session)},
                     earlier=store_repeats(store))


def shown_by_default(runs: Sequence[RunRow]) -> bool:
    """Whether `orch table` shows the A/B rows unasked: some (model, device) group has two
    configs and a config that ran ok more than once. With single runs there is no test."""
    for _, members in by_model_and_device(runs):
        ok = [r.config for r in members if r.status == Status.OK]
        if len({r.config for r in members}) > 1 and len(ok) > len(set(ok)):
            return True
    return False
