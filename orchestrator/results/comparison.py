"""The numbers of `orch compare`: two or more sides (devices or sessions) config by config.

Configs are matched by (model, config as measured: name and settings, results/measured.py);
a side that does not know its model ("-") matches
by config name where that is unambiguous. Per side, a config's figure is the mean of its ok
runs' mean tok/s with a 95% interval over those runs (uncertainty.mean_interval, the same
aggregate the report shows). Against the reference side (the first): the ratio of geometric
means with its 95% interval and p-value from Welch's test on the logs — runs of two sessions
are not paired, they ran at different times — Holm-corrected across every comparison of the
table, "significant" only when the corrected p-value is below 0.05. A side with a single run
of a config gets its ratio but no interval and no verdict: one run carries no spread to test
against. Runs that did not end ok take no part and are named.

Beside each ratio: what else differs between the two sides' runs of the config (settings,
tokens, model, build: results/confounds.py), the other headline figures side by side
(results/headline_figures.py), and each side's device facts (results/side_devices.py).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from orchestrator.config.design import session_design
from orchestrator.config.stored_matrix import stored_matrix
from orchestrator.db.runs import Runs, Sessions
from orchestrator.db.store import Store
from orchestrator.errors import ConfigError, NotFound
from orchestrator.results.confounds import Difference, differences
from orchestrator.results.headline_figures import FigureComparison, figure_comparisons
from orchestrator.results.measured import config_labels
from orchestrator.results.query import Side
from orchestrator.results.rows import in_order, listed_configs
from orchestrator.results.side_devices import SideDevice, side_devices
from orchestrator.results.trim import resolve_trim
from orchestrator.stats.config_figures import ConfigFigures, RunResult, combine_all
from orchestrator.stats.status import Status
from orchestrator.stats.uncertainty import Comparison, Interval, compare, correct

Key = tuple[str, str]          # (model, config)


class Absence(StrEnum):
    """Why a side has no figure for a config (its value is the JSON records' `why`)."""

    FAILED = "failed"            # its runs there did not end ok
    NEVER_RUN = "never run"


@dataclass(frozen=True)
class ConfigRow:
    """One (model, config) of the sides."""

    model: str
    config: str
    means: list[Interval | None]            # per side; None where it has no ok run of it
    run_ids: list[list[int]]                # per side: the ok runs behind the mean
    vs_reference: list[Comparison | None]   # per other side (sides[1:]), Holm-corrected
    failed: list[list[int]] = field(default_factory=list)   # per side: its runs not ok
    matched: list[str | None] = field(default_factory=list)  # per side: its name, if --match
    # per other side (sides[1:]): what its runs of the config differ in from the reference's
    differs: list[list[Difference]] = field(default_factory=list)
    # per other side: the headline figures against the reference's
    figures: list[list[FigureComparison]] = field(default_factory=list)

    def absence(self, side: int) -> Absence | None:
        """Why side `side` has no figure for it; None when it has one."""
        if self.means[side] is not None:
            return None
        return Absence.FAILED if self.failed and self.failed[side] else Absence.NEVER_RUN

    @property
    def present(self) -> list[int]:
        """Indices of the sides that have ok runs of it."""
        return [i for i, m in enumerate(self.means) if m is not None]

    @property
    def on(self) -> list[int]:
        """Indices of the sides that ran it, ok or not."""
        return [i for i, m in enumerate(self.means)
                if m is not None or (self.failed and self.failed[i])]


@dataclass(frozen=True)
class SideComparison:
    sides: list[Side]
    rows: list[ConfigRow]                   # every config of every side, first seen first
    summary: list[float | None]             # per other side: geometric mean of the ratios
    summary_configs: list[int]              # per other side: how many configs that mean has
    left_out: list[tuple[Side, Any]]        # (side, run row) of runs that did not end ok
    devices: list[SideDevice] = field(default_factory=list)   # per side: its device's facts

    @property
    def reference(self) -> Side:
        return self.sides[0]

    @property
    def others(self) -> list[Side]:
        return self.sides[1:]

    @property
    def matched(self) -> list[ConfigRow]:
        """The configs on two or more sides: the table."""
        return [r for r in self.rows if len(r.present) >= 2]

    @property
    def only(self) -> list[ConfigRow]:
        """The configs on one side only: listed as such."""
        return [r for r in self.rows if len(r.present) == 1]


def _unknown_models_matched(per_side: list[dict[Key, Any]]) -> list[dict[Key, Any]]:
    """A side that does not know its model ("-": a moe-probe run, an import without a model
    in its file names) matches the other sides' config of the same name when exactly one
    model has that config there; otherwise its rows stay apart."""
    models: dict[str, set[str]] = {}
    for configs in per_side:
        for model, config in configs:
            if model != "-":
                models.setdefault(config, set()).add(model)
    out = []
    for configs in per_side:
        merged: dict[Key, Any] = {}
        for (model, config), values in configs.items():
            known = models.get(config, set())
            key = (next(iter(known)), config) if model == "-" and len(known) == 1 else \
                (model, config)
            merged.setdefault(key, []).extend(values)
        out.append(merged)
    return out


def parse_matches(specs: Sequence[str], sides: Sequence[Side]) -> dict[str, str]:
    """`--match A=B` (repeatable) as {B: A}: config B of the other sides is compared with
    config A of the reference. Names may hold `=`: the split is the one `=` where A is a
    config of the reference and B one of another side; none or several: a ConfigError."""
    ref = {r.config for r in sides[0].rows}
    others = {r.config for side in sides[1:] for r in side.rows}
    out: dict[str, str] = {}
    for spec in specs:
        splits = [(spec[:i], spec[i + 1:]) for i, ch in enumerate(spec) if ch == "="]
        found = [(a, b) for a, b in splits if a in ref and b in others]
        if not found:
            raise ConfigError(
                f"--match {spec}: want A=B, A a config of {sides[0].label} "
                f"({', '.join(sorted(ref))}), B one of "
                f"{', '.join(s.label for s in sides[1:])} ({', '.join(sorted(others))})")
        if len(found) > 1:
            raise ConfigError(f"--match {spec}: ambiguous ("
                              + " or ".join(f"{a!r}={b!r}" for a, b in found) + ")")
        a, b = found[0]
        if b in out and out[b] != a:
            raise ConfigError(f"--match {b} is given twice ({out[b]}, {a})")
        out[b] = a
    return out


def build(store: Store, sides: Sequence[Side], matches: Sequence[str] = (),
          trim: int | None = None) -> SideComparison:
    """The comparison of these sides (reference first), from one read of their runs;
    `matches`: `--match A=B` pairs (parse_matches); `trim`: `--trim N` (None: the sessions'
    own `trim:`, results/trim.py)."""
    rows = [r for side in sides for r in side.rows]
    trim = resolve_trim(trim, Sessions(store).by_ids(dict.fromkeys(r.session_id for r in rows)))
    # run means only: within-run intervals never feed the config-level test
    figures = Runs(store).figures(rows, trim=trim)
    # configs pair by name *and* settings: the same name measured another way on one side is
    # its own row (results/measured.py), present on that side only
    labels = config_labels(rows)
    alias = parse_matches(matches, sides) if matches else {}
    # --match: the other sides' B runs take the key of the reference's A (its model too when
    # one model ran A there: the point may be two models' configs)
    ref_key: dict[str, Key] = {}
    for r in sides[0].rows:
        ref_key.setdefault(r.config, (r.model or "-", labels[r.id]))
    ref_models = {c: {r.model or "-" for r in sides[0].rows if r.config == c}
                  for c in alias.values()}
    renamed: dict[tuple[int, Key], str] = {}         # (side, key) -> its own config name

    def key_of(i: int, r: Any) -> Key:
        if i == 0 or r.config not in alias:
            return (r.model or "-", labels[r.id])
        a = alias[r.config]
        model = ref_key[a][0] if len(ref_models[a]) == 1 else (r.model or "-")
        renamed[i, (model, ref_key[a][1])] = r.config
        return (model, ref_key[a][1])

    per_side: list[dict[Key, list[RunResult]]] = []
    left_out: list[tuple[Side, Any]] = []
    for i, side in enumerate(sides):
        configs: dict[Key, list[RunResult]] = {}
        for r in side.rows:
            configs.setdefault(key_of(i, r), []).append(RunResult(r.id, r.status, figures[r.id]))
            if r.status != Status.OK:
                left_out.append((side, r))
        per_side.append(configs)
    combined = [combine_all(configs) for configs in _unknown_models_matched(per_side)]
    keys = list(dict.fromkeys(k for configs in combined for k, c in configs.items() if c.ok))
    # rows in the author's order (the sides' design files' and matrices' `configs:`), as the
    # report's and `orch table`'s, then the others in run order
    listed = listed_configs((session_design(side.session) for side in sides),
                            (stored_matrix(side.session.matrix_text) for side in sides))
    rank = {config: i for i, config in enumerate(in_order((k[1] for k in keys), listed))}
    models = {model: i for i, model in enumerate(dict.fromkeys(k[0] for k in keys))}
    keys.sort(key=lambda k: (models[k[0]], rank[k[1]]))     # model by model, as run
    # a side's config figure: its ConfigFigures (stats/config_figures.py); tested on the runs'
    # means, Welch on the logs (two sessions' runs are not paired)
    raw = [[compare(combined[0][key].of_runs("mean"), c[key].of_runs("mean"), paired=False)
            if _has(combined[0], key) and _has(c, key) else None for c in combined[1:]]
           for key in keys]
    corrected = iter(correct([c for row in raw for c in row if c is not None]))
    by_id = {r.id: r for r in rows}

    def beside(key: Key) -> tuple[list[list[Difference]], list[list[FigureComparison]]]:
        """Per other side: what differs from the reference, and the headline figures."""
        if not _has(combined[0], key):
            return [[] for _ in combined[1:]], [[] for _ in combined[1:]]
        ref = combined[0][key]
        return ([differences([by_id[i] for i in ref.ok], [by_id[i] for i in c[key].ok],
                             figures) if _has(c, key) else [] for c in combined[1:]],
                [figure_comparisons(ref, c[key]) if _has(c, key) else []
                 for c in combined[1:]])

    extra = {key: beside(key) for key in keys}
    table = [ConfigRow(model=key[0], config=key[1],
                       means=[c[key].mean if _has(c, key) else None for c in combined],
                       run_ids=[list(c[key].ok) if key in c else [] for c in combined],
                       vs_reference=[next(corrected) if c is not None else None for c in row],
                       failed=[list(c[key].not_ok) if key in c else [] for c in combined],
                       matched=[renamed.get((i, key)) for i in range(len(sides))],
                       differs=extra[key][0], figures=extra[key][1])
             for key, row in zip(keys, raw)]
    summary, counts = [], []
    for j in range(len(sides) - 1):
        ratios = [c.ratio for c in (row.vs_reference[j] for row in table)
                  if c is not None and c.ratio]
        summary.append(geometric_mean(ratios))
        counts.append(len(ratios))
    return SideComparison(list(sides), table, summary, counts, left_out,
                          side_devices(store, sides))


def build_side(store: Store, build: str, device: str | None = None,
               matrix: str | None = None) -> Side:
    """`--builds A B`: the runs of engine build `build` (a llama.cpp cache version such as
    0.3.30, an engine_build string, a commit prefix, or a unique prefix of one:
    build_names.resolve_build) in the newest
    session that has any (of `matrix`, on `device`, when given). A build that ran on several
    devices there needs --device."""
    from orchestrator.results.build_names import resolve_build
    from orchestrator.results.history import base_config, build_matches

    build = resolve_build(store, build, device, matrix)    # a prefix, or exit 2 listing them
    for sid in Runs(store).session_ids(matrix=matrix, device=device):
        rows = [r for r in Runs(store).current(sid) if build_matches(r, build)
                and (device is None or r.device == device)]
        if not rows:
            continue
        devices = list(dict.fromkeys(r.device for r in rows))
        if len(devices) > 1:
            raise ConfigError(f"build {build} ran on {', '.join(devices)} in session {sid}: "
                              f"give --device")
        # a `builds:` session's cells are `t1@0.3.30`: compared as `t1` with the other build's
        rows = [r if base_config(r) == r.config else
                r.replace(config=base_config(r)) for r in rows]
        return Side(f"build {build}", devices[0], Sessions(store).one(sid), rows)
    where = "".join(x for x in (matrix and f" of matrix {matrix!r}",
                                device and f" on {device}") if x)
    raise NotFound(f"no runs of build {build}{where} in {store.url}")


def _has(configs: dict[Key, ConfigFigures], key: Key) -> bool:
    """Whether a side has ok runs of the config: a figure to show and test."""
    return key in configs and bool(configs[key].ok)


def geometric_mean(values: Sequence[float]) -> float | None:
    """The summary of ratios: a 2× and a 0.5× cancel (an arithmetic mean would say 1.25×)."""
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def records(comp: SideComparison) -> list[dict[str, Any]]:
    """One JSON/CSV record per (config, other side) where either of the two has it (ratio
    null when only one does), then one `summary` record per other side: the geometric mean
    of the ratios over the configs both have (a summary, not a test)."""
    out = []
    for row in comp.rows:
        for j, other in enumerate(comp.others, 1):
            if row.means[0] is None and row.means[j] is None:
                continue
            rec = _record("config", row.model, row.config, comp.reference.label,
                          other.label, row.means[0], row.means[j], row.vs_reference[j - 1],
                          len(row.run_ids[0]), len(row.run_ids[j]))
            # --match: the other side's own name for the config
            rec["other_config"] = (row.matched[j] if row.matched else None) or row.config
            out.append(rec)
    for other, ratio, n in zip(comp.others, comp.summary, comp.summary_configs):
        rec = _record("summary", None, None, comp.reference.label, other.label, None, None,
                      None, None, None)
        rec.update(ratio=ratio, configs=n)
        out.append(rec)
    return out


def _record(kind: str, model: str | None, config: str | None, reference: str, other: str,
            a: Any, b: Any, c: Comparison | None, n_a: int | None,
            n_b: int | None) -> dict[str, Any]:
    return {
        "kind": kind, "model": model, "config": config, "reference": reference, "other": other,
        "mean_reference": _mean(a, "mean"), "mean_reference_ci_low": _mean(a, "low"),
        "mean_reference_ci_high": _mean(a, "high"),
        "mean_other": _mean(b, "mean"), "mean_other_ci_low": _mean(b, "low"),
        "mean_other_ci_high": _mean(b, "high"),
        "ratio": c.ratio if c is not None else None,
        "ci_low": c.low if c is not None else None, "ci_high": c.high if c is not None else None,
        "p_value": c.p_value if c is not None else None,
        "p_adjusted": c.p_adjusted if c is not None else None,
        "significant": c.significant if c is not None and c.p_value is not None else None,
        "method": c.method if c is not None else None,
        "n_reference": n_a, "n_other": n_b, "configs": None,
    }


def absence_records(comp: SideComparison) -> list[dict[str, Any]]:
    """`absent` records: a config with a figure on some side but none on this one, and why
    (`failed`: its runs there did not end ok; `never run`)."""
    return [{"kind": "absent", "model": row.model, "config": row.config, "side": side.label,
             "why": row.absence(i), "failed_runs": row.failed[i] if row.failed else []}
            for row in comp.rows for i, side in enumerate(comp.sides)
            if row.absence(i) is not None]


def _mean(interval: Any, field: str) -> float | None:
    return getattr(interval, field) if isinstance(interval, Interval) else None
