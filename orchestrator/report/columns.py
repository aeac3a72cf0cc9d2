"""The columns of every statistics table, declared once. `orch table` (markdown, csv, json),
the terminal (`orch run`'s session table, `orch runs`, `orch show`) and the report's tables
all lay their statistics out from the specs here, so a column reads the same everywhere and
adding a statistic to the views is its formatter in formatting.STATS plus one `stat(...)` in
each table below that shows it.

A column is a key of the per-run statistics frame (stats/statistics.py: STAT_COLUMNS, also
the csv/json column) with its header and formatter (both from formatting.STATS unless a table
renames or reformats it), its markdown alignment, whether it is the row's headline figure
(bold in markdown), and a note saying what it holds where a caption names the columns shown.
A few cells combine keys (the compute + I/O split, the CPU temperature range), and two are
the report's own (the 95% interval and the spread of a config's repeated runs).

Headers, order and cells are those of the published tables (docs/report.md, docs/formats.md
"Display"); tests/test_analysis_oracle.py holds `orch table` to the published summary.md.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from orchestrator.report.cells import ci_cell, spread_cell
from orchestrator.report.formatting import (
    STATS,
    Formatter,
    gib,
    number,
    split,
    temp_range,
)
from orchestrator.stats.values import DASH, is_missing

_JUSTIFY = {"---": "left", ":---": "left", "---:": "right", ":--:": "center"}


@dataclass(frozen=True)
class Column:
    key: str                        # the statistic (also the csv/json column)
    header: str
    fmt: Formatter                  # takes the values of `keys`, in order
    align: str = "---:"             # markdown: "---" left, "---:" right, ":--:" centred
    headline: bool = False          # the row's headline figure: bold in markdown
    also: tuple[str, ...] = ()      # further keys one cell combines (compute + I/O)
    optional: bool = False          # `orch table` leaves it out when no row has it (the
                                    # report leaves out every column that no row has)
    note: str = ""                  # what it holds, for a caption naming the columns shown
    label: str = ""                 # a longer name for one-value-per-line views (`orch show`)
    data: tuple[str, ...] = ()      # csv/json keys, where a derived cell's inputs are others

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
    def justify(self) -> str:
        """The alignment as rich's `justify`."""
        return _JUSTIFY[self.align]

    def text(self, rec: Mapping[str, Any] | None) -> str:
        """The formatted cell, plain (the terminal)."""
        return self.fmt(*(None if rec is None else rec.get(k) for k in self.keys))

    def cell(self, rec: Mapping[str, Any] | None, headline: bool = True) -> str:
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
         optional: bool = False, note: str = "") -> Column:
    """A column of one statistic with its shared header, formatter and label."""
    s = STATS[key]
    return Column(key, header or s.header, s.fmt, align, headline, optional=optional,
                  note=note, label=s.label)


def stats(*keys: str) -> tuple[Column, ...]:
    return tuple(stat(k) for k in keys)


# ---- the columns tables share ---------------------------------------------------------------

DECODE_SPLIT = Column("compute_s_per_token", "decode: compute + I/O (s/tok)", split,
                      also=("io_s_per_token",))
_MEAN = stat("mean", headline=True)
_DISTRIBUTION = stats("min", "max", "median", "p5", "p95")
# from the engine's summary: the phone study's compute + I/O split after the stall, and
# majflt/token for the engines that count it
_ENGINE = (*stats("prefill_tps", "ttft_s", "cache_hit_pct", "read_mib_per_token",
                  "stall_ms_per_token"),
           DECODE_SPLIT, stat("majflt_per_token", optional=True))
# warm-up (MSER-5) and per-token latency
_WARM_UP = stats("steady_mean", "steady_from_token", "latency_p50_ms", "latency_p90_ms",
                 "latency_p99_ms")
_RSS = stat("peak_rss_gib", note="peak process RSS")
_FLOOR = stat("mem_floor_gib", note="free-RAM floor (lowest MemAvailable)")
_BATTERY = stat("batt_temp_max_c", note="battery temperature maximum")


# ---- `orch table` (report/tables.py): the published columns first, with their headers and
# cells unchanged (the 2026-07-13 oracle), p5 where the phone study prints it ---------------

THROUGHPUT = TableSpec(
    (_MEAN, *_DISTRIBUTION, *_ENGINE),
    "**Throughput** (tok/s; mean = aggregate decode, prefill = prompt-processing; decode: "
    "compute + I/O = the engine's split of a token's decode time; with overlap the I/O figure "
    "is the read lanes' busy time, and the stall is the wall time lost to flash):")
LATENCY = TableSpec(
    (stat("mean", header="mean, all tokens"), *_WARM_UP),
    "**Per-token latency & warm-up** (latency = wall time of one decode step, ms; steady "
    "state from the token where MSER-5 ends the warm-up, and the mean tok/s from there on, "
    "next to the mean over all tokens; — under 20 tokens, or not settled within the first "
    "half of the run):")
PRESSURE = TableSpec(
    (_RSS, _FLOOR, *stats("cpu_temp_start_c", "cpu_temp_max_c"), _BATTERY),
    "**Device pressure** (peak process RSS, free-RAM floor, SoC/battery temperature):")
ADAPTIVE = TableSpec(
    (*stats("cache_budget_mib", "cache_resizes", "cache_resident_mib", "spec_recall_pct",
            "spec_useful_pct", "spec_read_mib_per_token"), stat("spec_auto_off", align=":--:")),
    "**Adaptive cache & speculative gating** (budget & resizes under `--cache-mb auto`; "
    "router-prediction recall, useful-hit rate and auto-off under `--spec-gate`):")
# The per-variant comparison of the 2026-07-12-pr23 write-up, in that document's own layout
# (units in the headers, whole degrees): its "decode tok/s" cell carries the change from the
# table's first row, and its "useful" cell combines two counters; both are derived in
# tables.py (`_variant_rows`), and csv/json carry their inputs (`data`). The published header
# says "stall ms/tok" but prints s/tok (0.063 for a 63 ms stall); the unit is stated
# correctly here. p5 and the compute + I/O split follow the published columns.
VARIANTS = TableSpec((
    Column("mean", "decode tok/s", number("%.2f"), headline=True),
    *stats("median", "p95", "cache_hit_pct"),
    Column("read_mib_per_token", "flash MiB/tok", number("%.0f")),
    Column("stall_s_per_token", "stall s/tok", number("%.3f"), data=("stall_ms_per_token",)),
    Column("spec_read_mib", "spec MiB", number("%.0f")),
    Column("spec_useful", "useful", lambda v: DASH if is_missing(v) else v,
           data=("spec_useful", "spec_experts")),
    Column("spec_recall_pct", "recall", number("%.0f%%")),
    Column("ttft_s", "TTFT s", number("%.1f")),
    Column("peak_rss_gib", "peak RSS", gib),
    Column("cpu_temp_max_c", "CPU max", number("%.0f°C")),
    stat("p5"),
    DECODE_SPLIT,
))
TABLES: dict[str, TableSpec] = {
    "throughput": THROUGHPUT, "latency": LATENCY, "pressure": PRESSURE, "adaptive": ADAPTIVE,
    "variants": VARIANTS}


# ---- the report (report/sections.py): one row per config, so the mean of repeated runs
# comes with its interval and spread; warm-up and latency next to the throughput -------------

MEAN_CI = Column("mean_ci_low", "95% CI", ci_cell, also=("mean_ci_high",))
SPREAD = Column("spread", "spread of means", spread_cell)   # the row's spread (context.py)
CPU_RANGE = Column("cpu_temp_start_c", "CPU start → max", temp_range, also=("cpu_temp_max_c",),
                   note="CPU temperature at the start → its maximum")

REPORT_THROUGHPUT = TableSpec(
    (_MEAN, MEAN_CI, SPREAD, *_DISTRIBUTION, *_ENGINE, *_WARM_UP),
    "**Throughput** (tok/s; mean = aggregate decode n / Σ decode time, in bold; min/max = "
    "slowest/fastest token; prefill = prompt processing):")
REPORT_PRESSURE = TableSpec(
    (_RSS, _FLOOR, CPU_RANGE, _BATTERY),
    "**Device pressure** (peak process RSS, free-RAM floor, CPU temperature at the start → "
    "its maximum, battery maximum):",
    title="Device pressure")


# ---- the terminal (report/terminal.py) -----------------------------------------------------

# the per-run columns of `orch run`'s closing table
SESSION = TableSpec(stats("n", "mean", "median", "p5", "p95", "min", "max",
                          "read_mib_per_token", "cache_hit_pct", "peak_rss_gib"))
# the figures of `orch runs`' listing, after the run's facts (left-aligned, as it always was)
LISTING = TableSpec((stat("n", align="---"), stat("mean", header="mean tok/s", align="---")))
# what `orch show` lists, one statistic a line under its label (those the run measured)
SHOW = TableSpec(stats(
    "mean", "steady_mean", "steady_from_token", "median", "p5", "p95", "min", "max",
    "latency_p50_ms", "latency_p90_ms", "latency_p99_ms", "prefill_tps", "ttft_s",
    "cache_hit_pct", "read_mib_per_token", "stall_ms_per_token", "compute_s_per_token",
    "io_s_per_token", "majflt_per_token", "peak_rss_gib", "mem_floor_gib", "cpu_temp_start_c",
    "cpu_temp_max_c", "batt_temp_max_c"))
