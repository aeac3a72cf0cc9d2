"""A/B rows: every config of a (model, device) group against its model's baseline, with the
uncertainty a reader can check (docs/architecture.md, "Statistics").

- The baselines are chosen per group, never across models or devices (results/baselines.py):
  one or several per model, each with its own rows (the baseline's row, then each config it
  is compared with).
- Each config's mean decode tok/s comes with its 95% interval over its ok runs' means, and its
  change from the baseline with an interval on the % change and a p-value
  (`uncertainty.compare`): paired by round when both ran in every round back to back (an
  interleaved order, a matrix's or design's `pairs:`, a design `order:` in rounds:
  results/pairing.py), Welch's test otherwise.
- p-values are Holm-corrected across every comparison of one report or table, and a change is
  called faster or slower only when the corrected test says so.
- Cache hit and flash read per token are deterministic for a given routing: their differences
  are shown as they are, with no noise caveat.
- Runs that did not end ok take part in nothing.
- A session run under the decision rule (`repeat: {until: decided}`, docs/decision.md) was
  stopped by that rule's looks, so a fixed-sample test of its runs would be a second,
  different answer: its rows carry the rule's decision instead (run/decided.py
  decisions_of, the one the session ran on), with its repeated interval, outside the
  document's Holm family (the rule corrects for its own comparisons and looks).
- A row that cannot be tested (a single run on a side) carries the noise floor
  (results/noise_floor.py) and a single run's within-run interval when the statistics have
  one.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from orchestrator.config.design import Design, session_design
from orchestrator.config.matrix import Matrix
from orchestrator.config.stored_matrix import stored_matrix
from orchestrator.db.rows import RunRow
from orchestrator.db.runs import Sessions
from orchestrator.results.baselines import (  # noqa: F401  (re-exported: one import for callers)
    Baselines,
    choose_baseline,
    choose_baselines,
    members,
    named_baseline,
    parse_baselines,
    runs_where,
)
from orchestrator.results.noise_floor import (  # noqa: F401
    EarlierRepeats,
    noise_floor,
    store_repeats,
)
from orchestrator.results.pairing import Rounds, declared, rounds
from orchestrator.results.query import by_model_and_device
from orchestrator.results.confounds import run_settings
from orchestrator.results.rows import config_label, in_order, listed_configs
from orchestrator.run.decisions import decision_name, decisions_of, is_decided, rule_of
from orchestrator.stats.config_figures import ConfigFigures, RunResult, combine
from orchestrator.stats.decision import DIFFERS, EQUIVALENT, Decision
from orchestrator.stats.figures import RunFigures
from orchestrator.stats.statistics import delta_pct
from orchestrator.stats.status import Status
from orchestrator.stats.uncertainty import ALPHA, Comparison, Interval, compare, correct


class Verdict(StrEnum):
    """What an A/B row says about its config against the baseline."""

    BASELINE = "baseline"
    NO_OK_RUN = "no run ended ok"
    NOT_TESTED = "not tested"             # one measurement on a side: nothing to test
    FASTER = "faster"                     # the corrected test finds it faster
    SLOWER = "slower"
    NO_DIFFERENCE = "no significant difference"
    # the decision rule's (a session run `until: decided`)
    EQUIVALENT = "equivalent"             # its repeated interval lies within the margin
    UNDECIDED = "undecided"               # neither, when `max` rounds had run


@dataclass(frozen=True)
class ABRow:
    """One config of a group, against one of the group's baselines (`against`)."""

    config: str
    label: str                         # the matrix's `labels:` or design's `label:`, else the name
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
    against: str = ""                  # the baseline compared with (a baseline's row: itself)
    against_label: str = ""
    # a session run `until: decided`: the rule's decision for this config (stats/decision.py)
    # and the margin it judged equivalence by (%); `comparison` then holds its interval
    decision: Decision | None = None
    equivalence_pct: float | None = None

    @property
    def verdict(self) -> Verdict:
        """What the row says about the config, claiming a difference only when the corrected
        test finds one (its words: report/format/ab_rows.py verdict_words)."""
        if self.is_baseline:
            return Verdict.BASELINE
        c = self.comparison
        if c is None:
            return Verdict.NO_OK_RUN
        if self.decision is not None:
            if self.decision.state == EQUIVALENT:
                return Verdict.EQUIVALENT
            if self.decision.state != DIFFERS or c.ratio is None or c.ratio == 1.0:
                return Verdict.UNDECIDED
            return Verdict.FASTER if c.ratio > 1.0 else Verdict.SLOWER
        if c.p_value is None:
            return Verdict.NOT_TESTED
        if c.significant and c.ratio is not None and c.ratio != 1.0:
            return Verdict.FASTER if c.ratio > 1.0 else Verdict.SLOWER
        return Verdict.NO_DIFFERENCE


@dataclass(frozen=True)
class ABGroup:
    model: str
    device: str
    baseline: str                      # the first baseline (`baselines`: all, in order)
    # each baseline's row, then the configs compared with it in run order; next baseline...
    rows: list[ABRow]
    note: str | None = None            # why there is no comparison (then `rows` is empty)
    family: int = 0                    # comparisons Holm-corrected together (the document's)
    baselines: tuple[str, ...] = ()

    def blocks(self) -> list[list[ABRow]]:
        """The rows per baseline: its own row first."""
        out: list[list[ABRow]] = []
        for row in self.rows:
            if row.is_baseline or not out:
                out.append([])
            out[-1].append(row)
        return out


# ---- building the rows -------------------------------------------------------------------

def _by_round(rounds_of: Rounds, figures: Mapping[int, RunFigures],
              key: str = "mean") -> dict[object, float | None]:
    return {k: figures[r.id].get(key) if r.status == Status.OK else None
            for k, r in rounds_of.items()}


def _compare(paired: tuple[Rounds, Rounds] | None, figures: Mapping[int, RunFigures],
             base: ConfigFigures, config: ConfigFigures, key: str = "mean") -> Comparison:
    """The change of `key` from the baseline: paired by round when the two ran in rounds."""
    if paired is not None:
        b, c = _by_round(paired[0], figures, key), _by_round(paired[1], figures, key)
        keys = sorted(set(b) | set(c), key=repr)
        return compare([b.get(k) for k in keys], [c.get(k) for k in keys], paired=True)
    return compare(base.of_runs(key), config.of_runs(key))


def _within_run(figures: Mapping[int, RunFigures], ids: Sequence[int]
                ) -> tuple[float, float] | None:
    if len(ids) != 1:
        return None
    low, high = figures[ids[0]].tps_ci_low, figures[ids[0]].tps_ci_high
    return None if low is None or high is None else (low, high)



def _group(model: str, device: str, runs_of: list[RunRow], figures: Mapping[int, RunFigures],
           matrix: Matrix | None, override: str | Sequence[str] | None,
           design: Design | None = None) -> ABGroup | None:
    configs: dict[str, list[RunRow]] = {}
    for r in runs_of:
        configs.setdefault(r.config, []).append(r)
    if len(configs) < 2:
        return None                     # nothing to compare with
    baselines = choose_baselines(model, list(configs), matrix, design, override)
    baseline = baselines[0]
    if baseline not in configs:
        return ABGroup(model, device, baseline, [], f"The baseline {baseline} did not run in "
                                                    f"this group: no A/B comparison.",
                       baselines=tuple(baselines))
    ok = {name: [r for r in rs if r.status == Status.OK] for name, rs in configs.items()}
    if not ok[baseline]:
        return ABGroup(model, device, baseline, [], f"The baseline {baseline} has no run that "
                                                    f"ended ok: no A/B comparison.",
                       baselines=tuple(baselines))
    # each config's figures over its runs (stats/config_figures.py): the interval, the means
    # the tests take, the averaged cache hit and flash read
    combined = {name: combine([RunResult(r.id, r.status, figures[r.id]) for r in rs])
                for name, rs in configs.items()}
    decided = decisions_of(runs_of, figures, matrix) if is_decided(matrix) else {}

    rows = []
    def distance(a: str, b: str) -> int:
        """How many settings two configs differ in, a key one sets and the other does not
        included (a design's flags name only what varies)."""
        sa, sb = (run_settings(configs[c][0]) for c in (a, b))
        return sum(sa.get(k) != sb.get(k) for k in sa.keys() | sb.keys())

    # the rows in the author's order (the design's or matrix's `configs:`), as every table
    ordered = in_order(configs, listed_configs([design], [matrix]))
    for base_name, compared in members(baselines, ordered, lambda a, b: declared(
            a, b, matrix, design), distance).items():
        if not ok[base_name]:
            continue                    # a second baseline without an ok run: no rows
        base = combined[base_name]
        for name in [base_name, *compared]:
            config, good, is_base = combined[name], ok[name], name == base_name
            pairing = None if is_base else rounds(configs[base_name], configs[name],
                                                  base_name, name, matrix, design)
            comparison = _compare(pairing, figures, base, config) if good and not is_base \
                else None
            decision = None
            if comparison is not None:
                decision = decided.get(decision_name(model, name))
                if decision is not None:
                    comparison = _as_comparison(decision, comparison)
            hit, read = config.get("cache_hit_pct"), config.get("read_mib_per_token")
            base_hit = base.get("cache_hit_pct")
            joules, energy = _energy(figures, base, config, pairing)
            rows.append(ABRow(
                config=name, label=config_label(name, matrix, design), is_baseline=is_base,
                interval=config.mean,
                comparison=comparison, ids=config.ok, failed=config.not_ok,
                cache_hit_pct=hit, read_mib_per_token=read,
                cache_hit_delta_pp=None if hit is None or base_hit is None else hit - base_hit,
                read_delta_pct=delta_pct(base.get("read_mib_per_token"), read),
                within_run=_within_run(figures, config.ok),
                j_per_token=joules, energy=None if is_base or not good else energy,
                against=base_name, against_label=config_label(base_name, matrix, design),
                decision=decision,
                equivalence_pct=rule_of(matrix).equivalence if decision else None))
    return ABGroup(model, device, baseline, rows, baselines=tuple(
        b for b in baselines if ok.get(b)))


def _as_comparison(decision: Decision, tested: Comparison) -> Comparison:
    """The decision as the row's comparison: its change and the repeated interval it rests
    on; no fixed-sample p-value (the rule's looks are its test)."""
    def ratio(pct: float | None) -> float | None:
        return None if pct is None else 1.0 + pct / 100.0
    return replace(tested, ratio=ratio(decision.delta_pct), low=ratio(decision.low_pct),
                   high=ratio(decision.high_pct), p_value=None, p_adjusted=None,
                   method="decided", significant=decision.state == DIFFERS)


def _energy(figures: Mapping[int, RunFigures], base: ConfigFigures, config: ConfigFigures,
            paired: tuple[Rounds, Rounds] | None
            ) -> tuple[Interval | None, Comparison | None]:
    """(mean J/token with its 95% interval, the change against the baseline's), or Nones
    where no ok run measured energy."""
    values = config.of_runs("j_per_token")
    if all(v is None for v in values):
        return None, None
    return config.interval("j_per_token"), _compare(paired, figures, base, config,
                                                    "j_per_token")


def with_noise_floor(group: ABGroup, members: Sequence[RunRow],
                     figures: Mapping[int, RunFigures],
                     earlier: EarlierRepeats | None) -> ABGroup:
    """The group's untested rows with the noise floor of the session's repeats of the group,
    else of the earlier ones."""
    def untested(r: ABRow) -> bool:
        return r.comparison is not None and r.comparison.p_value is None and r.decision is None

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
    configs) does so per model, with one or several baselines. `earlier` finds repeats of
    earlier sessions for the noise floor of untested rows (`store_repeats`); without it
    only the session's own count."""
    ordered = sorted(runs, key=lambda r: (r.session_id, r.order_index or 0, r.id))
    groups = []
    for (model, device), group_runs in by_model_and_device(ordered):
        sid = group_runs[0].session_id
        override = baseline.get(model) if isinstance(baseline, Mapping) else baseline
        group = _group(model, device, group_runs, figures, matrices.get(sid), override,
                       (designs or {}).get(sid))
        if group is not None:
            groups.append(with_noise_floor(group, group_runs, figures, earlier))
    # Holm across the whole report: the correction's point is the number of comparisons a
    # reader is shown, not the number per table.
    def tested(r: ABRow) -> bool:   # a decided session's rows were corrected by its rule
        return r.comparison is not None and r.decision is None

    flat = [c for g in groups for r in g.rows if (c := r.comparison) is not None
            and r.decision is None]
    corrected = iter(correct(flat, alpha))
    family = sum(1 for c in flat if c.p_value is not None)
    # energy: its own Holm family, so that measuring energy never changes a tok/s verdict
    joules = iter(correct([r.energy for g in groups for r in g.rows if r.energy is not None],
                          alpha))
    return [replace(g, family=family, rows=[
        replace(r, comparison=next(corrected) if tested(r) else r.comparison,
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
    for _, group_runs in by_model_and_device(runs):
        ok = [r.config for r in group_runs if r.status == Status.OK]
        if len({r.config for r in group_runs}) > 1 and len(ok) > len(set(ok)):
            return True
    return False
