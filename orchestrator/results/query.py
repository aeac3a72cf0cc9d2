"""What the views share about a set of stored runs: grouping by (model, device) and the sides
of `orch compare` (row labels, with their dagger, are the views': report/format/labels.py). Runs, sessions and per-run statistics are read through the
read model (db/runs.py)."""
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from orchestrator.db.rows import RunRow, SessionRow
from orchestrator.db.runs import Runs, Sessions
from orchestrator.db.store import Store
from orchestrator.errors import ConfigError

T = TypeVar("T")


def by_model_and_device(items: Iterable[T], row: Callable[[T], Any] = lambda x: x,
                        ) -> list[tuple[tuple[str, str], list[T]]]:
    """Items grouped by their run row's (model, device), in first-seen order: `orch table`
    and the report show one set of tables per group. A run without a model counts as "-"."""
    groups: dict[tuple[str, str], list[T]] = {}
    for item in items:
        r = row(item)
        groups.setdefault((r.model or "-", r.device), []).append(item)
    return list(groups.items())


# ---- sides of a comparison ---------------------------------------------------------------

@dataclass(frozen=True)
class Side:
    """One side of `orch compare`: the current runs of one session on one device."""

    label: str                    # the device name (-d) or "NAME (session N)" (--session)
    device: str
    session: SessionRow
    rows: list[RunRow]            # its current runs on `device`, in run order


def select_sides(store: Store, sessions: Sequence[str] = (), devices: Sequence[str] = (),
                 matrix: str | None = None) -> list[Side]:
    """The sides to compare, reference first: every `--session` (id or name) in the order
    given, then every `--device`'s newest session of `matrix` (or its newest session of any
    matrix, imports included, without one). Every failure is a one-line ConfigError."""
    if matrix is not None and not devices:
        raise ConfigError("--matrix picks each --device's session: give --device too")
    sides = [session_side(store, s) for s in sessions]
    sides += [device_side(store, d, matrix) for d in devices]
    if len(sides) < 2:
        raise ConfigError("compare needs two or more sides: give --device or --session "
                          "at least twice in all")
    seen: dict[tuple[int, str], str] = {}
    for side in sides:
        key = (side.session.id, side.device)
        if key in seen:
            raise ConfigError(f"{seen[key]} and {side.label} are the same runs (session "
                              f"{side.session.id} on {side.device})")
        seen[key] = side.label
    return sides


def session_side(store: Store, session: str) -> Side:
    """`--session S`: its runs; a session that ran on several devices is refused, since its
    configs would mix devices."""
    sid = Sessions(store).resolve(session, None)
    rows = Runs(store).current(sid)
    if not rows:
        raise ConfigError(f"session {sid} has no runs")
    devices = list(dict.fromkeys(r.device for r in rows))
    if len(devices) > 1:
        raise ConfigError(f"session {sid} ran on {', '.join(devices)}: compare them with "
                          f"--device instead")
    row = Sessions(store).one(sid)
    return Side(session_label(row), devices[0], row, list(rows))


def session_label(session: SessionRow) -> str:
    """A session as a side's header names it: its name with its id ("pinned (session 3)"),
    since ids alone say nothing and names may repeat; "session 3" without a name."""
    return f"{session.name} (session {session.id})" if session.name else f"session {session.id}"


def device_side(store: Store, device: str, matrix: str | None) -> Side:
    """`--device D`: D's runs in its newest session of `matrix`, or in its newest session."""
    runs = Runs(store)
    sids = runs.session_ids(matrix=matrix, device=device)
    if not sids:
        if matrix is None or not runs.session_ids(device=device):
            raise ConfigError(f"device {device} has no runs in {store.url}")
        raise ConfigError(f"device {device} never ran a matrix named {matrix!r}")
    sid = sids[0]
    rows = [r for r in Runs(store).current(sid) if r.device == device]
    return Side(device, device, Sessions(store).one(sid), rows)
