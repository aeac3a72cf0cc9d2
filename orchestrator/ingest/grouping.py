"""Which imported runs are repeats of one config, and what each config is called.

A config is what was measured the same way. Per model (runs of two models are never one
config), in this order:
1. a design file's `configs` (globs): its name; repeats in the order its `files` list them,
   then in time order;
2. runs whose names differ only by a trailing repeat index (`qw-a1`, `qw-a2`; `qwen-lru_a`,
   `qwen-lru_b`) and whose settings agree: config `qw-a`, repeats in index order. Runs
   whose files give no settings are grouped only when a separator sets the index off
   (`run_1`, `run_2`): `qwen_pf1` and `qwen_pf2` are two prefetch depths, not repeats;
3. runs whose names carry no meaning (a timestamp and at most an engine word,
   `bmoe-20260721-090406`) are named by the settings in which the model's runs differ
   (`dense_weights=anon`), and those named alike are repeats in time order;
4. every other run is its own config, named by its file.
Rules 2 and 3 never pool silently: runs are repeats only when they were measured alike, in one
sitting (`same_sitting`): requested tokens equal (when both known; else generated counts within
a factor of 2: 67 and 1,354 tokens are two measurements, not one), and recorded start times
(when both known) on the same day and within SITTING_HOURS of the repeat before. Runs that
fail it become separate configs, named so a reader sees why: `NAME-2026-07-20` (another day
than most), `NAME-67tok` (another length). A design's configs are never split: the A/B row then carries a
confound warning (results/drift.py confounds).
Pure: no store, no files.
"""
from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from orchestrator.ingest.naming import name_time, repeat_index, without_time
from orchestrator.stats.config_key import without_model_keys

# Words a timestamped file name may carry besides the stamp without meaning a config
MEANINGLESS = {"", "bmoe", "bmoe-cli", "run", "bench", "metrics", "result", "results", "out",
               "log", "llama", "llama-bench", "llama-cli", "csv", "trace"}


@dataclass
class Member:
    """One run to name: what grouping needs to know about it."""

    key: str                               # the planned run's unique name (path-derived)
    model: str
    settings: Mapping[str, Any] = field(default_factory=dict)   # {} = the files gave none
    when: dt.datetime | None = None        # a recorded start (not a file time)
    design: tuple[str, int] | None = None  # (config, position of its first matching pattern)
    requested: int | None = None           # tokens asked for (-n), when the files say
    generated: int | None = None           # tokens generated, when the files say


SITTING_HOURS = 4          # a repeat started within this many hours of the one before
LENGTH_FACTOR = 2.0        # generated counts this far apart are two lengths, not one


@dataclass(frozen=True)
class Named:
    config: str
    repeat_index: int                      # 0-based, in measurement order


def name_configs(members: Sequence[Member]) -> dict[str, Named]:
    """Member key -> its config and repeat index (see the module doc)."""
    out: dict[str, Named] = {}
    by_model: dict[str, list[Member]] = {}
    for m in members:
        by_model.setdefault(m.model, []).append(m)
    for group in by_model.values():
        out.update(_name_model(group))
    return out


def _name_model(members: list[Member]) -> dict[str, Named]:
    configs: dict[str, list[tuple[Any, Member]]] = {}   # config -> [(order key, member)]

    def put(config: str, order: Any, member: Member) -> None:
        configs.setdefault(config, []).append((order, member))

    rest = []
    for m in members:
        if m.design is not None:
            put(m.design[0], (m.design[1], _time_key(m)), m)
        else:
            rest.append(m)
    rest = _repeats(rest, put)
    varying = _varying_keys(members)
    for m in rest:
        folder, _, stem = m.key.rpartition("/")
        if name_time(stem) is not None and without_time(stem).lower() in MEANINGLESS:
            label = ",".join(f"{k}={m.settings[k]}" for k in varying if k in m.settings) \
                or without_time(stem) or "default"
            put(f"{folder}/{label}" if folder else label, (0, _time_key(m)), m)
        else:
            put(m.key, (0, _time_key(m)), m)
    out: dict[str, Named] = {}
    designed = {m.design[0] for m in members if m.design is not None}
    for config, pairs in configs.items():
        ordered = [m for _, m in sorted(pairs, key=lambda p: (p[0], p[1].key))]
        parts = [ordered] if config in designed else sittings(ordered)
        for name, part in zip(_split_names(config, parts), parts):
            for index, m in enumerate(part):
                out[m.key] = Named(name, index)
    return out


def same_sitting(a: Member, b: Member) -> bool:
    """Whether b repeats a (module doc): same requested tokens (else similar generated
    counts), and, when both start times are recorded, the same day within SITTING_HOURS."""
    if a.requested is not None and b.requested is not None:
        if a.requested != b.requested:
            return False
    elif a.generated and b.generated and \
            max(a.generated, b.generated) > LENGTH_FACTOR * min(a.generated, b.generated):
        return False
    if a.when is not None and b.when is not None:
        if a.when.date() != b.when.date():
            return False
        if abs((b.when - a.when).total_seconds()) > SITTING_HOURS * 3600:
            return False
    return True


def sittings(members: list[Member]) -> list[list[Member]]:
    """The members (in repeat order) cut into groups of repeats: each joins the first group
    whose last member it repeats (same_sitting), else starts a group."""
    groups: list[list[Member]] = []
    for m in members:
        home = next((g for g in groups if same_sitting(g[-1], m)), None)
        if home is None:
            groups.append([m])
        else:
            home.append(m)
    return groups


def _split_names(config: str, parts: list[list[Member]]) -> list[str]:
    """One name per group: the config's own when it is one group, else the config with what
    sets each group apart: its day when not the day most groups ran on, its token count."""
    if len(parts) < 2:
        return [config]
    days = [_day(p) for p in parts]
    lengths = [_length(p) for p in parts]
    known = [d for d in days if d is not None]
    usual = max(known, key=known.count) if known else None   # the day most groups ran on
    names = []
    for day, length in zip(days, lengths):
        bits = [day] if day is not None and day != usual else []
        if length is not None and len(set(lengths)) > 1:
            bits.append(f"{length}tok")
        names.append("-".join([config, *bits]))
    seen: dict[str, int] = {}
    unique = []
    for name in names:                 # two groups alike even so: numbered
        seen[name] = seen.get(name, 0) + 1
        unique.append(name if names.count(name) == 1 else f"{name}-{seen[name]}")
    return unique


def _day(group: list[Member]) -> str | None:
    return next((f"{m.when:%Y-%m-%d}" for m in group if m.when is not None), None)


def _length(group: list[Member]) -> int | None:
    return next((m.requested or m.generated for m in group
                 if (m.requested or m.generated)), None)


def _time_key(m: Member) -> tuple[int, dt.datetime]:
    return (0, m.when) if m.when is not None else (1, dt.datetime.min)


def _repeats(members: list[Member], put: Any) -> list[Member]:
    """Put the runs that are repeats by name (rule 2); return the others."""
    bases: dict[str, list[tuple[int, bool, Member]]] = {}
    for m in members:
        found = repeat_index(m.key)
        if found is not None:
            base, index, marked = found
            bases.setdefault(base, []).append((index, marked, m))
    names = {m.key for m in members}
    grouped: set[str] = set()
    for base, repeats in bases.items():
        if len(repeats) < 2 or base in names:      # one file, or `qw-a` itself is a run
            continue
        settings = [_comparable(m.settings) for _, _, m in repeats]
        same = all(settings) and all(s == settings[0] for s in settings)
        if not same and not (not any(settings) and all(marked for _, marked, _ in repeats)):
            continue
        if len({index for index, _, _ in repeats}) < len(repeats):
            continue                               # two files claim one index
        for index, _, m in repeats:
            put(base, (index, _time_key(m)), m)
            grouped.add(m.key)
    return [m for m in members if m.key not in grouped]


def _comparable(settings: Mapping[str, Any]) -> dict[str, Any]:
    return without_model_keys(settings)


def _varying_keys(members: Sequence[Member]) -> list[str]:
    """The settings that take more than one value among the model's runs, in preamble order."""
    values: dict[str, set[str]] = {}
    for m in members:
        for k, v in _comparable(m.settings).items():
            values.setdefault(k, set()).add(str(v))
    present = [set(_comparable(m.settings)) for m in members if m.settings]
    return [k for k, vs in values.items()
            if len(vs) > 1 or any(k not in p for p in present)]
