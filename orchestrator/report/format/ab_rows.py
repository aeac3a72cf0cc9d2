"""The A/B rows of results/ab.py as cells, a markdown table with its notes, and csv/json
records: one set of rows, several printers (as llama-bench prints one record as md, csv or
json). The cells are shared with `orch compare` and the report (report/format/cells.py)."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from orchestrator.report.format import markdown as md
from orchestrator.report.format.formatters import STATS, Formatter, bold, pct, signed
from orchestrator.results.ab import ABGroup, ABRow, Verdict
from orchestrator.stats.uncertainty import ALPHA, Comparison, Interval
from orchestrator.stats.values import DAGGER, DASH, is_missing

CAPTION = ("**A/B against the baseline** (each model's own baseline or baselines; each "
           "config's mean decode tok/s, and under it its change from the baseline, with 95% "
           "intervals):")


# ---- cells -------------------------------------------------------------------------------

def interval_text(low: float | None, high: float | None,
                  fmt: Formatter = STATS["mean"].fmt) -> str:
    """"low–high" of an interval (tok/s unless `fmt` says otherwise), or "—" when there is
    none (fewer than two runs)."""
    if is_missing(low) or is_missing(high):
        return DASH
    return f"{fmt(low)}–{fmt(high)}"


def interval_kind(interval: Interval, within_run: tuple[float, float] | None = None) -> str:
    """What a mean's interval is: "runs" (Student-t over three or more runs' means), "n2"
    (two runs: a t interval with one degree of freedom, too wide to read as a range),
    "within-run" (one run, over its own tokens) or "none"."""
    if not is_missing(interval.low) and not is_missing(interval.high):
        return "n2" if interval.n == 2 else "runs"
    return "within-run" if within_run is not None else "none"


def mean_cell(interval: Interval, headline: bool = True,
              within_run: tuple[float, float] | None = None) -> str:
    """The mean (bold when it is the row's headline) with its 95% interval:
    "**12.31** [12.10–12.52]"; two runs, the interval's half-width, which is not a range of
    tok/s ("**5.19** [n = 2: ±8.29, too few to test]": the range would run below 0 tok/s);
    a single run with its interval over its own tokens, "**3.05** [2.98–3.12 within-run]"
    (not an interval over repeats)."""
    text = (bold(STATS["mean"].fmt) if headline else STATS["mean"].fmt)(interval.mean)
    kind = interval_kind(interval, within_run)
    if kind == "n2":
        half = (interval.high - interval.low) / 2   # type: ignore[operator]
        return f"{text} [n = 2: ±{STATS['mean'].fmt(half)}, too few to test]"
    if kind == "within-run" and within_run is not None:
        return f"{text} [{interval_text(*within_run)} within-run]"
    return text if kind == "none" else f"{text} [{interval_text(interval.low, interval.high)}]"


def mean_header(rows: Sequence[ABRow]) -> str:
    """The mean column's header, naming the intervals its rows carry: "[95% CI]" only when
    every one is over repeated runs."""
    kinds = {interval_kind(r.interval, r.within_run) for r in rows if r.ids} - {"none"}
    if kinds <= {"runs"}:
        return "decode mean [95% CI]"
    if kinds == {"within-run"}:
        return "decode mean [within-run 95%]"
    return "decode mean [95%: over runs, or as the row says]"


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
    return signed(value, " pp")


def noise_floor_text(row: ABRow) -> str | None:
    """"noise floor ±4.2% (from repeats of anon-long)": what repeating one config already
    moves, which an untested change must beat; None without repeats."""
    if row.noise_floor_pct is None:
        return None
    return f"noise floor ±{row.noise_floor_pct:.1f}% (from repeats of {row.noise_floor_from})"


def verdict_words(row: ABRow) -> str:
    """The row's verdict (results/ab.py Verdict) in words, with its test's sizes where it
    was not tested or found no difference."""
    verdict, c = row.verdict, row.comparison
    if row.decision is not None:     # the decision rule's (a session run `until: decided`)
        return decision_words(row)
    if verdict is Verdict.NOT_TESTED and c is not None:
        return f"{verdict} (n={c.n_base}/{c.n_cand})"
    if verdict is Verdict.NO_DIFFERENCE and c is not None:
        n = f"{c.n_cand} rounds" if c.method == "paired" else f"{c.n_base}/{c.n_cand}"
        return f"{verdict} (n={n})"
    return str(verdict)


def decision_words(row: ABRow) -> str:
    """"faster (decided after 3 rounds)", "equivalent within ±2% (after 5 rounds)",
    "undecided after 10 rounds (the rule's max)"."""
    d, verdict = row.decision, row.verdict
    assert d is not None
    if verdict is Verdict.EQUIVALENT:
        return f"equivalent within ±{row.equivalence_pct:g}% (after {d.n} rounds)"
    if verdict is Verdict.UNDECIDED:
        return f"undecided after {d.n} rounds"
    return f"{verdict} (decided after {d.n} rounds)"


def verdict_text(row: ABRow) -> str:
    """The verdict, with the noise floor where the change could not be tested."""
    floor = noise_floor_text(row)
    words = verdict_words(row)
    return words if floor is None else f"{words}; {floor}"


def delta_label(row: ABRow) -> str:
    """The Δ row's name in the write-up's words: "Δ default vs k=6" (baseline first)."""
    return f"Δ {row.against_label or row.against} vs {row.label}"


HEADERS = ["Config", "decode mean [95% CI]", "p (Holm)", "verdict", "cache hit",
           "flash read/token", "J/token [95% CI]", "p J (Holm)"]
ALIGNS = ["---", "---:", "---:", "---", "---:", "---:", "---:", "---:"]
_J = STATS["j_per_token"].fmt


def joules_cell(interval: Interval | None) -> str:
    """Mean J/token with its interval ("0.512 [0.49–0.53]"), "—" when not measured."""
    if interval is None or is_missing(interval.mean):
        return DASH
    ci = interval_text(interval.low, interval.high, _J)
    return _J(interval.mean) if ci == DASH else f"{_J(interval.mean)} [{ci}]"


def value_cells(row: ABRow) -> list[str]:
    """A config's own row: the cells of HEADERS after Config (escaping is the caller's:
    Config is data)."""
    if row.is_baseline:
        verdict = "baseline"
    elif not row.ids:
        verdict = f"{verdict_words(row)} ({DAGGER}: {', '.join(map(str, row.failed))})"
    else:
        verdict = DASH
    return [mean_cell(row.interval, within_run=row.within_run) if row.ids else DASH,
            DASH, verdict,
            STATS["cache_hit_pct"].fmt(row.cache_hit_pct),
            STATS["read_mib_per_token"].fmt(row.read_mib_per_token),
            joules_cell(row.j_per_token), DASH]


def delta_cells(row: ABRow) -> list[str] | None:
    """The Δ row under a compared config: its change from the baseline in each column
    (cache hit in points, exact; flash read in %, exact), None when there is no change to
    state (a baseline, or no ok run)."""
    c = row.comparison
    if row.is_baseline or c is None:
        return None
    return [delta_cell(c), p_cell(c.p_adjusted), verdict_text(row), pp(row.cache_hit_delta_pp),
            pct(row.read_delta_pct),
            DASH if row.energy is None else delta_cell(row.energy),
            DASH if row.energy is None else p_cell(row.energy.p_adjusted)]


def table_rows(group: ABGroup) -> list[tuple[ABRow, bool, list[str]]]:
    """(row, is it the Δ row, cells after Config) in the table's order: each baseline, each
    config compared with it, and the Δ row under that config."""
    out: list[tuple[ABRow, bool, list[str]]] = []
    for row in group.rows:
        out.append((row, False, value_cells(row)))
        delta = delta_cells(row)
        if delta is not None:
            out.append((row, True, delta))
    return out


def first_cell(row: ABRow, is_delta: bool) -> str:
    return md.md_escape(delta_label(row) if is_delta else row.label)


def notes(group: ABGroup) -> list[str]:
    """How to read a group's A/B table: the method, and what a single run cannot tell."""
    rows = [r for r in group.rows if r.comparison is not None]
    # the decision rule's rows are no fixed-sample test: they say so on their own
    tested = [c for r in rows if (c := r.comparison) is not None and c.p_value is not None
              and r.decision is None]
    single = [r for r in rows if (c := r.comparison) is not None and c.p_value is None
              and r.decision is None]
    methods = sorted({c.method for c in tested if c.method})
    how = {"paired": "paired by round (both configs ran in every round: an interleaved "
                     "order or a pair)",
           "welch": "Welch's t-test (the rounds are not paired)"}
    out = []
    if tested:
        out.append(f"Δ rows: the ratio of the geometric means of the runs' decode tok/s, with "
                   f"its 95% interval, tested on log tok/s, "
                   f"{' or '.join(how[m] for m in methods)}. p is Holm-corrected across the "
                   f"{group.family} comparison(s) of this document; *faster* / *slower* only "
                   f"when it is below {ALPHA:g}.")
    if any(r.decision is not None for r in group.rows):
        out.append("Decided configs (the session ran `until: decided`): Δ is the decision "
                   "rule's, with the repeated interval its verdict rests on (wider than a "
                   "single 95% interval: it holds over every look), and the verdict is the "
                   "rule's (Method, Stopping rule; docs/decision.md): no fixed-sample p-value, "
                   "and not in the document's Holm correction (the rule corrects for its own "
                   "comparisons and looks).")
    if any(interval_kind(r.interval, r.within_run) == "n2" for r in group.rows if r.ids):
        out.append("n = 2: the 95% interval of a mean over two runs has one degree of freedom "
                   "(its half-width is 12.7× the standard error); it is given as ± its "
                   "half-width, read as a range of tok/s it says little (it can run below 0).")
    if single:
        out.append("Configs measured once (or compared with a baseline measured once) have no "
                   "interval and no test: their Δ is one measurement against another.")
        if any(r.noise_floor_pct is not None for r in rows):
            out.append("noise floor: the largest change between two runs of one config of the "
                       "same model and device (this session's repeats, else the newest earlier "
                       "session's); a single-run Δ must beat it to mean anything, and still is "
                       "not a test.")
        if any(r.within_run is not None for r in group.rows):
            out.append("within-run: a single run's 95% interval over its own tokens; it says "
                       "how steady that run was, not how far a repeat would land.")
    if any(not is_missing(r.cache_hit_delta_pp) or not is_missing(r.read_delta_pct)
           for r in group.rows if not r.is_baseline):
        out.append("Cache hit and flash read per token follow from the routing and the cache, "
                   "not from timing: their differences (in the Δ rows, cache hit in "
                   "percentage points) are exact and carry no interval.")
    if any(r.energy is not None for r in group.rows):
        out.append("Δ J/token: ratio of the geometric means of the runs' J/token over the "
                   "decode phase, with its 95% interval, tested as tok/s is; p is "
                   "Holm-corrected across the energy comparisons (docs/energy.md).")
    return out


def headers(group: ABGroup) -> list[str]:
    return [HEADERS[0], mean_header(group.rows), *HEADERS[2:]]


KEEP = (0, 1, 3)      # Config, the mean, the verdict: shown even when empty


def table(group: ABGroup) -> md.Table:
    """The A/B table of one group, without notes (`notes` covers a whole document)."""
    t = md.Table(headers(group), list(ALIGNS))
    for row, is_delta, cells in table_rows(group):
        t.rows.append([first_cell(row, is_delta)] + cells)
    return t.drop_empty(keep=KEEP)


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
                "label": row.label, "baseline": row.against or g.baseline,
                "mean": row.interval.mean, "mean_ci_low": row.interval.low,
                "mean_ci_high": row.interval.high,
                "delta_pct": c.delta_pct if c else None,
                "ci_low_pct": c.ci_low_pct if c else None,
                "ci_high_pct": c.ci_high_pct if c else None,
                "p_value": c.p_value if c else None,
                "p_adjusted": c.p_adjusted if c else None,
                "significant": bool(c.significant) if c else False,
                "n_base": c.n_base if c else _base_runs(g, row),
                "n_config": c.n_cand if c else len(row.ids),
                "method": c.method if c else None,
                "verdict": verdict_words(row),
                "noise_floor_pct": row.noise_floor_pct,
                "noise_floor_from": row.noise_floor_from,
                "within_run_ci_low": row.within_run[0] if row.within_run else None,
                "within_run_ci_high": row.within_run[1] if row.within_run else None,
                "cache_hit_pct": row.cache_hit_pct,
                "cache_hit_delta_pp": None if row.is_baseline else row.cache_hit_delta_pp,
                "read_mib_per_token": row.read_mib_per_token,
                "read_delta_pct": None if row.is_baseline else row.read_delta_pct,
                "j_per_token": row.j_per_token.mean if row.j_per_token else None,
                "j_per_token_ci_low": row.j_per_token.low if row.j_per_token else None,
                "j_per_token_ci_high": row.j_per_token.high if row.j_per_token else None,
                "energy_delta_pct": row.energy.delta_pct if row.energy else None,
                "energy_ci_low_pct": row.energy.ci_low_pct if row.energy else None,
                "energy_ci_high_pct": row.energy.ci_high_pct if row.energy else None,
                "energy_p_adjusted": row.energy.p_adjusted if row.energy else None,
            })
    return out


def _base_runs(group: ABGroup, row: ABRow) -> int:
    """The number of ok runs of the row's baseline."""
    base = next((r for r in group.rows if r.is_baseline and r.config == row.against), None)
    return len((base or group.rows[0]).ids)


def frame(groups: Sequence[ABGroup]) -> pd.DataFrame:
    return pd.DataFrame(records(groups))
