"""The stored run record's format history, without pydantic (record.py's models import it).

`run.summary` holds `RunRecord.stored()` with its `schema_version`. record.py's `load_record`
reads every version into the typed model; what needs a stored record's parts without that
model (`orch show` in a fresh process: pydantic and the models cost ~100 ms of its start-up,
bench/startup) reads them here, so each version's layout is written once.

- version 2 (SCHEMA_VERSION): orch's facts in typed fields (`validity`, `route_trace`,
  `entry_state`);
- version 1: those facts inside `extra` (`extra.driver` and `extra.state` were the entry state);
- version 0: the adapters' old summary dicts (record.py `_from_v0`): no entry state.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

SCHEMA_VERSION = 2
KIB_PER_GIB = 1048576          # the published tables' "GB" is GiB: kB / 1024²


def v1_as_v2(stored: Mapping[str, Any]) -> dict[str, Any]:
    """A version-1 record's orch facts moved from `extra` to their own fields."""
    extra = dict(stored.get("extra") or {})
    out = {**stored, "extra": extra, "schema_version": SCHEMA_VERSION}
    out["validity"] = extra.pop("validity", None)
    out["route_trace"] = extra.pop("route_trace", None)
    driver, state = extra.pop("driver", None), extra.pop("state", None)
    if driver is not None or state is not None:
        out["entry_state"] = {"driver": driver, "state": state}
    return out


def entry_state(stored: Any) -> dict[str, Any] | None:
    """An imported run's recorded start state ({driver, state}) from a stored record of any
    version; None when it has none."""
    if not isinstance(stored, Mapping) or "schema_version" not in stored:
        return None
    if (stored.get("schema_version") or 0) < 2:
        stored = v1_as_v2(stored)
    value = stored.get("entry_state")
    if not isinstance(value, Mapping):
        return None
    return {"driver": value.get("driver") if isinstance(value.get("driver"), dict) else None,
            "state": value.get("state") if isinstance(value.get("state"), dict) else None}
