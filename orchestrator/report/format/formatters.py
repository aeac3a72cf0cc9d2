"""How every view writes a value: one formatter per statistic, with its unit, and "—" for a
value that was not measured (never 0, never an empty cell).

The terminal (`orch run`, `orch show`), `orch table`, `orch report` and `orch compare` all
format through STATS, so a figure reads the same in each of them and in the published
summary.md tables; which table shows which statistic, under which header, is declared in
report/format/columns.py. CSV and JSON carry the same statistics unformatted, under keys that name
their unit (peak_rss_gib, read_mib_per_token, ...), with null for not measured (`records`).

%-formatting rounds the binary value correctly and an exact half to even (76.5 -> "76%"), as
the published tables do.

Precision, one rule (docs/formats.md "Display"): a figure is printed with the decimals of the
published tables, except that
- a value that is not zero never prints as zero: where those decimals would show no digit but
  0 ("0.0" for 0.0213 major faults/token), it prints three significant figures (`number`);
- the decode rate and s/token, which the engine itself prints with three decimals, keep three
  significant figures where the published two decimals would drop one (0.687 tok/s, not 0.69:
  `significant`); orch's own per-token distribution (min, median, p5, ...) keeps the published
  decimals (the 2026-07-13 table's 0.07 and 0.30);
- a summary-only run's figures are the numbers the engine printed (no token rows to compute
  them from): they print with the engine's digits (`Stat.printed`, bmoe-cli's summary lines:
  tok/s and s/token 3 decimals, MiB/token 2, cache hit 1), 535.75 MiB and 20.4%, not 536 MiB
  and 20%. Memory is GiB (kB / 1024²) and is written "GiB": the published
phone-study tables wrote "GB" for the same quantity.
"""
from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from orchestrator.stats.values import DASH, is_missing, plain

Formatter = Callable[[Any], str]
MINUS = "−"                    # the published documents print deltas with a real minus sign


_FIXED = re.compile(r"%\.(\d+)f")
SIGNIFICANT = 3       # the significant figures a widened number keeps


def decimals_for(value: float, figures: int = SIGNIFICANT) -> int:
    """The decimals that show `figures` significant figures of a non-zero value (0.0213: 4)."""
    return max(0, figures - 1 - math.floor(math.log10(abs(value))))


def _widened(pattern: str, value: float) -> str:
    """`pattern` with its fixed decimals raised to show three significant figures of value."""
    found = _FIXED.search(pattern)
    if found is None:
        return pattern % value
    wide = max(int(found.group(1)), decimals_for(value))
    return (pattern[:found.start()] + f"%.{wide}f" + pattern[found.end():]) % value


def _shows_nothing(text: str) -> bool:
    """The number in `text` is all zeros ("0.0", "0%", "-0.00 MiB")."""
    digits = [c for c in text if c.isdigit()]
    return bool(digits) and not any(c != "0" for c in digits)


def _measured_nonzero(value: Any) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value) and value != 0)


def number(pattern: str) -> Formatter:
    """`pattern % value`, or "—" when the value was not measured; a value that is not zero
    but would print as zero at `pattern`'s decimals prints three significant figures
    (0.0213, not 0.0)."""
    def cell(value: Any) -> str:
        if is_missing(value):
            return DASH
        text = pattern % value
        if _measured_nonzero(value) and _shows_nothing(text):
            return _widened(pattern, value)
        return text
    return cell


def significant(pattern: str) -> Formatter:
    """`pattern`, its decimals raised where they would show fewer than three significant
    figures (a rate the engine prints with three decimals: 0.687 tok/s, not 0.69; 4.702
    stays 4.70)."""
    def cell(value: Any) -> str:
        if is_missing(value):
            return DASH
        return _widened(pattern, value) if _measured_nonzero(value) else pattern % value
    return cell


MS_PER_S = 1000.0


def ms_in_s(pattern: str) -> Formatter:
    """A figure kept in ms, printed in seconds (`pattern` of seconds): a unit of display, the
    figure itself is the model's."""
    def cell(value: Any) -> str:
        return DASH if is_missing(value) else pattern % (value / MS_PER_S)
    return cell


def useful(used: Any, experts: Any, share_pct: Any) -> str:
    """Speculated experts that were used: "12/40 (30%)" (the share is the run's
    spec_useful_pct), "—" when not measured."""
    if is_missing(used) or is_missing(experts) or not experts or is_missing(share_pct):
        return DASH
    return f"{used:.0f}/{experts:.0f} ({share_pct:.0f}%)"


def _with_small(pattern: str, below: float, small: Callable[[float], str]) -> Formatter:
    """`pattern`, but values in (0, below) through `small`: at the published precision they
    would print a false zero (a synthetic moe-probe reads well under a MiB per token and its
    process stays under 0.1 GiB). The unit stays the column's own."""
    shown = number(pattern)
    def cell(value: Any) -> str:
        if is_missing(value):
            return DASH
        return small(value) if 0 < value < below else shown(value)
    return cell


def gib(value: Any) -> str:
    """A GiB quantity: "6.35 GiB"; under 0.1 GiB with three decimals ("0.023 GiB"), so a
    small process is not a false "0.00" and a column never mixes units."""
    return _GIB(value)


_GIB = _with_small("%.2f GiB", 0.1, number("%.3f GiB"))
_READ_MIB = _with_small("%.0f MiB", 10.0, number("%.2f MiB"))


# under a throughput table with a plain mmap run (report/table/session.py): why its flash read
# is "—" where the study printed "0 (page cache)"
PAGE_CACHE_NOTE = ("flash read/token is — for a plain mmap run: its weights are read through "
                   "the page cache, which nothing counts (the engine's own read counter is 0 "
                   "by construction), so it was not measured, not 0.")


def _positive(pattern: str) -> Formatter:
    # spec counters of 0 mean "nothing speculated": the published table shows a dash
    return lambda v: pattern % v if not is_missing(v) and v else DASH


def yes_no(value: Any) -> str:
    return DASH if is_missing(value) else ("yes" if value else "no")


def bold(f: Formatter) -> Formatter:
    """The headline figure of a row, in markdown bold (a dash stays plain)."""
    def cell(value: Any) -> str:
        text = f(value)
        return text if text == DASH else f"**{text}**"
    return cell


@dataclass(frozen=True)
class Stat:
    header: str          # the column header of the published tables (unit in the header or cell)
    fmt: Formatter
    label: str = ""      # a longer name for one-value-per-line views (`orch show`)
    printed: Formatter | None = None   # a summary-only run's value: the engine's digits

    @property
    def name(self) -> str:
        return self.label or self.header


_TPS = number("%.2f")
_CELSIUS = number("%.1f °C")
_S_PER_TOKEN = number("%.3f")
_MS = number("%.1f")
# the precision bmoe-cli prints its summary lines with (docs/formats.md §3): a summary-only
# run's figures are those printed numbers
_PRINTED_3 = number("%.3f")

# Every statistic a view shows (keys of stats/statistics.py: STAT_COLUMNS), with its shared
# header; which tables show it, in which order: report/format/columns.py.
STATS: dict[str, Stat] = {
    "n": Stat("tokens", number("%d")),
    "mean": Stat("decode mean", significant("%.2f"), "mean tok/s (n / decode s)", _PRINTED_3),
    "s_per_token": Stat("s/token", significant("%.3f"), "decode s/token (decode s / n)",
                        _PRINTED_3),
    # the mean over the tokens after a trim, beside the whole run's (views add the N:
    # within_cells.trim_header)
    "mean_after_trim": Stat("mean after trim", significant("%.2f"),
                            "mean tok/s after the trim"),
    "median": Stat("median", _TPS, "median tok/s"),
    "p5": Stat("p5", _TPS, "p5 tok/s"),
    "p95": Stat("p95", _TPS, "p95 tok/s"),
    "min": Stat("min", _TPS, "min tok/s (slowest token)"),
    "max": Stat("max", _TPS, "max tok/s (fastest token)"),
    "prefill_tps": Stat("prefill tok/s", _TPS, printed=number("%.1f")),
    "ttft_s": Stat("TTFT (s)", number("%.1f")),
    "cache_hit_pct": Stat("cache hit", number("%.0f%%"), printed=number("%.1f%%")),
    "read_mib_per_token": Stat("flash read/token", _READ_MIB, printed=number("%.2f MiB")),
    # the engine prints the stall in s/token with three decimals: whole ms
    "stall_ms_per_token": Stat("stall ms/tok", number("%.1f"), printed=number("%.0f")),
    "compute_s_per_token": Stat("compute s/tok", _S_PER_TOKEN),
    "io_s_per_token": Stat("I/O s/tok", _S_PER_TOKEN),
    "majflt_per_token": Stat("majflt/token", number("%.1f"), "major page faults per token",
                             number("%.2f")),
    "latency_p50_ms": Stat("p50 ms", _MS, "per-token latency p50 (ms)"),
    "latency_p90_ms": Stat("p90 ms", _MS, "per-token latency p90 (ms)"),
    "latency_p99_ms": Stat("p99 ms", _MS, "per-token latency p99 (ms)"),
    "steady_from_token": Stat("steady from token", number("%.0f"),
                              "steady state from token (MSER-5)"),
    "steady_mean": Stat("steady-state mean", _TPS, "steady-state mean tok/s"),
    "peak_rss_gib": Stat("peak RSS", gib),
    "mem_floor_gib": Stat("free-RAM floor", gib),
    "cpu_temp_start_c": Stat("CPU start", _CELSIUS),
    "cpu_temp_max_c": Stat("CPU max", _CELSIUS),
    "batt_temp_max_c": Stat("battery max", _CELSIUS),
    "cache_budget_mib": Stat("cache budget", number("%.0f MiB")),
    "cache_resizes": Stat("resizes", number("%d")),
    "cache_resident_mib": Stat("resident", number("%.0f MiB")),
    "spec_recall_pct": Stat("spec recall", number("%.0f%%")),
    "spec_useful_pct": Stat("spec useful", number("%.0f%%")),
    "spec_read_mib_per_token": Stat("spec read/token", _positive("%.0f MiB")),
    "spec_auto_off": Stat("auto-off", yes_no),
    # energy over the decode phase (stats/energy.py; docs/energy.md)
    "energy_j": Stat("energy J", number("%.1f"), "energy over the decode phase (J)"),
    "power_w": Stat("power W", number("%.2f"), "average power over the decode phase (W)"),
    "j_per_token": Stat("J/token", number("%.3f"), "energy per token (J)"),
    "tokens_per_j": Stat("tok/J", number("%.2f"), "tokens per joule"),
    "net_j_per_token": Stat("net J/token", number("%.3f"),
                            "energy per token above the idle power (J)"),
}


def token_count(value: Any) -> str:
    """A run's generated tokens (RunFigures.tokens: its token rows, else the engine's count)."""
    return DASH if is_missing(value) else "%d" % value


def tokens_after_trim(tokens: Any, n: Any, trim: int) -> str:
    """A run's generated tokens and, with a trim, the tokens its per-token figures are over:
    "1,356 (1,306 after trim 50)"; the count alone without a trim."""
    if is_missing(tokens):
        return DASH
    if not trim or is_missing(n):
        return f"{int(tokens):,}"
    return f"{int(tokens):,} ({int(n):,} after trim {trim})"


def energy_cell(value: Any, note: Any = None) -> str:
    """J/token, or why it was not measured ("not measured: charging"), never a 0."""
    if is_missing(value):
        return str(note) if isinstance(note, str) and note.startswith("not measured") else DASH
    return f"{value:.3f}"


def pair(a: Any, b: Any, f: Formatter, sep: str) -> str:
    """Two figures of one unit in one cell ("a + b"); a dash for the one not measured, one
    dash for none."""
    if is_missing(a) and is_missing(b):
        return DASH
    return f"{f(a)}{sep}{f(b)}"


def split(compute: Any, io: Any) -> str:
    """decode: compute + I/O (s/tok), as the published write-up prints it: "0.161 + 0.127"."""
    return pair(compute, io, _S_PER_TOKEN, " + ")


def temp_range(start: Any, top: Any) -> str:
    """CPU temperature at the start → its maximum, in one cell: "47.1 → 78.4 °C"."""
    text = pair(start, top, number("%.1f"), " → ")
    return text if text == DASH else text + " °C"


def fmt(key_or_pattern: str) -> Formatter:
    """The formatter of a statistic (a STATS key), or of a %-pattern."""
    return number(key_or_pattern) if "%" in key_or_pattern else STATS[key_or_pattern].fmt


def cell(key: str, value: Any) -> str:
    return STATS[key].fmt(value)


# ---- derived figures ---------------------------------------------------------------------

def signed(value: float | None, unit: str = "%") -> str:
    """A signed change to one decimal with a real minus (+24.3%, −26.8%, +1.2 pp); a change
    that rounds to zero is "0.0" with no sign: "−0.0%" would claim a direction."""
    if is_missing(value):
        return DASH
    text = f"{value:+.1f}"
    if float(text) == 0:
        text = "0.0"
    return text.replace("-", MINUS) + unit


def pct(value: float | None) -> str:
    """A signed percentage with a real minus: +24.3%, −26.8%, 0.0%."""
    return signed(value, "%")


def ratio(value: float | None) -> str:
    return DASH if is_missing(value) else "%.2f×" % value


def gib_from_kb(kb: Any) -> str:
    """A device's RAM (kB, as /proc/meminfo writes it) in GiB."""
    try:
        return "%.1f GiB" % (float(kb) / 1048576)
    except (TypeError, ValueError):
        return DASH


def file_size(size: Any) -> str:
    """A file's size in decimal GB, as model files are quoted, with the exact byte count."""
    return DASH if is_missing(size) or not size else "%.2f GB (%d bytes)" % (size / 1e9, size)


def when(t: dt.datetime | None) -> str:
    """Timestamps as stored (UTC): to the second, so two runs of one session are told apart."""
    return t.strftime("%Y-%m-%d %H:%M:%S") if t is not None else DASH


# ---- CSV and JSON --------------------------------------------------------------------------

def records(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Rows as JSON-ready dicts: numpy scalars as Python values, not measured as None."""
    return [{k: plain(v) for k, v in row.items()} for row in rows]
