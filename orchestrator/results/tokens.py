"""`orch tokens RUN`: chosen tokens of one stored run, as the engine recorded them."""
from __future__ import annotations

import pandas as pd

from orchestrator.db.runs import Runs
from orchestrator.db.store import Store
from orchestrator.errors import ConfigError, NotFound

DEFAULT_STEPS = "1-10,50,100,-1"
COLUMNS = ("step", "wall_ms", "compute_ms", "io_ms", "stall_ms", "cache_hit_pct", "read_mib")
MIB = 2 ** 20


def parse_steps(text: str) -> list[tuple[int, int]]:
    """`1-10,50,100,-1` as inclusive (first, last) ranges of 1-based token positions; -1 is
    the last token (as a range end too: `90--1`). A bad item raises ConfigError."""
    out = []
    for item in (text or "").split(","):
        item = item.strip()
        if not item:
            raise ConfigError(f"--steps {text!r}: an empty item (use e.g. {DEFAULT_STEPS})")
        head, dash, tail = item[1:].partition("-")     # item[0] may be a minus sign
        try:
            if dash:
                a, b = int(item[0] + head), int(tail)
            else:
                a = b = int(item)
        except ValueError:
            raise ConfigError(f"--steps: {item!r} is not a step, a range a-b or -1") from None
        for v in (a, b):
            if v == 0 or v < -1:
                raise ConfigError(f"--steps: {item!r}: steps count from 1 (-1 is the last)")
        if a != -1 and b != -1 and b < a:
            raise ConfigError(f"--steps: {item!r}: the range ends before it starts")
        out.append((a, b))
    return out


def chosen_positions(ranges: list[tuple[int, int]], n: int) -> list[int]:
    """The 0-based positions the ranges pick from a run of n tokens, in order, each once;
    positions past the run's end are left out."""
    picked: list[int] = []
    for a, b in ranges:
        a, b = (n if a == -1 else a), (n if b == -1 else b)
        picked += [i - 1 for i in range(a, min(b, n) + 1) if 1 <= i <= n]
    return list(dict.fromkeys(picked))


def run_tokens(store: Store, run_id: int, steps: str = DEFAULT_STEPS) -> pd.DataFrame:
    """The chosen tokens of run `run_id` (COLUMNS plus `token`, the 1-based position), in
    token order. An unknown run raises NotFound, bad steps ConfigError."""
    ranges = parse_steps(steps)
    if Runs(store).get(run_id) is None:
        raise NotFound(f"no run {run_id} in {store.url}")
    rows = store.frame("token", [run_id])           # in token order (seq)
    positions = chosen_positions(ranges, len(rows))
    picked = rows.iloc[positions]
    return pd.DataFrame({
        "token": [p + 1 for p in positions],
        **{c: picked[c].to_numpy() for c in COLUMNS[:-1]},
        "read_mib": picked["read_bytes"].to_numpy(dtype=float, na_value=float("nan")) / MIB,
    })
