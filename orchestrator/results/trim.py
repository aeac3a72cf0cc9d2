"""Which trim a view uses: `--trim N` when given, else what the sessions' matrix or import
design file asks for (`trim:`), else 0 (stats/trim.py)."""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from orchestrator.config.design import session_design
from orchestrator.config.stored_matrix import stored_matrix
from orchestrator.errors import ConfigError


def configured_trim(session: Any) -> int:
    """A session's own trim: its matrix's `trim:`, else its design file's, else 0."""
    matrix = stored_matrix(session.matrix_text)
    if matrix is not None and matrix.trim:
        return matrix.trim
    design = session_design(session)
    return design.trim if design is not None else 0


def resolve_trim(option: int | None, sessions: Iterable[Any]) -> int:
    """`option` when given; else the sessions' trim, which must agree (one trim per table:
    sessions that ask for different ones need --trim)."""
    if option is not None:
        if option < 0:
            raise ConfigError(f"--trim must be 0 or more, not {option}")
        return option
    asked = {s.id: configured_trim(s) for s in sessions if s is not None}
    values = set(asked.values())
    if len(values) > 1:
        which = ", ".join(f"session {sid}: {t}" for sid, t in asked.items())
        raise ConfigError(f"the sessions ask for different trims ({which}): pass --trim N")
    return values.pop() if values else 0
