"""Which engine build a user's `--builds` word names: a build's label (a llama.cpp cache
version such as 0.3.30, or the engine's reported build), its engine_build string, a commit
prefix (history.build_matches), or, failing those, a unique prefix of one label (`0.3.3`
names 0.3.36 when that is the only 0.3.3x build; `e3a7` a commit). A word that names no
build, or several, is a ConfigError (exit 2) listing the known builds."""
from __future__ import annotations

from orchestrator.db.runs import Runs
from orchestrator.db.store import Store
from orchestrator.errors import ConfigError
from orchestrator.results.history import build_label, build_matches


def known_builds(store: Store, device: str | None = None,
                 matrix: str | None = None) -> list[str]:
    """The labels of the builds with current runs (of `matrix`, on `device`), newest session
    first."""
    labels: dict[str, None] = {}
    for sid in Runs(store).session_ids(matrix=matrix, device=device):
        for r in Runs(store).current(sid):
            label = build_label(r)
            if label and (device is None or r.device == device):
                labels.setdefault(label, None)
    return list(labels)


def resolve_build(store: Store, build: str, device: str | None = None,
                  matrix: str | None = None) -> str:
    """The one build label `build` names (module doc)."""
    where = "".join(x for x in (matrix and f" of matrix {matrix!r}",
                                device and f" on {device}") if x)
    labels = known_builds(store, device, matrix)
    if build in labels:
        return build
    found = _matching(store, build, device, matrix)
    if not found:
        word = build.lower()
        found = [label for label in labels
                 if label.lower().startswith(word) or label.split(" ")[0].lower() == word]
    if len(found) == 1:
        return found[0]
    listing = ", ".join(labels[:20]) + (", ..." if len(labels) > 20 else "")
    if not found:
        raise ConfigError(f"--builds {build}: no build of that name or prefix{where} "
                          f"(known builds, newest first: {listing or 'none'})")
    raise ConfigError(f"--builds {build}: names several builds{where}: {', '.join(found)} "
                      f"(give more of it)")


def _matching(store: Store, build: str, device: str | None, matrix: str | None) -> list[str]:
    """The labels of the runs history.build_matches says `build` names (engine_build, commit
    prefix of 7 or more)."""
    found: dict[str, None] = {}
    for sid in Runs(store).session_ids(matrix=matrix, device=device):
        for r in Runs(store).current(sid):
            if (device is None or r.device == device) and build_matches(r, build):
                found.setdefault(build_label(r) or build, None)
    return list(found)
