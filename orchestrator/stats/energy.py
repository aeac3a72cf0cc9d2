"""Energy of one run from the agent's power samples: pure functions (docs/energy.md).

The agent writes what the device's files say, raw (docs/agent-protocol.md, agent 1.4.0):
`batt_ua`/`batt_uv` (current_now, voltage_now: µA and µV, or mA and mV on some devices, and
either sign for discharge), `batt_uw` (power_now, µW), `batt_charging`, `rapl<N>_uj` (RAPL
energy counters, µJ, wrapping at `max_energy_range_uj`) and `hwmon<N>_uw` (µW). Here they
become joules over the decode phase: a trapezoid over power readings, or counter deltas with
the wrap-around undone. Nothing here reads the store: run/runner.py summarises a run when it
ends (as run/validity.py does load and throttling) and keeps the summary in the run's record
(`RunRecord.energy`), and `orch calibrate` measures idle power with `idle_power_w`.

A figure that cannot be measured is None with the reason in `not_measured`, never 0.
"""
from __future__ import annotations

import itertools
import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import Any

# units by magnitude: a battery holds 2.5-25 V (in mV: below 100,000), and a device running
# an engine draws far more than 10 mA (in mA: |I| below 10,000)
MV_BELOW = 100_000
MA_BELOW = 10_000
# a gauge whose reading repeats this many samples in a row (median) updates slower than the
# sampling: the run is flagged
STALE_RUN = 3
CHARGING_ADVICE = ("a battery that charges cannot measure the device's draw (adb over USB "
                   "charges the phone): connect adb over Wi-Fi (`adb tcpip 5555`, then unplug), "
                   "or turn charging off with the device's charge-control switch where it has one")
ENERGY_FIELDS = ("energy_j", "power_w", "j_per_token", "tokens_per_j", "net_j_per_token")


def trapezoid(t_s: Sequence[float], watts: Sequence[float]) -> float:
    """The integral of power over time (J) by the trapezoid rule; 0 for fewer than 2 points."""
    return sum((t_s[i] - t_s[i - 1]) * (watts[i] + watts[i - 1]) / 2 for i in range(1, len(t_s)))


def counter_joules(values: Sequence[float], max_range_uj: int | None) -> tuple[float | None, int]:
    """Joules from consecutive readings of a RAPL counter (µJ), each wrap-around (a reading
    below the one before) undone with max_range_uj. Returns (J, wraps); J is None when a wrap
    came and the range is unknown (the step cannot be told)."""
    total, wraps = 0.0, 0
    for a, b in itertools.pairwise(values):
        if b >= a:
            total += b - a
        elif max_range_uj:
            total += b + max_range_uj - a
            wraps += 1
        else:
            return None, wraps + 1
    return total / 1e6, wraps


def battery_units(currents: Sequence[int], voltages: Sequence[int]) -> tuple[float, float, str, str]:
    """(A per unit of current, V per unit of voltage, current unit, voltage unit) from the
    magnitudes of a run's readings: mA/mV or µA/µV (docs/energy.md)."""
    v = statistics.median([abs(x) for x in voltages]) if voltages else 0
    i = statistics.median([abs(x) for x in currents]) if currents else 0
    v_scale, v_unit = (1e-3, "mV") if 0 < v < MV_BELOW else (1e-6, "uV")
    i_scale, i_unit = (1e-3, "mA") if 0 < i < MA_BELOW else (1e-6, "uA")
    return i_scale, v_scale, i_unit, v_unit


def _rapl_domains(facts: Mapping[str, Any], keys: set[str]) -> list[tuple[str, str, int | None]]:
    """(sample key, name, max range) of the RAPL domains that make up the device's draw: psys
    (the whole platform) where there is one; else every package and DRAM domain (core and
    uncore are parts of a package); else every top-level domain."""
    domains = []
    for key in sorted(keys):
        n = key[4:-3]
        name = str(facts.get(f"power.rapl.{n}.name") or f"rapl{n}")
        path = str(facts.get(f"power.rapl.{n}.domain") or "")
        mx = str(facts.get(f"power.rapl.{n}.max_uj") or "")
        domains.append((key, name, path, int(mx) if mx.isdigit() and int(mx) > 0 else None))
    # one domain per name: intel-rapl-mmio:0 is the same package-0 as intel-rapl:0 (another
    # interface to it), and would count it twice; the MSR one (intel-rapl:) is kept
    by_name: dict[str, tuple[str, str, str, int | None]] = {}
    for d in sorted(domains, key=lambda d: "mmio" in d[2]):
        by_name.setdefault(d[1], d)
    domains = [d for d in domains if by_name[d[1]] is d]
    psys = [d for d in domains if d[1] == "psys"]
    chosen = psys or [d for d in domains if d[1].startswith("package") or d[1] == "dram"]
    if not chosen:
        chosen = [d for d in domains if d[2].count(":") <= 1] or domains
    return [(key, name, mx) for key, name, _path, mx in chosen]


def source_of(samples: Sequence[Mapping[str, Any]]) -> str | None:
    """The power source the samples carry: rapl, battery, hwmon (in that order), or None."""
    keys = {k for s in samples for k in s}
    if any(k.startswith("rapl") and k.endswith("_uj") for k in keys):
        return "rapl"
    if "batt_uw" in keys or ("batt_ua" in keys and "batt_uv" in keys):
        return "battery"
    if any(k.startswith("hwmon") and k.endswith("_uw") for k in keys):
        return "hwmon"
    return None


def _stale(series: Sequence[Any]) -> float | None:
    """The median length of the runs of identical consecutive readings, when it reaches
    STALE_RUN (a gauge slower than the sampling), else None."""
    runs, n = [], 1
    for a, b in itertools.pairwise(series):
        if a == b:
            n += 1
        else:
            runs.append(n)
            n = 1
    runs.append(n)
    if len(series) < 2 * STALE_RUN:
        return None
    median = statistics.median(runs)
    return median if median >= STALE_RUN else None


def power_series(samples: Sequence[Mapping[str, Any]], source: str) -> tuple[list[float], list[float], dict[str, Any]]:
    """(t in s, W, notes) of a battery or hwmon source's readings (notes: units, sign)."""
    notes: dict[str, Any] = {}
    if source == "battery":
        use = [s for s in samples if s.get("batt_uw") is not None]
        if use and len(use) >= len([s for s in samples if s.get("batt_ua") is not None]):
            notes["units"] = "power_now uW"
            return ([s["t_ms"] / 1000 for s in use], [abs(s["batt_uw"]) / 1e6 for s in use], notes)
        use = [s for s in samples if s.get("batt_ua") is not None and s.get("batt_uv") is not None]
        i_scale, v_scale, i_unit, v_unit = battery_units([s["batt_ua"] for s in use],
                                                         [s["batt_uv"] for s in use])
        notes["units"] = f"current_now {i_unit}, voltage_now {v_unit}"
        signs = {(s["batt_ua"] > 0) - (s["batt_ua"] < 0) for s in use} - {0}
        if len(signs) == 1:
            notes["discharge_sign"] = "negative" if signs == {-1} else "positive"
        elif len(signs) == 2:
            notes["mixed_sign"] = True
        return ([s["t_ms"] / 1000 for s in use],
                [abs(s["batt_ua"]) * i_scale * s["batt_uv"] * v_scale for s in use], notes)
    keys = sorted({k for s in samples for k in s if k.startswith("hwmon") and k.endswith("_uw")})
    use = [s for s in samples if all(s.get(k) is not None for k in keys)]
    return ([s["t_ms"] / 1000 for s in use], [sum(s[k] for k in keys) / 1e6 for s in use], notes)


def window(samples: Sequence[Mapping[str, Any]], from_ms: int | None) -> list[Mapping[str, Any]]:
    """The samples of the decode phase: from the one taken just before the first token
    (from_ms) while the engine ran (the samples with the engine's `rss_kb`), plus the first
    sample after the engine's end, which closes the last interval."""
    ordered = sorted(samples, key=lambda s: s.get("t_ms", 0))
    out: list[Mapping[str, Any]] = []
    for s in ordered:
        if from_ms is not None and s.get("t_ms", 0) < from_ms:
            continue
        out.append(s)
        if s.get("rss_kb") is None and len(out) > 1:
            break   # the engine has ended: this reading closes the window
    return out


def summarise(samples: Sequence[Mapping[str, Any]], facts: Mapping[str, Any], tokens: int | None,
              from_ms: int | None = None, idle_w: float | None = None,
              interval_s: float | None = None) -> dict[str, Any] | None:
    """The run's energy (RunRecord.energy) from its samples (S keys, `extra` merged in), or
    None when they carry no power source. Keys: source, energy_j, power_w, seconds, tokens,
    j_per_token, tokens_per_j, idle_w, net_j_per_token, not_measured (why the figures are
    None), flags (what makes them less than they seem), and the source's units, sign and
    RAPL domains."""
    source = source_of(samples)
    if source is None:
        return None
    win = window(samples, from_ms)
    out: dict[str, Any] = {"source": source, "samples": len(win), "tokens": tokens or None,
                           "idle_w": idle_w, "flags": []}
    for f in ENERGY_FIELDS:
        out[f] = None
    if source == "battery" and any(s.get("batt_charging") == 1 for s in win):
        out["not_measured"] = f"charging: {CHARGING_ADVICE}"
        return out
    if len(win) < 2:
        out["not_measured"] = "fewer than two power readings during the decode phase"
        return out
    seconds = (win[-1]["t_ms"] - win[0]["t_ms"]) / 1000
    if source == "rapl":
        keys = {k for s in win for k in s if k.startswith("rapl") and k.endswith("_uj")}
        joules, domains = 0.0, {}
        for key, name, mx in _rapl_domains(facts, keys):
            values = [int(s[key]) for s in win if s.get(key) is not None]
            j, wraps = counter_joules(values, mx)
            if j is None:
                out["not_measured"] = (f"the RAPL counter {name} wrapped and its "
                                       f"max_energy_range_uj is unknown")
                return out
            domains[name] = round(j, 6)
            joules += j
            if wraps:
                out["flags"].append(f"RAPL {name} wrapped {wraps} time(s) (undone)")
        out["domains"] = domains
    else:
        t, w, notes = power_series(win, source)
        out.update(notes)
        if len(t) < 2:
            out["not_measured"] = "fewer than two power readings during the decode phase"
            return out
        if notes.pop("mixed_sign", False):
            out["flags"].append("the battery current changed sign during the run: it was "
                                "charged part of the time, so the draw is underestimated")
        joules = trapezoid(t, w)
        seconds = t[-1] - t[0]
        series_key = "batt_uw" if source == "battery" and \
            notes.get("units", "").startswith("power_now") \
            else ("batt_ua" if source == "battery" else None)
        series = [s.get(series_key) for s in win] if series_key else w
        stale = _stale(series)
        if stale is not None:
            every = f"~{stale * interval_s:.1f} s" if interval_s else f"{stale:g} samples"
            out["gauge_every_s"] = round(stale * interval_s, 2) if interval_s else None
            out["flags"].append(f"the power source updated every {every}, slower than the "
                                f"sampling: energy rests on {len(set(series))} distinct readings")
    if seconds <= 0:
        out["not_measured"] = "the decode phase has no length"
        return out
    out["seconds"] = round(seconds, 3)
    out["energy_j"] = joules
    out["power_w"] = joules / seconds
    if tokens:
        out["j_per_token"] = joules / tokens
        out["tokens_per_j"] = tokens / joules if joules > 0 else None
        if idle_w is not None:
            out["net_j_per_token"] = (joules - idle_w * seconds) / tokens
    return out


def energy_note(summary: Mapping[str, Any] | None) -> str | None:
    """A run's energy in a few words for the tables: "not measured: charging" (the reason's
    first words), "flagged: ..." for a figure to read with care, else None."""
    if not summary:
        return None
    reason = summary.get("not_measured")
    if reason:
        return f"not measured: {str(reason).split(':')[0]}"
    if summary.get("gauge_every_s"):
        return f"flagged: power source updates every {summary['gauge_every_s']:g} s"
    if summary.get("flags"):
        return f"flagged: {summary['flags'][0]}"
    return None


# imported runs (docs/energy.md, "Imported runs"): per-token columns, in what each names
_TOKEN_POWER_W = (("power_w", 1.0), ("power_mw", 1e-3), ("power_uw", 1e-6))
_TOKEN_AMPS = (("current_a", 1.0), ("current_ma", 1e-3), ("current_ua", 1e-6))
_TOKEN_VOLTS = (("voltage_v", 1.0), ("voltage_mv", 1e-3), ("voltage_uv", 1e-6))
_SIDECAR_J = (("energy_j", 1.0), ("energy_mj", 1e-3), ("energy_uj", 1e-6))
_SIDECAR_W = (("power_w", 1.0), ("power_mw", 1e-3), ("power_uw", 1e-6))


def _first(values: Mapping[str, Any], names: Sequence[tuple[str, float]]) -> float | None:
    for name, scale in names:
        value = values.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value) * scale
    return None


def token_power_w(extra: Mapping[str, Any]) -> float | None:
    """One token row's power (W) from an imported CSV's columns: power_w / power_mw /
    power_uw, else |current| × voltage (current_a/ma/ua, voltage_v/mv/uv); None without."""
    watts = _first(extra, _TOKEN_POWER_W)
    if watts is not None:
        return abs(watts)
    amps, volts = _first(extra, _TOKEN_AMPS), _first(extra, _TOKEN_VOLTS)
    return abs(amps) * volts if amps is not None and volts is not None else None


def _finish(out: dict[str, Any], joules: float, seconds: float | None,
            tokens: int | None) -> dict[str, Any]:
    out["energy_j"] = joules
    out["seconds"] = round(seconds, 3) if seconds else None
    out["power_w"] = joules / seconds if seconds else None
    if tokens:
        out["j_per_token"] = joules / tokens
        out["tokens_per_j"] = tokens / joules if joules > 0 else None
    return out


def _imported(source: str, tokens: int | None) -> dict[str, Any]:
    return {"source": source, "tokens": tokens or None, "idle_w": None, "flags": [],
            **dict.fromkeys(ENERGY_FIELDS)}


# the extra columns from_tokens reads: a row with none of them adds nothing but its wall time
TOKEN_ENERGY_COLUMNS = frozenset(name for name, _ in _TOKEN_POWER_W + _TOKEN_AMPS
                                 + _TOKEN_VOLTS) | {"energy_uj", "charging"}


class TokenEnergy:
    """from_tokens fed one row at a time, keeping no row: the import streams its tokens
    (ingest/write.py). Only rows with one of TOKEN_ENERGY_COLUMNS need be added (others
    contribute only to the row count and wall time, which result() is given); the sums are
    over the same values in the same order as from_tokens takes them, so the figures are the
    same."""

    def __init__(self) -> None:
        self.terms: list[float] = []     # (wall_ms or 0) / 1000 * power, per row with a power
        self.counter: list[Any] = []     # the numeric energy_uj values
        self.charging = False

    def add(self, wall: float | None, extra: Mapping[str, Any] | None) -> None:
        if not extra or TOKEN_ENERGY_COLUMNS.isdisjoint(extra):
            return
        power = token_power_w(extra)
        if power is not None:
            self.terms.append((wall or 0) / 1000 * power)
        count = extra.get("energy_uj")
        if isinstance(count, (int, float)):
            self.counter.append(count)
        if extra.get("charging") in (1, 1.0, True):
            self.charging = True

    def result(self, rows: int, seconds: Callable[[], float | None]) -> dict[str, Any] | None:
        """What from_tokens returns: `rows` the number of token rows, `seconds()` their summed
        wall time in seconds (None when 0), asked only when there is energy to divide."""
        has_power, has_counter = bool(self.terms), len(self.counter) >= 2
        if not has_power and not has_counter:
            return None
        out = _imported("imported csv", rows)
        if self.charging:
            out["not_measured"] = f"charging: {CHARGING_ADVICE}"
            return out
        wall_s = seconds()
        if has_power:
            joules = sum(self.terms)
        else:
            j, _wraps = counter_joules([float(c) for c in self.counter], None)
            if j is None:
                out["not_measured"] = ("the energy_uj column went down (a counter wrap of "
                                       "unknown range)")
                return out
            joules = j
        return _finish(out, joules, wall_s, rows)


def from_tokens(rows: Sequence[tuple[float | None, Mapping[str, Any]]]) -> dict[str, Any] | None:
    """An imported run's energy from its per-token rows ((wall_ms, extra columns) each):
    each token's power over its own wall time, or the difference of a cumulative
    `energy_uj` column; a `charging` column that is 1 on any row: not measured. None when
    the rows carry no power column. (TokenEnergy: the same, one row at a time.)"""
    acc = TokenEnergy()
    for wall, extra in rows:
        acc.add(wall, extra)
    return acc.result(len(rows), lambda: sum(w for w, _ in rows if w) / 1000 or None)


def from_sidecar(sidecar: Mapping[str, Any], seconds: float | None,
                 tokens: int | None) -> dict[str, Any] | None:
    """An imported run's energy from its `.metrics` sidecar: `energy_j` (or _mj, _uj) over
    the decode phase, else the average `power_w` (or _mw, _uw) times the decode time;
    `charging=1`: not measured. None when the sidecar has neither."""
    joules, watts = _first(sidecar, _SIDECAR_J), _first(sidecar, _SIDECAR_W)
    if joules is None and watts is None:
        return None
    out = _imported("imported .metrics", tokens)
    if sidecar.get("charging") in (1, True, "1", "yes", "true"):
        out["not_measured"] = f"charging: {CHARGING_ADVICE}"
        return out
    if joules is None:
        if not seconds:
            out["not_measured"] = "an average power without the decode time"
            return out
        assert watts is not None    # neither: returned None above
        joules = abs(watts) * seconds
    return _finish(out, abs(joules), seconds, tokens)


def idle_power_w(readings: Sequence[Mapping[str, Any]], facts: Mapping[str, Any]) -> tuple[float | None, str | None]:
    """Idle power (W) from a quiet period's readings (the agent's cooldown T lines: t_ms and
    power keys), or (None, why not)."""
    samples = [dict(r) for r in readings]
    source = source_of(samples)
    if source is None:
        return None, "no power source"
    if source == "battery" and any(s.get("batt_charging") == 1 for s in samples):
        return None, f"not measured: charging ({CHARGING_ADVICE})"
    # the cooldown T lines carry no rss_kb: the whole period is the window
    summary = summarise([{**s, "rss_kb": 1} for s in samples], facts, None)
    if not summary or summary.get("power_w") is None:
        return None, "fewer than two power readings"
    return summary["power_w"], None
