"""Notes a study writes beside its numbers: one model, shared by the matrix file (`notes:`)
and the import design file (config/design.py), rendered by report/format/design_notes.py.

A config's note (and a design's `left_out:` entry) is keyed by the config's name, or by
`MODEL:CONFIG` to concern that model's config only (as a per-model baseline is): a config
name has no colon (config/matrix.py's name rule), so the first colon splits a scope off."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Notes(BaseModel):
    """Markdown notes the report prints: the session's under its description, a model's
    above its tables, a config's under the tables that show it."""

    model_config = ConfigDict(extra="forbid")

    session: str | None = None
    models: dict[str, str] = Field(default_factory=dict)
    configs: dict[str, str] = Field(default_factory=dict)   # CONFIG or MODEL:CONFIG -> note

    def config_note(self, config: str, model: str | None = None) -> str | None:
        """The note on `config` under `model`'s tables: its `MODEL:CONFIG` note, else the
        note on the config for every model."""
        scoped = self.configs.get(f"{model}:{config}") if model is not None else None
        return scoped if scoped is not None else self.configs.get(config)


def scoped(key: str) -> tuple[str | None, str]:
    """(model, config) of a `MODEL:CONFIG` key; (None, key) for an unscoped one."""
    model, colon, config = key.partition(":")
    return (model, config) if colon else (None, key)


def applies(key: str, model: str) -> bool:
    """Whether a CONFIG or MODEL:CONFIG key concerns `model`'s group."""
    scope, _ = scoped(key)
    return scope is None or scope == model


def key_problems(key: str, configs: list[str], models: list[str],
                 why: str | None = None) -> list[str]:
    """What is wrong with a CONFIG or MODEL:CONFIG key (its scope must be one of `models`,
    its config one of `configs`, when they are listed), and with `why` when one is given (a
    left-out config's reason must say something)."""
    model, config = scoped(key)
    out = []
    if not config.strip():
        out.append("name the config after MODEL:")
    elif model is not None and models and model not in models:
        out.append(f"{model!r} is not one of the models ({', '.join(models)})")
    elif configs and config not in configs:
        out.append(f"{config!r} is not one of the configs ({', '.join(configs[:8])}"
                   f"{', ...' if len(configs) > 8 else ''})")
    if why is not None and not why.strip():
        out.append("say why it was left out")
    return out
