"""Notes a study writes beside its numbers: one model, shared by the matrix file (`notes:`)
and the import design file (config/design.py), rendered by report/format/design_notes.py."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Notes(BaseModel):
    """Markdown notes the report prints: the session's under its description, a model's
    above its tables, a config's under the tables that show it."""

    model_config = ConfigDict(extra="forbid")

    session: str | None = None
    models: dict[str, str] = Field(default_factory=dict)
    configs: dict[str, str] = Field(default_factory=dict)
