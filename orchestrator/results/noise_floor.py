"""The noise floor of an A/B row that cannot be tested (a single run on a side): the largest
spread between repeats of one config of its model and device (in the session, else in the
newest earlier session that has repeats), which its change must beat to mean anything."""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from orchestrator.db.runs import Runs
from orchestrator.stats.status import Status
from orchestrator.stats.values import is_missing


def noise_floor(repeats: Mapping[str, Sequence[float | None]]) -> tuple[float, str] | None:
    """(largest spread in %, its config) over configs measured two or more times: the largest
    |change| between two repeats of one config (max/min − 1). A single-run change smaller
    than this is within what repeating one config already moves."""
    best: tuple[float, str] | None = None
    for config, values in repeats.items():
        xs = [float(v) for v in values if not is_missing(v) and float(v) > 0]
        if len(xs) < 2:
            continue
        spread = (max(xs) / min(xs) - 1) * 100
        if best is None or spread > best[0]:
            best = (spread, config)
    return best


# (model, device, session id) -> earlier repeats: {config as named for the reader: means}
EarlierRepeats = Callable[[str, str, int], Mapping[str, Sequence[float | None]]]


def store_repeats(store: Any) -> EarlierRepeats:
    """Earlier repeats from the store: the newest session before this one, on the device,
    whose runs of the model repeat a config (the device's most recent measure of noise)."""

    def earlier(model: str, device: str, session_id: int) -> dict[str, list[float | None]]:
        runs = Runs(store)
        for sid in runs.session_ids(device=device, before=session_id):
            ok = [r for r in Runs(store).current(sid)
                  if r.model == model and r.device == device and r.status == Status.OK]
            counts: dict[str, int] = {}
            for r in ok:
                counts[r.config] = counts.get(r.config, 0) + 1
            ok = [r for r in ok if counts[r.config] >= 2]
            if not ok:
                continue
            figures = runs.figures(ok)
            out: dict[str, list[float | None]] = {}
            for r in ok:
                out.setdefault(f"{r.config}, session {sid}", []).append(figures[r.id].mean)
            return out
        return {}
    return earlier
