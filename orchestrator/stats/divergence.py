"""Where two runs' generated texts part.

With greedy decoding a config that changes the computation in a way that matters (top-k
experts, a different quantisation, a kernel with another summation order) changes the text from
some token on, while configs that only change the speed (threads, mmap) give the same text.
`divergence` says from where.

Unit: characters by default, i.e. Python string positions (Unicode code points) of the text
as stored in `run.text`. Characters, not the engine's tokens, because the stored text carries
no token boundaries, different engines and models tokenize differently, and a character index
points at the same place for every engine. `unit="word"` counts whitespace-separated words
instead (the index of the first word that differs), which reads better for real models' prose.
"""
from __future__ import annotations

from itertools import zip_longest
from typing import Literal, Sequence

Unit = Literal["char", "word"]
_MISSING = object()


def divergence(text_a: str, text_b: str, unit: Unit = "char") -> int | None:
    """Index of the first character (or word) where the texts differ; None when identical.

    When one text is a prefix of the other (a run stopped early), the index is the shorter
    text's length: the first position the other one has and this one lacks.
    """
    if not isinstance(text_a, str) or not isinstance(text_b, str):
        raise TypeError("divergence() compares two texts (str); a run without text has no "
                        "divergence")
    a: Sequence[str]
    b: Sequence[str]
    if unit == "char":
        a, b = text_a, text_b
    elif unit == "word":
        a, b = text_a.split(), text_b.split()
    else:
        raise ValueError(f"unit must be 'char' or 'word', not {unit!r}")
    if a == b:
        return None
    for i, (x, y) in enumerate(zip_longest(a, b, fillvalue=_MISSING)):
        if x != y:
            return i
    return None  # pragma: no cover - a != b guarantees a difference above

