"""The design keys of A/B as designed (docs/import.md, "The design file"): `pairs:` (configs
measured back to back in every round, tested paired) and `exclude:` (runs left out of every
figure, each with its reason). Their checks live here so design.py stays one file's worth.
"""
from __future__ import annotations

from orchestrator.config.yamlfile import Problems


def _one_of(names: list[str]) -> str:
    shown = ", ".join(names[:8]) + (f", ... {len(names) - 8} more" if len(names) > 8 else "")
    return f"is not one of the configs ({shown})"


def pairs_problems(pairs: list[list[str]], configs: list[str]) -> Problems:
    """Each pair names configs of the design (when it lists any), none twice in one pair."""
    problems: Problems = []
    for i, pair in enumerate(pairs):
        for j, name in enumerate(pair):
            if configs and name not in configs:
                problems.append((("pairs", i, j), f"{name!r} {_one_of(configs)}"))
            elif name in pair[:j]:
                problems.append((("pairs", i, j), f"{name!r} is already in this pair"))
    return problems


def exclude_problems(exclude: dict[str, str]) -> Problems:
    """An exclusion names a file (a glob) and says why: a run left out without a reason
    would be a silent edit of the results."""
    problems: Problems = []
    for glob, why in exclude.items():
        if not glob.strip():
            problems.append((("exclude", glob), "an empty pattern matches no file"))
        elif not why.strip():
            problems.append((("exclude", glob), "give the reason the run is left out"))
    return problems
