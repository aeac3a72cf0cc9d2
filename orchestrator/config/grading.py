"""Graders: a reply and the expected answer -> (the answer read from the reply, correct).

- `gsm8k`: the number after the last `####`, else the last number anywhere in the reply;
  thousands commas, a leading `$` and a trailing period are ignored; compared numerically
  (Decimal, so 18, 18.0 and 18.00 are one answer and no float rounding can pass a wrong one).
- `exact`: the reply, stripped of surrounding whitespace, equals the expected text.
- `contains`: the expected text occurs in the reply.
- `regex:<pattern>`: the last match's first group (the whole match when the pattern has no
  group) is the answer; equal to the expected one as numbers when both are, else as text.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

_NUMBER = re.compile(r"[-−]?\$?\d[\d,]*(?:\.\d+)?|[-−]?\$?\.\d+")


@dataclass(frozen=True)
class Graded:
    answer: str | None        # None: the reply held nothing the grader could read
    correct: bool


def number(text: str) -> Decimal | None:
    """A number as written in a reply or a probe file ("1,234.", "$5", "-3.50"), else None."""
    cleaned = text.strip().replace(",", "").replace("$", "").replace("−", "-").rstrip(".")
    if not cleaned:
        return None
    try:
        value = Decimal(cleaned)
    except InvalidOperation:
        return None
    return value if value.is_finite() else None


def _plain(value: Decimal) -> str:
    """18.00 -> "18", 2.50 -> "2.5": one spelling per number, so configs' answers compare."""
    text = format(value.normalize(), "f")
    return "0" if text in ("-0", "0") else text


def last_number(text: str) -> Decimal | None:
    found = _NUMBER.findall(text)
    for raw in reversed(found):   # the last one that reads as a number
        value = number(raw)
        if value is not None:
            return value
    return None


def gsm8k_answer(reply: str) -> Decimal | None:
    """The number after the last `####`, else the last number in the reply."""
    if "####" in reply:
        tail = reply.rsplit("####", 1)[1]
        match = _NUMBER.search(tail)
        value = number(match.group(0)) if match else None
        if value is not None:
            return value
    return last_number(reply)


def grade(grader: str, reply: str | None, expected: str) -> Graded:
    """Grade one reply; a missing reply (the engine printed nothing) is answered None, wrong."""
    reply = reply or ""
    if grader == "gsm8k":
        got, want = gsm8k_answer(reply), number(expected)
        if got is None:
            return Graded(None, False)
        return Graded(_plain(got), want is not None and got == want)
    if grader == "exact":
        answer = reply.strip()
        return Graded(answer or None, answer == expected.strip())
    if grader == "contains":
        if expected in reply:
            return Graded(expected, True)
        first = reply.strip().splitlines()[0][:80] if reply.strip() else None
        return Graded(first, False)
    if grader.startswith("regex:"):
        matches = list(re.finditer(grader[len("regex:"):], reply))
        if not matches:
            return Graded(None, False)
        last = matches[-1]
        answer = last.group(1) if last.re.groups else last.group(0)
        if answer is None:
            return Graded(None, False)
        got, want = number(answer), number(expected)
        if got is not None and want is not None:
            return Graded(_plain(got), got == want)
        return Graded(answer.strip(), answer.strip() == expected.strip())
    raise ValueError(f"unknown grader {grader!r}")
