"""A session's matrix read back from the store: db/ keeps the YAML text the session ran, and
its readers (results/, config/design.py) parse it here, once per text. db/ knows no matrix.
"""
from __future__ import annotations

import copy
import functools
from typing import Any

import yaml
from pydantic import ValidationError

from orchestrator.config.matrix import Matrix


@functools.lru_cache(maxsize=32)
def stored_matrix(text: str | None) -> Matrix | None:
    """The Matrix of a session's stored YAML (db/ stores the text, the reader parses it: db/
    knows no matrix); None for imports and for text that no longer validates (a matrix stored
    by an older orch): its rows are then compared as an import's. Parsed once per text (a
    report reads each session's many times); the Matrix returned is shared: read it only."""
    if not text:
        return None
    try:
        data = yaml.safe_load(text)
        return Matrix.model_validate(data, context={"stored": True}) \
            if isinstance(data, dict) else None
    except (yaml.YAMLError, ValidationError):
        return None


@functools.lru_cache(maxsize=32)
def _stored_yaml(text: str) -> dict[str, Any]:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        return {}
    return data if isinstance(data, dict) else {}


def stored_matrix_data(text: str | None) -> dict[str, Any]:
    """A session's stored matrix as plain YAML data ({} for imports or bad text): for readers
    that need keys the Matrix model normalises away. A copy, the caller's to change."""
    return copy.deepcopy(_stored_yaml(text)) if text else {}
