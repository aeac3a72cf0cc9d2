"""The matrix's `quality:` key, validated with pydantic (the probe file itself is read by
probes.py when the matrix is loaded, relative to the matrix file)."""
from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

GRADERS = ("gsm8k", "exact", "contains")   # and regex:<pattern>


class QualitySpec(BaseModel):
    """`quality: {prompts: FILE, grader: gsm8k, tokens: 400}`."""

    model_config = ConfigDict(extra="forbid")

    prompts: str                     # JSONL, a path relative to the matrix file
    grader: str = "gsm8k"            # gsm8k | exact | contains | regex:<pattern>
    tokens: int = Field(default=256, gt=0)

    @field_validator("prompts")
    @classmethod
    def _prompts(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("give the probe file's path (JSONL, relative to the matrix)")
        return value

    @field_validator("grader", mode="before")
    @classmethod
    def _grader(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        if value.startswith("regex:"):
            try:
                re.compile(value[len("regex:"):])
            except re.error as exc:
                raise ValueError(f"regex: not a valid regular expression ({exc})") from None
            if not value[len("regex:"):]:
                raise ValueError("regex: give a pattern after `regex:`")
            return value
        if value not in GRADERS:
            raise ValueError(f"{value!r}: use one of {', '.join(GRADERS)} or regex:<pattern>")
        return value
