"""A/B rows: every config of a (model, device) group against its model's baseline, with the
uncertainty a reader can check (DESIGN §7, issue 13 item 3).

- The baseline is chosen per group, never across models or devices: `--baseline` where that
  config ran in the group, else the matrix's `baseline_for(model)`, else (imported sessions,
  which have no matrix) the group's first config in run order.
- Each config's mean decode tok/s comes with its 95% interval over its ok runs' means, and its
  change from the baseline with an interval on the % change and a p-value
  (`uncertainty.compare`): paired by round when both ran in every round back to back (an
  interleaved order, or the two are an A/B pair of the matrix), Welch's test otherwise.
- p-values are Holm-corrected across every comparison of one report or table, and a change is
  called faster or slower only when the corrected test says so.
- Cache hit and flash read per token are deterministic for a given routing: their differences
  are shown as they are, with no noise caveat.
- Runs that did not end ok take part in nothing.
"""
from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import pandas as pd

from orchestrator.config.matrix import Matrix, stored_matrix
from orchestrator.results import markdown as md
from orchestrator.results.formatting import MINUS, STATS, Formatter, bold, pct
from orchestrator.results.statistics import delta_pct
from orchestrator.results.tables import by_model_and_device
from orchestrator.results.uncertainty import (
    ALPHA,
    Comparison,
    Interval,
    compare,
    correct,
    mean_interval,
)
from orchestrator.results.values import DAGGER, DASH, is_missing

CAPTION = ("**A/B against the baseline** (each model's own baseline; change of each config's "
           "mean decode tok/s, with 95% intervals):")


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

    @property
    def verdict(self) -> str:
        """What the row says about the config, claiming a difference only when the corrected
        test finds one."""
        if self.is_baseline:
            return "baseline"
        c = self.comparison
        if c is None:
            return "no run ended ok"
        if c.p_value is None:
            return f"not tested (n={c.n_base}/{c.n_cand})"
        if c.significant and c.ratio is not None and c.ratio != 1.0:
            return "faster" if c.ratio > 1.0 else "slower"
        n = f"{c.n_cand} rounds" if c.method == "paired" else f"{c.n_base}/{c.n_cand}"
        return f"no significant difference (n={n})"


@dataclass(frozen=True)
class ABGroup:
    model: str
    device: str
    baseline: str
    rows: list[ABRow]                  # the baseline first, then the others in run order
    note: str | None = None            # why there is no comparison (then `rows` is empty)
    family: int = 0                    # comparisons Holm-corrected together (the document's)


# ---- building the rows -------------------------------------------------------------------

def _fmean(values: Sequence[Any]) -> float | None:
    xs = [float(v) for v in values if not is_missing(v)]
    return statistics.fmean(xs) if xs else None


def _paired(matrix: Matrix | None, base: str, config: str) -> bool:
    """Both configs ran in every round, back to back or in one interleaved pass."""
    if matrix is None:
        return False
    return matrix.order == "interleaved" or any(base in p and config in p for p in matrix.pairs)


def _by_round(runs: Sequence[Any], stats: Mapping[int, Mapping[str, Any]]
              ) -> dict[tuple[int, int], float | None]:
    return {(r.session_id, r.repeat_index or 0): stats.get(r.id, {}).get("mean") for r in runs}


def _group(model: str, device: str, members: list[Any], stats: Mapping[int, Mapping[str, Any]],
           matrix: Matrix | None, override: str | None) -> ABGroup | None:
    configs: dict[str, list[Any]] = {}
    for r in members:
        configs.setdefault(r.config, []).append(r)
    if len(configs) < 2:
        return None                     # nothing to compare with
    if override is not None and override in configs:
        baseline = override
    elif matrix is not None:
        baseline = matrix.baseline_for(model)
    else:
        baseline = next(iter(configs))      # an import: the first config in run order
    if baseline not in configs:
        return ABGroup(model, device, baseline, [], f"The baseline {baseline} did not run in "
                                                    f"this group: no A/B comparison.")
    ok = {name: [r for r in rs if r.status == "ok"] for name, rs in configs.items()}
    if not ok[baseline]:
        return ABGroup(model, device, baseline, [], f"The baseline {baseline} has no run that "
                                                    f"ended ok: no A/B comparison.")

    def means(name: str) -> list[float | None]:
        return [stats.get(r.id, {}).get("mean") for r in ok[name]]

    def figure(name: str, key: str) -> float | None:
        return _fmean([stats.get(r.id, {}).get(key) for r in ok[name]])

    base_rounds = _by_round(ok[baseline], stats)
    base_hit, base_read = figure(baseline, "cache_hit_pct"), figure(baseline, "read_mib_per_token")
    rows = []
    for name in [baseline] + [c for c in configs if c != baseline]:
        good = ok[name]
        comparison = None
        if good and name != baseline and _paired(matrix, baseline, name):
            rounds = _by_round(good, stats)
            keys = sorted(set(base_rounds) | set(rounds))
            comparison = compare([base_rounds.get(k) for k in keys],
                                 [rounds.get(k) for k in keys], paired=True)
        elif good and name != baseline:
            comparison = compare(means(baseline), means(name))
        hit, read = figure(name, "cache_hit_pct"), figure(name, "read_mib_per_token")
        rows.append(ABRow(
            config=name, label=matrix.label(name) if matrix is not None else name,
            is_baseline=name == baseline,
            interval=mean_interval(means(name)),
            comparison=comparison, ids=tuple(r.id for r in good),
            failed=tuple(r.id for r in configs[name] if r.status != "ok"),
            cache_hit_pct=hit, read_mib_per_token=read,
            cache_hit_delta_pp=None if is_missing(hit) or is_missing(base_hit) else hit - base_hit,
            read_delta_pct=delta_pct(base_read, read)))
    return ABGroup(model, device, baseline, rows)


def ab_groups(runs: Sequence[Any], stats: Mapping[int, Mapping[str, Any]],
              matrices: Mapping[int, Matrix | None], baseline: str | None = None,
              alpha: float = ALPHA) -> list[ABGroup]:
    """The A/B groups of these runs (run rows: id, session_id, model, device, config, status,
    repeat_index, order_index), each against its own baseline, with every comparison
    Holm-corrected together. `stats`: run id -> that run's statistics (`mean`, ...);
    `matrices`: session id -> its Matrix (None for an import); `baseline` overrides the
    matrix's in every group where that config ran."""
    ordered = sorted(runs, key=lambda r: (r.session_id, r.order_index or 0, r.id))
    groups = []
    for (model, device), members in by_model_and_device(ordered):
        group = _group(model, device, members, stats, matrices.get(members[0].session_id),
                       baseline)
        if group is not None:
            groups.append(group)
    # Holm across the whole report: the correction's point is the number of comparisons a
    # reader is shown, not the number per table.
    flat = [r.comparison for g in groups for r in g.rows if r.comparison is not None]
    corrected = iter(correct(flat, alpha))
    family = sum(1 for c in flat if c.p_value is not None)
    return [replace(g, family=family, rows=[
        r if r.comparison is None else replace(r, comparison=next(corrected)) for r in g.rows])
        for g in groups]


def session_groups(store: Any, session_id: int, runs: Sequence[Any],
                   stats: pd.DataFrame) -> list[ABGroup]:
    """The A/B groups of one stored session (`orch table`); `stats` is runs_stats' frame."""
    session = store.session_row(session_id)
    matrix = stored_matrix(session.matrix_text if session is not None else None)
    by_run = {int(rid): rec for rid, rec in stats.to_dict("index").items()}
    return ab_groups(runs, by_run, {session_id: matrix})


def shown_by_default(runs: Sequence[Any]) -> bool:
    """Whether `orch table` shows the A/B rows unasked: some (model, device) group has two
    configs and a config that ran ok more than once. With single runs there is no test."""
    for _, members in by_model_and_device(runs):
        ok = [r.config for r in members if r.status == "ok"]
        if len({r.config for r in members}) > 1 and len(ok) > len(set(ok)):
            return True
    return False


# ---- cells -------------------------------------------------------------------------------

def interval_text(low: float | None, high: float | None,
                  fmt: Formatter = STATS["mean"].fmt) -> str:
    """"low–high" of an interval (tok/s unless `fmt` says otherwise), or "—" when there is
    none (fewer than two runs)."""
    if is_missing(low) or is_missing(high):
        return DASH
    return f"{fmt(low)}–{fmt(high)}"


def mean_cell(interval: Interval, headline: bool = True) -> str:
    """The mean (bold when it is the row's headline) with its 95% interval:
    "**12.31** [12.10–12.52]"."""
    text = (bold(STATS["mean"].fmt) if headline else STATS["mean"].fmt)(interval.mean)
    ci = interval_text(interval.low, interval.high)
    return text if ci == DASH else f"{text} [{ci}]"


def delta_cell(c: Comparison) -> str:
    """The % change with its 95% interval: "−12.4% [−14.0%, −10.7%]"."""
    text = pct(c.delta_pct)
    if is_missing(c.ci_low_pct) or is_missing(c.ci_high_pct):
        return text
    return f"{text} [{pct(c.ci_low_pct)}, {pct(c.ci_high_pct)}]"


def p_cell(p: float | None) -> str:
    if p is None:
        return DASH
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def pp(value: float | None) -> str:
    """A difference of two percentages, in percentage points."""
    return DASH if is_missing(value) else f"{value:+.1f} pp".replace("-", MINUS)


HEADERS = ["Config", "decode mean [95% CI]", "Δ mean [95% CI]", "p (Holm)", "verdict",
           "cache hit", "Δ cache hit", "flash read/token", "Δ read/token"]
ALIGNS = ["---", "---:", "---:", "---:", "---", "---:", "---:", "---:", "---:"]


def row_cells(row: ABRow) -> list[str]:
    """The cells of HEADERS after Config (escaping is the caller's: Config is data)."""
    c = row.comparison
    return [
        mean_cell(row.interval) if row.ids else DASH,
        "baseline" if row.is_baseline else (delta_cell(c) if c is not None else DASH),
        p_cell(c.p_adjusted) if c is not None else DASH,
        row.verdict if row.ids else
        f"{row.verdict} ({DAGGER}: {', '.join(map(str, row.failed))})",
        STATS["cache_hit_pct"].fmt(row.cache_hit_pct),
        DASH if row.is_baseline else pp(row.cache_hit_delta_pp),
        STATS["read_mib_per_token"].fmt(row.read_mib_per_token),
        DASH if row.is_baseline else pct(row.read_delta_pct),
    ]


def notes(group: ABGroup) -> list[str]:
    """How to read a group's A/B table: the method, and what a single run cannot tell."""
    rows = [r for r in group.rows if r.comparison is not None]
    tested = [r.comparison for r in rows if r.comparison.p_value is not None]  # type: ignore[union-attr]
    methods = sorted({c.method for c in tested if c.method})
    how = {"paired": "paired by round (both configs ran in every round)",
           "welch": "Welch's t-test (the rounds are not paired)"}
    out = []
    if tested:
        out.append(f"Δ mean: ratio of the geometric means of the runs' decode tok/s, with its "
                   f"95% interval, tested on log tok/s, "
                   f"{' or '.join(how[m] for m in methods)}. p is Holm-corrected across the "
                   f"{group.family} comparison(s) of this document; *faster* / *slower* only "
                   f"when it is below {ALPHA:g}.")
    if any(r.comparison.p_value is None for r in rows):  # type: ignore[union-attr]
        out.append("Configs measured once (or compared with a baseline measured once) have no "
                   "interval and no test: their Δ is one measurement against another.")
    if any(not is_missing(r.cache_hit_delta_pp) or not is_missing(r.read_delta_pct)
           for r in group.rows if not r.is_baseline):
        out.append("Cache hit and flash read per token follow from the routing and the cache, "
                   "not from timing: their differences are exact and carry no interval.")
    return out


def table(group: ABGroup) -> md.Table:
    """The A/B table of one group, without notes (`notes` covers a whole document)."""
    t = md.Table(list(HEADERS), list(ALIGNS))
    for row in group.rows:
        t.rows.append([md.md_escape(row.label)] + row_cells(row))
    return t.drop_empty(keep=(0, 1, 2, 4))


def group_markdown(groups: Sequence[ABGroup], model: str, device: str) -> str:
    """`orch table`'s A/B section of one (model, device) group: caption, table, notes."""
    group = next((g for g in groups if (g.model, g.device) == (model, device)), None)
    if group is None:
        return ""
    if group.note:
        return md.md_escape(group.note) + "\n"
    parts = [CAPTION + "\n", md.render(table(group)) + "\n"]
    parts += [n + "\n" for n in notes(group)]
    return "\n".join(parts)


# ---- csv / json --------------------------------------------------------------------------

def records(groups: Sequence[ABGroup]) -> list[dict[str, Any]]:
    """One record per config and group (`"table": "ab"`); the baseline's own row has no
    comparison fields."""
    out = []
    for g in groups:
        for row in g.rows:
            c = row.comparison
            out.append({
                "table": "ab", "model": g.model, "device": g.device, "config": row.config,
                "label": row.label, "baseline": g.baseline,
                "mean": row.interval.mean, "mean_ci_low": row.interval.low,
                "mean_ci_high": row.interval.high,
                "delta_pct": c.delta_pct if c else None,
                "ci_low_pct": c.ci_low_pct if c else None,
                "ci_high_pct": c.ci_high_pct if c else None,
                "p_value": c.p_value if c else None,
                "p_adjusted": c.p_adjusted if c else None,
                "significant": bool(c.significant) if c else False,
                "n_base": c.n_base if c else len(g.rows[0].ids),   # rows[0]: the baseline
                "n_config": c.n_cand if c else len(row.ids),
                "method": c.method if c else None,
                "verdict": row.verdict,
                "cache_hit_pct": row.cache_hit_pct,
                "cache_hit_delta_pp": None if row.is_baseline else row.cache_hit_delta_pp,
                "read_mib_per_token": row.read_mib_per_token,
                "read_delta_pct": None if row.is_baseline else row.read_delta_pct,
            })
    return out


def frame(groups: Sequence[ABGroup]) -> pd.DataFrame:
    return pd.DataFrame(records(groups))
