"""What else differs between two matched configs of `orch compare`: the settings and token
counts behind a ratio, so that a ratio of two configs measured differently is not read as
the sides' (device's, session's, build's) doing.

A config matched by name is matched by its flags too (results/measured.py), but an import's
resolved settings (the CSV preamble's `cache_mb=`, `overlap=`, ...) can differ under equal
names and flags, and `--match A=B` pairs configs of any settings at all. Per side, a config's
settings are those of its ok runs: an import's resolved settings, else its flags parsed as
`--key value` (`--cache-mb 4000` is `cache_mb=4000`, a bare `--overlap` is `overlap=1`, as
an import writes them), without the keys that only say which model file ran (config_key
MODEL_KEYS): the model, the engine and the build are compared as such. A key one side sets
and the other does not is a difference ("not set"): the default it fell back to is unknown;
except between an import's resolved settings (every key) and a live run's flags (only those
typed), or where a side's settings are unknown (an import whose files gave none), where only
the keys both give are compared.

Token counts are the runs' decoded tokens; they differ when the sides' means per run are more
than TOKENS_TOLERANCE apart (an early end-of-sequence is the same workload; 256 against 1,350
tokens is not: warm-up weighs five times more in the shorter one).
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.db.rows import RunRow
from orchestrator.stats.config_key import MODEL_KEYS
from orchestrator.stats.figures import RunFigures
from orchestrator.stats.values import is_missing

TOKENS_TOLERANCE = 0.10
NOT_SET = "not set"
TOKENS = "tokens"


@dataclass(frozen=True)
class Difference:
    """One setting (or `tokens`, `model`, `engine`, `build`) that two matched configs do not
    share: its value on the reference side and on the other, as text."""

    key: str
    reference: str
    other: str


def flag_settings(flags: str | None) -> dict[str, str]:
    """A live run's flags as settings: `--cache-mb 4000 --overlap -t 4` is {cache_mb: 4000,
    overlap: 1, t: 4}. A word after a flag is its value unless it is itself a flag."""
    words = (flags or "").split()
    out: dict[str, str] = {}
    i = 0
    while i < len(words):
        word = words[i]
        if word.startswith("-") and not _number(word):
            name, eq, value = word.lstrip("-").partition("=")
            key = name.replace("-", "_")
            if eq:
                out[key] = value
            elif i + 1 < len(words) and not (words[i + 1].startswith("-")
                                             and not _number(words[i + 1])):
                out[key] = words[i + 1]
                i += 1
            else:
                out[key] = "1"
        i += 1
    return out


def _number(word: str) -> bool:
    try:
        float(word)
    except ValueError:
        return False
    return True


def _resolved(row: RunRow) -> dict[str, Any]:
    """An imported run's resolved settings ({} for a live run, or an import without any)."""
    return (row.settings or {}) if row.imported else {}


UNKNOWN = "unknown"


def _kind(runs: Sequence[RunRow]) -> str:
    """How a side's settings are known: "resolved" (an import's, every key), "flags" (a live
    run's, only those typed; none typed is the engine's defaults) or UNKNOWN (an import whose
    files gave none)."""
    if any(map(_resolved, runs)):
        return "resolved"
    return UNKNOWN if all(r.imported for r in runs) else "flags"


def run_settings(row: RunRow) -> dict[str, str]:
    """A run's settings as comparable text (see the module doc)."""
    values = _resolved(row) or flag_settings(row.flags)
    return {str(k): str(v) for k, v in values.items() if k not in MODEL_KEYS}


def _values(runs: Sequence[RunRow], value: Any) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for r in runs:
        for key, v in value(r).items():
            out.setdefault(key, set()).add(v)
    return out


def _text(values: set[str] | None) -> str:
    return " / ".join(sorted(values)) if values else NOT_SET


def _identity(row: RunRow) -> dict[str, str]:
    """What ran, beyond the settings: the model, the engine and its build, where known."""
    out = {"model": row.model, "engine": row.engine, "build": row.build}
    return {k: str(v) for k, v in out.items() if v and v != "-"}


def differences(reference: Sequence[RunRow], other: Sequence[RunRow],
                figures: Mapping[int, RunFigures]) -> list[Difference]:
    """What the two sides' runs of a matched config differ in: the model, engine or build
    (where both sides know it), each setting, then the tokens (see the module doc)."""
    if not reference or not other:
        return []
    out: list[Difference] = []
    a, b = _values(reference, _identity), _values(other, _identity)
    for key in a.keys() & b.keys():
        if a[key] != b[key]:
            out.append(Difference(key, _text(a[key]), _text(b[key])))
    out.sort(key=lambda d: ("model", "engine", "build").index(d.key))
    a, b = _values(reference, run_settings), _values(other, run_settings)
    keys = list(dict.fromkeys([*a, *b]))
    kinds = _kind(reference), _kind(other)
    if kinds[0] != kinds[1] or UNKNOWN in kinds:
        keys = [k for k in keys if k in a and k in b]     # no "not set" where it is unknown
    for key in keys:
        if a.get(key) != b.get(key):
            out.append(Difference(key, _text(a.get(key)), _text(b.get(key))))
    tokens = _tokens(reference, figures), _tokens(other, figures)
    if all(tokens) and _apart(tokens[0], tokens[1]):
        out.append(Difference(TOKENS, token_text(tokens[0]), token_text(tokens[1])))
    return out


def _tokens(runs: Iterable[RunRow], figures: Mapping[int, RunFigures]) -> list[int]:
    out = []
    for r in runs:
        f = figures.get(r.id)
        n = None if f is None else (f.tokens if not is_missing(f.tokens) else f.n)
        if n:
            out.append(int(n))
    return out


def _apart(a: Sequence[int], b: Sequence[int]) -> bool:
    ma, mb = sum(a) / len(a), sum(b) / len(b)
    return max(ma, mb) > min(ma, mb) * (1 + TOKENS_TOLERANCE)


def token_text(counts: Sequence[int]) -> str:
    """Tokens per run: "1,354", or their range "67–74" when the runs differ."""
    lo, hi = min(counts), max(counts)
    return f"{lo:,}" if lo == hi else f"{lo:,}–{hi:,}"
