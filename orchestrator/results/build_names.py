"""Which engine build a user's `--builds` word names: a build's label (a llama.cpp cache
version such as 0.3.30, or the engine's reported build), its engine_build string, a commit
prefix (history.build_matches), or, failing those, a unique prefix of one label (`0.3.3`
names 0.3.36 when that is the only 0.3.3x build; `e3a7` a commit). A word that names no
build, or several, is a ConfigError (exit 2) listing the known builds."""
from __future__ import annotations

from orchestrator.db.runs import Runs
from orchestrator.db.store import Store
from orchestrator.errors import ConfigError
from orchestrator.results.history import names_build
from orchestrator.stats.config_key import build_label


def resolve_build(store: Store, build: str, device: str | None = None,
                  matrix: str | None = None) -> str:
    """The one build label `build` names (module doc), from one read of the known builds."""
    known = Runs(store).builds(matrix, device)          # newest first
    labels = list(dict.fromkeys(label for r in known
                                if (label := build_label(r.binary_path, r.engine_build))))
    if build in labels:
        return build
    found = list(dict.fromkeys(build_label(r.binary_path, r.engine_build) or build
                               for r in known if names_build(r.binary_path, r.engine_build,
                                                             build)))
    if not found:
        word = build.lower()
        found = [label for label in labels
                 if label.lower().startswith(word) or label.split(" ")[0].lower() == word]
    if len(found) == 1:
        return found[0]
    where = "".join(x for x in (matrix and f" of matrix {matrix!r}",
                                device and f" on {device}") if x)
    if not found:
        listing = ", ".join(labels[:20]) + (", ..." if len(labels) > 20 else "")
        raise ConfigError(f"--builds {build}: no build of that name or prefix{where} "
                          f"(known builds, newest first: {listing or 'none'})")
    raise ConfigError(f"--builds {build}: names several builds{where}: {', '.join(found)} "
                      f"(give more of it)")
