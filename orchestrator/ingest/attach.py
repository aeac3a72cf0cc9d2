"""Which run a device series file belongs to, and its rows read onto that run.

A series (ingest/series.py: a `.mem`-style file or a sample CSV) is the samples of:
1. the run its design rule names (`files: {GLOB: {kind: samples, run: STEM}}`);
2. else the run of its folder whose name is its stem (`s1.mem` beside `s1.txt`'s session,
   `gemma_k6.samples.csv` beside `gemma_k6.csv`: the stem up to its first `.`), or of which
   its stem is a word-prefix (`cellA-mem` of run `cellA`);
3. else the only run of its folder (one session and one series recorded beside it);
4. else it is skipped, with why (how many runs its folder holds, none named as it is).
Its rows are stored as that run's samples (ingest/write.py), the file named in the run's
import provenance. A series whose file cannot be read is skipped with the reader's reason.
"""
from __future__ import annotations

import fnmatch
from collections.abc import Callable
from typing import TYPE_CHECKING

from orchestrator.ingest.encoding import read_decoded
from orchestrator.ingest.series import mem_series, sample_csv
from orchestrator.ingest.write import Planned

if TYPE_CHECKING:
    from orchestrator.ingest.scan import Series

Skip = Callable[[tuple[str, str]], None]


def attach_series(series: list[Series], plans: list[Planned], skip: Skip) -> None:
    """Each series' rows onto its run (module doc), or skipped with why."""
    for item in sorted(series, key=lambda s: (s.folder, s.path.name)):
        shown = f"{item.folder}/{item.path.name}" if item.folder else item.path.name
        owner, why = owner_of(item, plans)
        if owner is None:
            skip((shown, why))
            continue
        text, _, unreadable = read_decoded(item.path)
        if text is None:
            skip((shown, unreadable or "unreadable"))
            continue
        try:
            rule = item.rule
            rows = mem_series(text) if item.kind == "series" else sample_csv(
                text, rule.columns if rule else None, rule.units if rule else None,
                rule.time if rule else None, rule.delimiter if rule else None)
        except (ValueError, KeyError) as exc:
            skip((shown, f"not a readable device series: {exc}"))
            continue
        if not rows:
            skip((shown, "device series without a reading"))
            continue
        owner.samples.extend(rows)
        owner.samples_from.append(shown)
        owner.contributed.append((shown, "device samples"))


def owner_of(item: Series, plans: list[Planned]) -> tuple[Planned | None, str]:
    """(the run the series belongs to, "") or (None, why none)."""
    here = [p for p in plans if p.key.rpartition("/")[0] == item.folder
            or (p.csv_text is None and _folder_of(p) == item.folder)]
    if item.rule is not None and item.rule.run:
        named = [p for p in here if fnmatch.fnmatchcase(_stem(p), item.rule.run)]
        if len(named) == 1:
            return named[0], ""
        return None, (f"its design rule names run {item.rule.run!r}: "
                      f"{len(named)} runs of its folder match")
    stem = item.path.name.split(".")[0]
    named = [p for p in here if _stem(p) == stem]
    if not named:
        named = [p for p in here if stem.startswith(_stem(p)) and
                 stem[len(_stem(p)):][:1] in ("-", "_", ".")]
    if len(named) == 1:
        return named[0], ""
    if len(here) == 1:
        return here[0], ""
    return None, (f"device series of no run: its folder holds {len(here)} runs and none is "
                  f"named {stem!r} (name it after its run, or give a design `files:` rule "
                  f"with `run:`)")


def _stem(plan: Planned) -> str:
    """The run's own name: its key's last part (a session of a turn-record file: the file's)."""
    last = plan.key.rpartition("/")[2]
    return plan.source.stem if last.startswith("session-") else last


def _folder_of(plan: Planned) -> str:
    shown = plan.shown.split(" [", 1)[0]
    return shown.rpartition("/")[0]
