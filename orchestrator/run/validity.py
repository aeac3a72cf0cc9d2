"""Was the device the run's alone, at full speed? Load average and CPU frequency of one run.

The agent samples the 1-minute load average (`load1_x100`) and the fastest core's current
frequency (`cpu_khz`) with every S line (docs/agent-protocol.md). Two things make a run's
numbers mean less than they seem:

- **load**: the load average counts the engine's own threads too (an engine with 4 threads
  on 2 cores loads them to 4 by itself), so what counts is the load beyond the engine's thread
  count (`threads`, from /proc/PID/stat): when that is at least half the cores (and at least
  one), other tasks wanted the CPU while the engine ran. It is a lower bound on the others'
  load (idle engine threads are not in the load average), and the 1-minute average lags: a
  previous cell's load fades within about a minute.
- **throttling**: a median frequency of the fastest core well below the hardware maximum
  (`cpu.max_khz` of the device facts) while the engine ran means the CPU was held back.

Medians over the samples taken while the engine ran (those with the engine's `rss_kb`): the
1-minute average lags, and one sample at a DVFS low must not flag a run. The summary is
computed once, when the run ends, and kept in the run's record (`validity`), so a
report reads it without reading samples again and later thresholds still apply to it.
"""
from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd

THROTTLE_FRACTION = 0.75    # median frequency below 75% of the hardware max: throttled


@dataclass(frozen=True)
class RunValidity:
    samples: int                      # samples taken while the engine ran
    load1_median: float | None = None
    load1_max: float | None = None
    cpu_khz_median: int | None = None
    cpu_khz_min: int | None = None
    threads_median: float | None = None   # the engine's own threads
    cores: int | None = None          # from the device facts
    max_khz: int | None = None        # hardware max of the fastest core (cpu.max_khz)

    def stored(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None}

    @classmethod
    def from_stored(cls, data: Mapping[str, Any] | None) -> RunValidity | None:
        if not data:
            return None
        return cls(**{"samples": 0, **{k: data[k] for k in cls.__dataclass_fields__ if k in data}})

    @property
    def others_load(self) -> float | None:
        """Load average beyond the engine's own threads: other tasks wanting a CPU."""
        if self.load1_median is None:
            return None
        return max(0.0, self.load1_median - (self.threads_median or 0))

    @property
    def overloaded(self) -> bool:
        if not self.cores or self.load1_median is None:
            return False
        if self.threads_median is None:   # an agent before 1.2.1: no thread count
            return self.load1_median > self.cores
        return (self.others_load or 0.0) >= max(1.0, self.cores / 2)

    @property
    def throttled(self) -> bool:
        return bool(self.max_khz and self.cpu_khz_median is not None
                    and self.cpu_khz_median < THROTTLE_FRACTION * self.max_khz)


def _int_fact(facts: Mapping[str, Any], key: str) -> int | None:
    value = str(facts.get(key) or "")
    return int(value) if value.isdigit() and int(value) > 0 else None


def summarise(samples: Iterable[Mapping[str, Any]], facts: Mapping[str, Any]) -> RunValidity:
    """RunValidity of one run from its samples (dicts of S keys: the sample row's columns
    merged with its `extra`) and the device facts."""
    engine = [s for s in samples if s.get("rss_kb") is not None]
    loads = [s["load1_x100"] / 100.0 for s in engine if s.get("load1_x100") is not None]
    freqs = [int(s["cpu_khz"]) for s in engine if s.get("cpu_khz") is not None]
    threads = [int(s["threads"]) for s in engine if s.get("threads") is not None]
    return RunValidity(
        samples=len(engine),
        load1_median=round(statistics.median(loads), 2) if loads else None,
        load1_max=max(loads) if loads else None,
        cpu_khz_median=int(statistics.median(freqs)) if freqs else None,
        cpu_khz_min=min(freqs) if freqs else None,
        threads_median=statistics.median(threads) if threads else None,
        cores=_int_fact(facts, "cores"), max_khz=_int_fact(facts, "cpu.max_khz"))


def sample_dicts(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """The sample rows of `Store.frame("sample", ...)` as dicts, `extra` merged in."""
    out = []
    for row in frame.to_dict("records"):
        extra = row.pop("extra", None) or {}
        out.append({**{k: v for k, v in row.items() if not pd.isna(v)}, **extra})
    return out


def ghz(khz: float | None) -> str:
    return f"{khz / 1e6:.2f} GHz" if khz is not None else "unknown"


def run_messages(v: RunValidity) -> list[str]:
    """What the run's own warnings say (orch show); the report groups them (drift.py)."""
    out = []
    if v.overloaded:
        out.append(f"load average {v.load1_median:.2f} (median; max {v.load1_max:.2f}) on "
                   f"{v.cores} cores while the engine ran with {v.threads_median or 0:g} "
                   f"threads: about {v.others_load:.1f} other runnable tasks were using the CPU")
    if v.throttled:
        out.append(f"CPU frequency {ghz(v.cpu_khz_median)} (median of the fastest core) of "
                   f"{ghz(v.max_khz)} max while the engine ran: the CPU was throttled")
    return out
