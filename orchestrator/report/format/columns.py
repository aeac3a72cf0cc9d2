"""The columns of every statistics table, declared once. `orch table` (markdown, csv, json),
the terminal (`orch run`'s session table, `orch runs`, `orch show`) and the report's tables
all lay their statistics out from the specs here, so a column reads the same everywhere and
adding a statistic to the views is its formatter in formatters.STATS plus one `stat(...)` in
each table below that shows it.

A column is a key of the per-run statistics frame (stats/statistics.py: STAT_COLUMNS, also
the csv/json column) with its header and formatter (both from formatters.STATS unless a table
renames or reformats it), its markdown alignment, whether it is the row's headline figure
(bold in markdown), and a note saying what it holds where a caption names the columns shown.
A few cells combine keys (the compute + I/O split, the CPU temperature range), and two are
the report's own (the 95% interval and the spread of a config's repeated runs).

Headers, order and cells are those of the published tables (docs/report.md, docs/formats.md
"Display"); tests/test_analysis_oracle.py holds `orch table` to the published summary.md.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from orchestrator.report.format.cells import ci_cell, spread_cell
from orchestrator.report.format.formatters import (
    STATS,
    energy_cell,
    gib,
    ms_in_s,
    number,
    split,
    temp_range,
    token_count,
    useful,
)
from orchestrator.report.format.within_cells import (
    interval_cell,
    ms_interval_cell,
    pct_cell,
    steady_cell,
)
from orchestrator.stats.values import DASH

if TYPE_CHECKING:
    from rich.console import JustifyMethod

_JUSTIFY: dict[str, JustifyMethod] = {"---": "left", ":---": "left", "---:": "right",
                                       ":--:": "center"}
# a cell's formatter takes one value per key of its column (`Column.keys`): one for most, two
# or three where a cell combines keys (the compute + I/O split)
CellFormatter = Callable[..., str]


class Record(Protocol):
    """What a cell reads its keys from: a run's figures (stats/figures.py RunFigures) or a
    report row (a dict); a key it lacks reads as None (not measured)."""

    def get(self, key: str, /) -> Any: ...


@dataclass(frozen=True)
class Column:
    key: str                        # the statistic (also the csv/json column)
    header: str
    fmt: CellFormatter              # takes the values of `keys`, in order
    align: str = "---:"             # markdown: "---" left, "---:" right, ":--:" centred
    headline: bool = False          # the row's headline figure: bold in markdown
    also: tuple[str, ...] = ()      # further keys one cell combines (compute + I/O)
    optional: bool = False          # `orch table` leaves it out when no row has it (the
                                    # report leaves out every column that no row has)
    note: str = ""                  # what it holds, for a caption naming the columns shown
    label: str = ""                 # a longer name for one-value-per-line views (`orch show`)
    data: tuple[str, ...] = ()      # csv/json keys, where a derived cell's inputs are others
    printed: CellFormatter | None = None   # a summary-only run's cell: the engine's digits
                                    # (formatters.Stat.printed)
    summary: bool = False           # shown only in a table with a summary-only run's row (the
                                    # figure the study lays such rows out by: s/token)

    @property
    def keys(self) -> tuple[str, ...]:
        return (self.key, *self.also)

    @property
    def exported(self) -> tuple[str, ...]:
        """The keys csv and json carry for this column (unformatted)."""
        return self.data or self.keys

    @property
    def name(self) -> str:
        return self.label or self.header

    @property
    def justify(self) -> JustifyMethod:
        """The alignment as rich's `justify`."""
        return _JUSTIFY[self.align]

    def text(self, rec: Record | None) -> str:
        """The formatted cell, plain (the terminal). A summary-only run's figures are the
        numbers its engine printed, written with the engine's digits (formatters.py)."""
        values = (None if rec is None else rec.get(k) for k in self.keys)
        if self.printed is not None and rec is not None and rec.get("summary_only"):
            return self.printed(*values)
        return self.fmt(*values)

    def cell(self, rec: Record | None, headline: bool = True) -> str:
        """The markdown cell: a headline figure in bold, unless `headline` is False (a run
        left out of the aggregates shows its figures, but not as a headline). A dash stays
        plain."""
        text = self.text(rec)
        return f"**{text}**" if self.headline and headline and text != DASH else text


@dataclass(frozen=True)
class TableSpec:
    columns: tuple[Column, ...]
    caption: str = ""               # markdown line above the table ("" for none)
    title: str = ""                 # the caption's bold part, where it names the columns shown

    @property
    def headers(self) -> list[str]:
        return [c.header for c in self.columns]

    def caption_naming(self, headers: Iterable[str]) -> str:
        """"**title** (what each shown column holds):", naming only the columns in `headers`
        (a device without a temperature sensor gets no temperature column nor words)."""
        shown = set(headers)
        notes = [c.note or c.header for c in self.columns if c.header in shown]
        return f"**{self.title}** ({', '.join(notes)}):"


def stat(key: str, *, header: str | None = None, headline: bool = False, align: str = "---:",
         optional: bool = False, note: str = "", summary: bool = False) -> Column:
    """A column of one statistic with its shared header, formatter and label."""
    s = STATS[key]
    return Column(key, header or s.header, s.fmt, align, headline, optional=optional,
                  note=note, label=s.label, printed=s.printed, summary=summary)


def stats(*keys: str) -> tuple[Column, ...]:
    return tuple(stat(k) for k in keys)


# ---- the columns tables share ---------------------------------------------------------------

DECODE_SPLIT = Column("compute_s_per_token", "decode: compute + I/O (s/tok)", split,
                      also=("io_s_per_token",))
_MEAN = stat("mean", headline=True)
# the mean over the tokens after a trim: beside the whole run's headline mean, only with a trim
# (its header names the trim: within_cells.trim_header)
TRIMMED_MEAN = stat("mean_after_trim", optional=True)
_DISTRIBUTION = stats("min", "max", "median", "p5", "p95")
# from the engine's summary (majflt/token for the engines that count it).
# The throughput table keeps the study's columns (what a reader compares configs by) and stays
# readable at a page's width; the engine's timing detail goes to a second table under it
_FLASH = stats("cache_hit_pct", "read_mib_per_token")
_PREFILL = stats("prefill_tps", "ttft_s")
_STALL = (stat("stall_ms_per_token"), stat("majflt_per_token", optional=True))
# warm-up (MSER-5) and per-token latency; the steady-state cell says "not settled (...)" or
# "too short to tell" where the trend test (stats/settle.py) claims no steady state
STEADY = Column("steady_mean", STATS["steady_mean"].header, steady_cell, also=("settle_note",),
                label=STATS["steady_mean"].label,
                data=("steady_mean", "settled", "trend_pct", "settle_note"))
_WARM_UP = (STEADY, *stats("steady_from_token", "latency_p50_ms", "latency_p90_ms",
                           "latency_p99_ms"))
# within-run: one run's own tokens (stats/within_run.py), never a config-level figure
_MS = number("%.1f")
_WITHIN_RUN = (
    Column("tps_ci_low", "within-run 95% CI (tok/s)", interval_cell, also=("tps_ci_high",),
           data=("tps_ci_low", "tps_ci_high", "ci_method")),
    Column("mean_ms", "mean ms", _MS),
    Column("mean_ms_ci_low", "within-run 95% CI (ms)", ms_interval_cell,
           also=("mean_ms_ci_high",)),
    Column("median_ms", "median ms", _MS),
    Column("cv_pct", "within-run CV", pct_cell),
    Column("first_token_ms", "first token ms", _MS),
    Column("first5_mean_ms", "first 5 mean ms", _MS),
)
_RSS = stat("peak_rss_gib", note="peak process RSS")
_FLOOR = stat("mem_floor_gib", note="free-RAM floor (lowest MemAvailable)")
_BATTERY = stat("batt_temp_max_c", note="battery temperature maximum")
# energy over the decode phase (stats/energy.py): the J/token cell says why a run's energy was
# not measured ("not measured: charging"); csv/json carry energy_note beside it
J_PER_TOKEN = Column("j_per_token", STATS["j_per_token"].header, energy_cell,
                     also=("energy_note",), label=STATS["j_per_token"].label,
                     data=("j_per_token", "energy_note"))
_ENERGY_KEYS = ("energy_j", "power_w", "tokens_per_j", "net_j_per_token")


# ---- `orch table` (report/table/runs.py): the published columns first, with their headers and
# cells unchanged (the 2026-07-13 oracle), p5 where the phone study prints it ---------------

# A summary-only run (no token rows) has no per-token distribution: a table of such runs only
# leaves min..p95 out, and one with any such run shows s/token beside the mean, the figures the
# study lays these runs out by (tok/s, s/token, compute, flash read/token, cache hit)
THROUGHPUT = TableSpec(
    (_MEAN, stat("s_per_token", summary=True), TRIMMED_MEAN,
     *(stat(c.key, optional=True) for c in _DISTRIBUTION), *_FLASH, DECODE_SPLIT,
     # only where some run measured energy: the default table stays narrow
     *(stat(k, optional=True) for k in _ENERGY_KEYS[:2]),
     Column(J_PER_TOKEN.key, J_PER_TOKEN.header, J_PER_TOKEN.fmt, also=J_PER_TOKEN.also,
            optional=True, label=J_PER_TOKEN.label, data=J_PER_TOKEN.data),
     *(stat(k, optional=True) for k in _ENERGY_KEYS[2:])),
    "**Throughput** (tok/s; mean = aggregate decode; decode: compute + I/O = the engine's split "
    "of a token's decode time; with overlap the I/O figure is the read lanes' busy time):")
# the rest of the engine's summary (the columns the published throughput table had after the
# flash figures); per-token latency and warm-up are LATENCY's
DETAIL = TableSpec(
    (*_PREFILL, *_STALL),
    "**Prefill & stall** (prefill = prompt processing, tok/s; TTFT = time to the first token; "
    "stall = the decode wall time lost waiting for flash with overlap, — for a serial run, "
    "whose I/O is all stall; majflt = major page faults):")
LATENCY = TableSpec(
    (stat("mean", header="decode mean"), TRIMMED_MEAN, *_WARM_UP, *_WITHIN_RUN),
    "**Per-token latency & warm-up** (latency = wall time of one decode step, ms; steady "
    "state from the token where MSER-5 ends the warm-up, and the mean tok/s from there on, "
    "next to the decode mean; — under 20 tokens, or not settled within the first half of the "
    "run; *not settled* where the rate still trends from there on (Spearman p < 0.05 and over "
    "10% first → last quarter), *too short to tell* under 40 tokens; within-run = over one "
    "run's own tokens: its 95% interval of tok/s and of mean ms/token by stationary block "
    "bootstrap, the coefficient of variation of ms/token; first token and first-5 mean over "
    "the first decode tokens whatever the trim):")
PRESSURE = TableSpec(
    (_RSS, _FLOOR, *stats("cpu_temp_start_c", "cpu_temp_max_c"), _BATTERY),
    "**Device pressure** (peak process RSS, free-RAM floor, SoC/battery temperature):")
ENERGY = TableSpec(
    (*stats(*_ENERGY_KEYS[:2]), J_PER_TOKEN, *stats(*_ENERGY_KEYS[2:])),
    "**Energy** (over the decode phase: energy J, average power W, J/token, tokens per J, and "
    "net J/token above the idle power `orch calibrate` measured; — not measured; "
    "docs/energy.md):")
ADAPTIVE = TableSpec(
    (*stats("cache_budget_mib", "cache_resizes", "cache_resident_mib", "spec_recall_pct",
            "spec_useful_pct", "spec_read_mib_per_token"), stat("spec_auto_off", align=":--:")),
    "**Adaptive cache & speculative gating** (budget & resizes under `--cache-mb auto`; "
    "router-prediction recall, useful-hit rate and auto-off under `--spec-gate`):")
# The per-variant comparison of the 2026-07-12-pr23 write-up, in that document's own layout
# (units in the headers, whole degrees): its "decode tok/s" cell carries the change from the
# table's first row (derived in tables.py `_variant_rows`), and its "useful" cell combines two
# counters with the run's useful share; csv/json carry the counters (`data`). The published header
# says "stall ms/tok" but prints s/tok (0.063 for a 63 ms stall); the unit is stated
# correctly here. p5 and the compute + I/O split follow the published columns.
VARIANTS = TableSpec((
    Column("mean", "decode tok/s", number("%.2f"), headline=True),
    *stats("median", "p95", "cache_hit_pct"),
    Column("read_mib_per_token", "flash MiB/tok", number("%.0f")),
    Column("stall_ms_per_token", "stall s/tok", ms_in_s("%.3f")),
    Column("spec_read_mib", "spec MiB", number("%.0f")),
    Column("spec_useful", "useful", useful, also=("spec_experts", "spec_useful_pct"),
           data=("spec_useful", "spec_experts")),
    Column("spec_recall_pct", "recall", number("%.0f%%")),
    Column("ttft_s", "TTFT s", number("%.1f")),
    Column("peak_rss_gib", "peak RSS", gib),
    Column("cpu_temp_max_c", "CPU max", number("%.0f°C")),
    stat("p5"),
    DECODE_SPLIT,
))
TABLES: dict[str, TableSpec] = {
    "throughput": THROUGHPUT, "detail": DETAIL, "latency": LATENCY, "pressure": PRESSURE,
    "adaptive": ADAPTIVE, "variants": VARIANTS, "energy": ENERGY}


# ---- the report (report/document/group_tables.py): one row per config, so the mean of repeated runs
# comes with its interval and spread; warm-up and latency next to the throughput -------------

MEAN_CI = Column("mean_ci_low", "95% CI", ci_cell, also=("mean_ci_high", "spread"),
                 data=("mean_ci_low", "mean_ci_high"))
SPREAD = Column("spread", "spread of means", spread_cell)   # the row's spread (context.py)
CPU_RANGE = Column("cpu_temp_start_c", "CPU start → max", temp_range, also=("cpu_temp_max_c",),
                   note="CPU temperature at the start → its maximum")

REPORT_THROUGHPUT = TableSpec(
    (_MEAN, MEAN_CI, stat("s_per_token", summary=True), TRIMMED_MEAN, *_DISTRIBUTION, *_FLASH,
     DECODE_SPLIT,
     # energy (mean over a config's ok runs), where some run measured it: as orch table's
     *(c for c in THROUGHPUT.columns if c.key in (*_ENERGY_KEYS, J_PER_TOKEN.key))),
    "**Throughput** (tok/s; mean = aggregate decode n / Σ decode time, in bold; min/max = "
    "slowest/fastest token; decode: compute + I/O = the engine's split of a token's decode "
    "time):")
REPORT_DETAIL = TableSpec(
    (SPREAD, *_PREFILL, *_STALL, *_WARM_UP),
    "**Prefill, stall & warm-up** (prefill = prompt processing, tok/s; TTFT = time to the "
    "first token; stall = decode wall time lost waiting for flash with overlap, — for a serial "
    "run, whose I/O is all stall; steady state from the token where MSER-5 ends the warm-up; "
    "p50/p90/p99 = per-token latency, ms):")
REPORT_PRESSURE = TableSpec(
    (_RSS, _FLOOR, CPU_RANGE, _BATTERY),
    "**Device pressure** (peak process RSS, free-RAM floor, CPU temperature at the start → "
    "its maximum, battery maximum):",
    title="Device pressure")


def pick(specs: Iterable[TableSpec], keys: Iterable[str]) -> TableSpec:
    """A table of the columns named by `keys` (Column.key), in that order, drawn from `specs`
    (`--columns`); KeyError names the first unknown key."""
    by_key: dict[str, Column] = {}
    for spec in specs:          # a key in two specs: the first spec's column (its header)
        for c in spec.columns:
            by_key.setdefault(c.key, c)
    cols = []
    for key in keys:
        if key not in by_key:
            raise KeyError(key)
        cols.append(by_key[key])
    return TableSpec(tuple(cols), "**Throughput** (the columns asked for; tok/s unless the "
                                  "header says otherwise):")


def column_keys(specs: Iterable[TableSpec]) -> list[str]:
    """The keys `--columns` accepts, in the tables' order."""
    return list(dict.fromkeys(c.key for spec in specs for c in spec.columns))


# ---- the terminal (report/terminal/runs.py) -----------------------------------------------------

# the per-run columns of `orch run`'s closing table
# tokens: generated (token rows, else the engine's count: a summary-only import's is its
# generation line's)
TOKENS = Column("tokens", "tokens", token_count, align="---", label="generated tokens")
SESSION = TableSpec((Column(TOKENS.key, TOKENS.header, token_count),
                     *stats("mean", "median", "p5", "p95", "min", "max", "read_mib_per_token",
                            "cache_hit_pct", "peak_rss_gib")))
# the figures of `orch runs`' listing, after the run's facts (left-aligned, as it always was)
LISTING = TableSpec((TOKENS, stat("mean", header="mean tok/s", align="---")))
# what `orch show` lists, one statistic a line under its label (those the run measured)
SHOW = TableSpec(stats(
    "mean", "s_per_token", "mean_after_trim", "steady_mean", "steady_from_token", "median",
    "p5", "p95", "min", "max",
    "latency_p50_ms", "latency_p90_ms", "latency_p99_ms", "prefill_tps", "ttft_s",
    "cache_hit_pct", "read_mib_per_token", "stall_ms_per_token", "compute_s_per_token",
    "io_s_per_token", "majflt_per_token", "cache_budget_mib", "cache_resizes",
    "cache_resident_mib", "spec_recall_pct", "spec_useful_pct", "spec_read_mib_per_token",
    "spec_auto_off", "peak_rss_gib", "mem_floor_gib", "cpu_temp_start_c",
    "cpu_temp_max_c", "batt_temp_max_c", "energy_j", "power_w", "j_per_token",
    "tokens_per_j", "net_j_per_token"))
