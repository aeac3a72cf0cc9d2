"""The series the report's figures draw, taken from the token and sample frames (no drawing).

Rates are tok/s, the unit of the tables' headline: the per-token rate is 1000 / wall_ms and a
rate over several tokens is tokens / Σ wall time, the definition of the tables' mean, so a
rolling line levels off at the steady-state mean a reader finds in the table.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from orchestrator.stats import energy
from orchestrator.stats.statistics import rates
from orchestrator.stats.trim import drop_first

if TYPE_CHECKING:
    from orchestrator.results.report_data import Group, ReportData

KIB_PER_MIB = 1024.0

# token extra columns of the bmoe v1 CSV (docs/formats.md §1): the process's resident set and
# the system's MemAvailable at each token, in MiB
TOKEN_RSS, TOKEN_AVAIL = "rss_mib", "mem_available_mib"


def token_rates(tokens: pd.DataFrame, config_of: dict[int, str]) -> pd.DataFrame:
    """Per (config, seq): `n` token rows and `wall_ms` summed over the config's runs.
    Speculative groups put the cost on one row and 0 on the others; the 0 rows still count
    as tokens, so n / Σwall stays the engine's tok/s."""
    rows = tokens.loc[tokens["run_id"].isin(config_of.keys()), ["run_id", "seq", "wall_ms"]]
    if rows.empty:
        return pd.DataFrame(columns=["config", "seq", "n", "wall_ms"])
    rows = rows.assign(config=rows["run_id"].map(config_of),
                       wall_ms=pd.to_numeric(rows["wall_ms"], errors="coerce"))
    rows = rows[rows["wall_ms"].notna()]
    return (rows.groupby(["config", "seq"], sort=False)
            .agg(n=("wall_ms", "size"), wall_ms=("wall_ms", "sum")).reset_index())


def trajectory(steps: pd.DataFrame, warm: int, window: int) -> tuple[np.ndarray, np.ndarray, int]:
    """(token numbers, tok/s, how many leading points are single tokens) of one config:
    the first `warm` tokens unsmoothed (their rate over the repeats), then the rate over a
    trailing window of `window` tokens. A run too short for both is all single tokens."""
    s = steps.sort_values("seq")
    x = s["seq"].to_numpy() + 1
    n, wall = s["n"].to_numpy(float), s["wall_ms"].to_numpy(float)
    raw = rates(n, wall)
    if len(x) <= warm + window:
        return x, raw, len(x)
    rolled_n = pd.Series(n).rolling(window, min_periods=1).sum().to_numpy()
    rolled_wall = pd.Series(wall).rolling(window, min_periods=1).sum().to_numpy()
    rolled = rates(rolled_n, rolled_wall)
    head = int(np.searchsorted(x, warm, side="right"))
    return x, np.concatenate([raw[:head], rolled[head:]]), head


def per_token_tps(tokens: pd.DataFrame, run_ids: list[int], trim: int = 0) -> np.ndarray:
    """The per-token rate 1000 / wall_ms of these runs' tokens (rows with a wall time), each
    run's first `trim` tokens left out as the tables leave them out (stats/trim.py)."""
    mine = drop_first(tokens.loc[tokens["run_id"].isin(run_ids)], trim)
    wall = pd.to_numeric(mine["wall_ms"], errors="coerce")
    return rates(1.0, wall[wall > 0].to_numpy(float))


def config_names(data: ReportData, group: Group) -> dict[str, str]:
    """config -> the name a figure shows: its matrix's `labels:` entry (ConfigAgg.label), else
    its label in the design file of one of the group's sessions, else the config's key."""
    designs = [data.designs.get(sid) for sid in dict.fromkeys(r.row.session_id
                                                               for r in group.runs)]
    out = {}
    for agg in group.configs:
        label = agg.label if agg.label and agg.label != agg.config else None
        for design in designs:
            info = design.configs.get(agg.config) if design is not None else None
            if label is None and info is not None and info.label:
                label = info.label
        out[agg.config] = label or agg.config
    return out


def repeat_numbers(group: Group) -> dict[int, int]:
    """run id -> which ok run of its config it is (0, 1, ...: the config's run order), the
    repeat a figure gives its own marker; failed runs have none."""
    return {r.id: k for agg in group.configs for k, r in enumerate(agg.runs)}


@dataclass
class Series:
    """One run's samples of the quantities a device figure draws (NaN where not measured)."""

    run_id: int
    x: np.ndarray                 # seconds since the run started, or the token number
    values: dict[str, np.ndarray]  # panel key -> values in the panel's unit


# panel key -> (sample column, factor to the panel's base unit); memory in MiB, temperature in
# °C; the power panel ("power", W) comes from the samples' `extra` (_power)
SAMPLE_PANELS = {"rss": ("rss_kb", 1 / KIB_PER_MIB), "avail": ("mem_avail_kb", 1 / KIB_PER_MIB),
                 "cpu_temp": ("cpu_temp_mC", 1 / 1000), "batt_temp": ("batt_temp_dC", 1 / 10)}


def sample_series(samples: pd.DataFrame, run_ids: set[int]) -> list[Series]:
    """The agent's samples of these runs. RSS is the current resident set (rss_kb), or the
    high-water mark where the agent had only that."""
    s = samples[samples["run_id"].isin(run_ids)]
    if s.empty or "t_ms" not in s:
        return []
    s = s.sort_values(["run_id", "t_ms"], kind="stable")
    cols = {}
    for key, (col, factor) in SAMPLE_PANELS.items():
        if col in s:
            cols[key] = pd.to_numeric(s[col], errors="coerce").to_numpy(float) * factor
    if "hwm_kb" in s:
        hwm = pd.to_numeric(s["hwm_kb"], errors="coerce").to_numpy(float) / KIB_PER_MIB
        cols["rss"] = np.where(np.isnan(cols["rss"]), hwm, cols["rss"]) if "rss" in cols else hwm
    t = pd.to_numeric(s["t_ms"], errors="coerce").to_numpy(float) / 1000.0
    if "extra" in s:
        power = _power(s["run_id"].to_numpy(), t, s["extra"].to_list())
        if np.isfinite(power).any():
            cols["power"] = power
    return _split(s["run_id"].to_numpy(), t, cols)


def _power(run_ids: np.ndarray, t: np.ndarray, extras: list[object]) -> np.ndarray:
    """Power in W at each sample from the agent's power keys (docs/energy.md): the battery's
    power_now, else |current| × voltage in the units the run's magnitudes say; hwmon's sum;
    RAPL as the first domain's (the package's) counter difference over the interval before
    the sample (a wrap-around leaves that interval out). NaN where not measured; a sample
    taken while charging is NaN too (it measures no draw)."""
    out = np.full(len(t), np.nan)
    ex = [e if isinstance(e, dict) else {} for e in extras]
    for rid in np.unique(run_ids):
        idx = np.flatnonzero(run_ids == rid)
        rows = [ex[i] for i in idx]
        src = energy.source_of(rows)
        if src == "rapl":
            for j in range(1, len(idx)):
                a, b = rows[j - 1].get("rapl0_uj"), rows[j].get("rapl0_uj")
                dt = t[idx[j]] - t[idx[j - 1]]
                if isinstance(a, int) and isinstance(b, int) and b >= a and dt > 0:
                    out[idx[j]] = (b - a) / 1e6 / dt
        elif src is not None:
            samples = [{"t_ms": int(t[i] * 1000), **ex[i]} for i in idx]
            keep = [k for k, r in zip(idx, samples) if r.get("batt_charging") != 1]
            _ts, watts, _notes = energy.power_series(
                [r for r in samples if r.get("batt_charging") != 1], src)
            if len(watts) == len(keep):
                out[keep] = watts
    return out


def token_memory_series(tokens: pd.DataFrame, run_ids: set[int]) -> list[Series]:
    """Per-token RSS and free RAM from the token rows' `extra` (imported bmoe v1 CSVs)."""
    if "extra" not in tokens:
        return []
    t = tokens[tokens["run_id"].isin(run_ids) & tokens["extra"].notna()]
    if t.empty:
        return []
    t = t.sort_values(["run_id", "seq"], kind="stable")
    extras = t["extra"].to_list()
    cols = {key: np.array([_number(e, name) for e in extras], dtype=float)
            for key, name in (("rss", TOKEN_RSS), ("avail", TOKEN_AVAIL))}
    return _split(t["run_id"].to_numpy(), t["seq"].to_numpy(float) + 1, cols)


def _number(extra: object, key: str) -> float:
    value = extra.get(key) if isinstance(extra, dict) else None
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) \
        else np.nan


def _split(run_ids: np.ndarray, x: np.ndarray, cols: dict[str, np.ndarray]) -> list[Series]:
    cols = {k: v for k, v in cols.items() if np.isfinite(v).any()}
    if not cols:
        return []
    bounds = np.flatnonzero(run_ids[1:] != run_ids[:-1]) + 1
    return [Series(int(run_ids[a]), x[a:b], {k: v[a:b] for k, v in cols.items()})
            for a, b in zip(np.r_[0, bounds], np.r_[bounds, len(run_ids)])]


# ---- session runs (report/document/session_plots.py) ------------------------------------

# where a sample's swap figure may be: the agent's `swap_kb` key (in `extra`), an imported
# series' `VmSwap` (kB) or swap used
_EXTRA_ALIASES = {"swap_kb": ("swap_kb", "vmswap_kb", "VmSwap_kb", "swap_used_kb")}


def sample_column(samples: pd.DataFrame, column: str) -> np.ndarray | None:
    """A sample quantity in kB as floats (NaN where not measured): the store's column, else the
    same key in the samples' `extra`; None when neither has it."""
    if column in samples and samples[column].notna().any():
        return pd.to_numeric(samples[column], errors="coerce").to_numpy(float)
    if "extra" not in samples:
        return None
    keys = _EXTRA_ALIASES.get(column, (column,))
    values = np.array([_first(e, keys) for e in samples["extra"].to_list()], dtype=float)
    return values if np.isfinite(values).any() else None


def _first(extra: object, keys: tuple[str, ...]) -> float:
    if not isinstance(extra, dict):
        return float("nan")
    for key in keys:
        if key in extra:
            return _number(extra, key)
    return float("nan")


def turn_spans(turns: list, samples: pd.DataFrame) -> list[tuple[int, float, float]]:
    """(turn, start s, end s) of each turn from its recorded times (Turn.started_ms/ended_ms);
    without them, (turn, start, start) at the first sample taken in it (the samples' `turn`):
    a turn's samples run on through the idle gap after it, so where it ended is not known."""
    spans = [(t.turn, t.started_ms / 1000.0, t.ended_ms / 1000.0) for t in turns
             if t.started_ms is not None and t.ended_ms is not None]
    if spans or "turn" not in samples:
        return spans
    s = samples[pd.to_numeric(samples["turn"], errors="coerce") >= 1]
    firsts = s.groupby("turn")["t_ms"].min().sort_index() / 1000.0
    return [(int(turn), float(start), float(start)) for turn, start in firsts.items()]
