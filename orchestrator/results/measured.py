"""What a run measured, as comparisons across sessions and builds key it (history, the
report's regressions section, `orch compare`): the config as stats/config_key.py defines it
(its name *and* its settings: flags and model file), labelled for readers where one name
covers several settings ("t1 (flags -t 4)"). The engine build is not part of it: it is what
history and `compare --builds` put side by side.

A model that was never hashed (an import, a device path orch did not read) is unknown, not
different (Settings.matches): it joins the variant there is, and is labelled apart ("model
unknown") only when the name has runs of several known model files. Flags are compared as
recorded (an import records none).
"""
from __future__ import annotations

from collections.abc import Callable, Iterable

from orchestrator.db.rows import RunRow
from orchestrator.stats.config_key import UNKNOWN, Settings


def settings_of(row: RunRow) -> Settings:
    """A run's settings beyond its name (stats/config_key.py Settings)."""
    return Settings.of(getattr(row, "flags", None), getattr(row, "model_sha256", None),
                       getattr(row, "session_requests", None))


def _variant_text(s: Settings, flags_differ: bool, models_differ: bool,
                  sessions_differ: bool = False) -> str:
    parts = []
    if flags_differ:
        parts.append(f"flags {s.flags}" if s.flags else "no flags")
    if models_differ:
        parts.append(f"model {s.model_sha256[:8]}" if s.model_sha256 else "model unknown")
    if sessions_differ:
        parts.append(f"session {s.session[:8]}" if s.session else "one-shot")
    return ", ".join(parts)


def config_labels(rows: Iterable[RunRow],
                  config: Callable[[RunRow], str] = lambda r: r.config) -> dict[int, str]:
    """Per run id, the config as comparisons key it: the name, plus the settings that set it
    apart when runs of one (model, name) were measured with different settings."""
    rows = list(rows)
    variants: dict[tuple[str, str], set[Settings]] = {}
    for r in rows:
        variants.setdefault((r.model or "-", config(r)), set()).add(settings_of(r))
    out: dict[int, str] = {}
    for r in rows:
        name = config(r)
        seen = variants[(r.model or "-", name)]
        flags = {s.flags for s in seen}
        models = {s.model_sha256 for s in seen if s.model_sha256 != UNKNOWN}
        flags_differ, models_differ = len(flags) > 1, len(models) > 1
        sessions_differ = len({s.session for s in seen}) > 1
        if not (flags_differ or models_differ or sessions_differ):
            out[r.id] = name
            continue
        text = _variant_text(settings_of(r), flags_differ, models_differ, sessions_differ)
        out[r.id] = f"{name} ({text})" if text else name
    return out
