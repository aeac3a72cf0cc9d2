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

import re
from itertools import zip_longest
from typing import Literal, Sequence

Unit = Literal["char", "word"]
_MISSING = object()


# an engine's own log line (llama.cpp's loader and scheduler, bmoe's status lines): a
# snake_case tag and a colon (`llama_model_loader: ...`, `sched_reserve: reserve took 3.52
# ms`), one of the short tags llama.cpp prints, or a progress line of dots
_LOG_LINE = re.compile(r"^~?(?:[a-z][a-z0-9]*(?:_[a-z0-9]+)+|load|bmoe|main|sampler|"
                       r"generate|system_info|build)\s*:|^\.{3,}\s*$")
# a log line glued onto the end of a text line (stderr written beside stdout)
_GLUED_LOG = re.compile(r"~?(?:llama|ggml|gguf|sched|graph|clip|common)_[a-z0-9_]*\s*:")


def generated_text(text: str | None) -> str | None:
    """The generated text of a run's stored text: without the engine's log lines that a
    captured stdout + stderr holds before it (a llama.cpp loader's `reserve took 3.52 ms`
    differs between two runs whose output is identical) and a log glued onto its last line.
    None when there is no text, or when text and log lines alternate (then the generated text
    cannot be told apart from them)."""
    if not text:
        return None
    lines = text.split("\n")
    logs = [i for i, line in enumerate(lines) if _LOG_LINE.search(line)]
    if _GLUED_LOG.search(lines[0]) and 0 not in logs:
        logs.insert(0, 0)           # the prompt's echo with the loader's first line glued on
    if not logs:
        return text
    # a sentence among the log lines (a loader's own continuation lines are indented or a
    # fragment, such as a control token's quote): text and logs alternate, not separable
    between = lines[logs[0]:logs[-1]][1:]
    if any(len(line.split()) >= 3 and not _LOG_LINE.search(line)
           and not line.startswith((" ", "\t")) for line in between):
        return None
    body = lines[logs[-1] + 1:]
    out: list[str] = []
    for k, line in enumerate(body):
        glued = _GLUED_LOG.search(line)
        if glued is not None:       # stderr glued to the end of the text: cut there
            out.append(line[:glued.start()])
            if any(rest.strip() and not _LOG_LINE.search(rest) for rest in body[k + 1:]):
                return None
            break
        out.append(line)
    return "\n".join(out).strip("\n") or None


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

