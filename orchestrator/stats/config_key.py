"""`ConfigKey`: what a config *is*, and the one rule of which runs are comparable (llama-bench's
KEY_PROPERTIES in compare-llama-bench.py).

A config's name is what a person typed; what was measured is the name *and* its settings (the
engine flags, or an imported run's resolved settings) on a model file (its sha256). Two runs
are the same config, and so comparable, when model, name and settings agree: a config edited
under the same name, or run on another quantisation, is another config, and comparing the two
would call the edit a regression. The engine build is part of the key but not of the rule: it
is what history and `compare --builds` put side by side. The label is how a reader calls the
config (a matrix's or design file's `labels:`) and decides nothing.

A model that was never hashed (an import, a device path orch did not read) is unknown, not
different: it matches any model file (`Settings.matches`), and is told apart only where a name
has runs of several known files. Flags are compared with whitespace normalised.

Used by: the plan (config/plan.py: a cell's key), A/B and the report (results/ab.py),
`orch compare` and history (results/comparison.py, results/history.py: results/measured.py
labels the variants), the pivot (results/pivot.py) and the import's grouping
(ingest/grouping.py: MODEL_KEYS).
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

UNKNOWN = ""     # a model file that was never hashed
NO_MODEL = "-"   # an engine without a model (moe-probe), or an import that names none
# settings that say which model file ran or what it is, not how it was run: two models' runs
# differ in them by construction (an import's preamble keys, the engine's own name)
MODEL_KEYS = frozenset({"model", "model_path", "model_file", "gguf", "arch", "quant",
                        "n_layer", "n_expert", "n_expert_used", "n_embd", "n_head", "n_vocab",
                        "size_bytes", "engine", "llama_cpp_python"})

_CACHE_PATH = re.compile(r"/llama\.cpp/([^/]+)/bin/[^/]+$")


@dataclass(frozen=True, order=True)
class Settings:
    """What a run measured beyond its config's name: flags (whitespace normalised) and the
    model file's sha256 (UNKNOWN when never hashed)."""

    flags: str = ""
    model_sha256: str = UNKNOWN
    # a session run's requests (docs/sessions.md), as a digest: "" for a one-shot run. Two runs
    # of one name and flags with other turns (prompts, idle gaps, lengths) measured another
    # workload, so they are another config
    session: str = ""

    @classmethod
    def of(cls, flags: str | None, model_sha256: str | None,
           session: Any = None) -> Settings:
        return cls(" ".join(str(flags or "").split()), str(model_sha256 or ""),
                   session_digest(session))

    def matches(self, other: Settings) -> bool:
        """The comparability rule's part for settings: the same flags and session, and model
        files that are the same or of which one is unknown."""
        return self.flags == other.flags and self.session == other.session and (
            self.model_sha256 == other.model_sha256
            or UNKNOWN in (self.model_sha256, other.model_sha256))


def session_digest(requests: Any) -> str:
    """A short digest of a session run's stored requests (RunRecord.extra["session"]); "" for
    none (a one-shot run)."""
    if not requests:
        return ""
    import hashlib
    import json

    text = json.dumps(requests, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def build_label(binary_path: str | None, engine_build: str | None) -> str | None:
    """The engine build a run measured: the llama.cpp build cache's version when the binary
    came from it (…/llama.cpp/<version>/bin/…), else what the engine reported."""
    m = _CACHE_PATH.search(binary_path or "")
    return m.group(1) if m else (engine_build or None)


def base_name(config: str, build: str | None) -> str:
    """A config's name without its build: a `builds:` matrix names its cells `t1@0.3.30`, and
    across builds (history, `compare --builds`) they are one config `t1`."""
    suffix = f"@{build}"
    return config[:-len(suffix)] if build and config.endswith(suffix) else config


def without_model_keys(settings: Mapping[str, Any]) -> dict[str, Any]:
    """An imported run's settings without those that only say which model ran."""
    return {k: v for k, v in settings.items() if k not in MODEL_KEYS}


@dataclass(frozen=True)
class ConfigKey:
    """One config of one model, as measured (see the module doc)."""

    model: str                    # NO_MODEL without one
    name: str                     # the config's name, without a `builds:` suffix
    settings: Settings = field(default_factory=Settings)
    build: str | None = None      # the engine build (part of the key, not of the rule)
    label: str = field(default="", compare=False)    # how readers call it: decides nothing

    @classmethod
    def of(cls, model: str | None, config: str, flags: str | None = None,
           model_sha256: str | None = None, build: str | None = None,
           label: str = "", session: Any = None) -> ConfigKey:
        return cls(model or NO_MODEL, base_name(config, build),
                   Settings.of(flags, model_sha256, session), build,
                   label or base_name(config, build))

    def comparable(self, other: ConfigKey) -> bool:
        """THE rule: the same model, name and settings (builds may differ)."""
        return (self.model, self.name) == (other.model, other.name) \
            and self.settings.matches(other.settings)

    @property
    def measured(self) -> tuple[str, str, Settings]:
        """What groups runs into one config across sessions and builds: model, name and
        settings (a key of dicts; unknown model files are joined by results/measured.py)."""
        return (self.model, self.name, self.settings)

    def cell(self, repeat: int) -> str:
        """The key of one cell of a matrix (what `--resume` and the lab work on): the model,
        the config's name in the matrix (with its `@build`) and the repeat."""
        name = f"{self.name}@{self.build}" if self.build else self.name
        return f"{self.model}|{name}|{repeat}"
