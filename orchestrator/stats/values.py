"""What every view agrees on about a single value: when it counts as not measured, how it
becomes a plain Python value for JSON, and the two marks the tables print."""
from __future__ import annotations

import math
import sys
from typing import Any

from typing_extensions import TypeIs   # typing's from Python 3.13

DAGGER = "†"   # a run that did not end ok: shown, and left out of every aggregate
DASH = "—"     # not measured (never 0, never an empty cell)


def is_missing(value: Any) -> TypeIs[None]:
    """None, a float or numpy NaN, or pandas' NA/NaT. (For the type checker a value that is
    not missing is not None; that a missing one is None is loose: NaN is a float.)"""
    if value is None:
        return True
    try:
        return bool(value != value)  # NaN, NA and NaT are the values unequal to themselves
    except (TypeError, ValueError):  # pd.NA raises on bool(); arrays are not single values
        # pandas is not imported for this: a value can only be pd.NA once pandas is loaded
        pd = sys.modules.get("pandas")
        return pd is not None and value is pd.NA


def plain(value: Any) -> Any:
    """A numpy scalar as the Python value it holds; a missing value as None."""
    if hasattr(value, "item") and not isinstance(value, (list, dict, str, bytes)):
        try:
            value = value.item()
        except (ValueError, TypeError):
            pass
    if isinstance(value, float) and math.isnan(value):
        return None
    return None if is_missing(value) else value
