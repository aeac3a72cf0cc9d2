"""The store -> analysis layer: the vectorised pressure equals the per-run definition."""
from __future__ import annotations

import numpy as np
import pandas as pd

from orchestrator.results import statistics as analysis
from orchestrator.results.query import pressure_by_run


def test_pressure_by_run_matches_pressure_from_samples():
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
        slow = analysis.pressure_from_samples(sub)
        for key, value in slow.items():
            got = fast[rid][key]
            assert (value is None and got is None) or abs(value - got) < 1e-9, (rid, key)
    assert pressure_by_run(frame.iloc[0:0]) == {}
