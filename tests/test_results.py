"""The store -> statistics layer: the vectorised pressure equals the per-run definition."""
from __future__ import annotations

import numpy as np
import pandas as pd

from orchestrator.stats.statistics import pressure_by_run


def one_run_pressure(sub: pd.DataFrame) -> dict:
    """The definition, one run at a time: max VmHWM (VmRSS when no HWM was read), min
    MemAvailable, the first CPU temperature in time and the maxima; GiB and °C."""
    sub = sub.sort_values("t_ms", kind="stable")

    def pick(col: str, how: str, scale: float):
        values = sub[col].dropna()
        if values.empty:
            return None
        return float({"max": values.max(), "min": values.min(), "first": values.iloc[0]}[how]) / scale

    peak = pick("hwm_kb", "max", 1048576)
    return {"peak_rss_gib": peak if peak is not None else pick("rss_kb", "max", 1048576),
            "mem_floor_gib": pick("mem_avail_kb", "min", 1048576),
            "cpu_temp_start_c": pick("cpu_temp_mC", "first", 1000),
            "cpu_temp_max_c": pick("cpu_temp_mC", "max", 1000),
            "batt_temp_max_c": pick("batt_temp_dC", "max", 10)}


def test_pressure_by_run_matches_the_per_run_definition():
    rng = np.random.default_rng(1)
    rows = []
    for rid in range(1, 6):
        for t in range(20):
            rows.append(dict(
                run_id=rid, t_ms=(19 - t) * 100,  # out of order: "start" is the first in time
                hwm_kb=None if rid == 3 else int(rng.integers(1, 9e6)),
                rss_kb=int(rng.integers(1, 9e6)), mem_avail_kb=int(rng.integers(1, 9e6)),
                cpu_temp_mC=None if (rid == 2 and t > 16) else int(rng.integers(30000, 80000)),
                batt_temp_dC=None if rid == 4 else int(rng.integers(300, 400))))
    frame = pd.DataFrame(rows)
    fast = pressure_by_run(frame)
    for rid, sub in frame.groupby("run_id"):
        slow = one_run_pressure(sub)
        for key, value in slow.items():
            got = fast[rid][key]
            assert (value is None and got is None) or abs(value - got) < 1e-9, (rid, key)
    assert pressure_by_run(frame.iloc[0:0]) == {}
