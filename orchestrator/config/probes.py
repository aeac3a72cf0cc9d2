"""Probe files: JSONL, one object a line, `{"id": ..., "prompt": "...", "expected": ...}`.

Read when the matrix is loaded, before any session row exists: a bad line is a ConfigError
`file:line: reason` (exit 2, nothing written). Blank lines are skipped; any other key is an
error, so a typo (`"answer"` for `"expected"`) cannot silently grade against nothing.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.config.local_files import NotRegular, read_regular
from orchestrator.config.grading import number
from orchestrator.config.quality import QualitySpec
from orchestrator.errors import ConfigError

KEYS = ("id", "prompt", "expected")

# a probes file is a few thousand prompts: far below a memory's worth
MAX_PROBES = 64 << 20


@dataclass(frozen=True)
class Probe:
    id: str
    prompt: str
    expected: str    # as text; numbers keep their spelling ("1,234" stays "1,234")


def _text(value: Any) -> str | None:
    """A JSON string or number as text (True/False are not numbers here)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float, str)):
        return str(value)
    return None


def _probe(obj: Any, grader: str) -> Probe:
    """One parsed line -> Probe; ValueError(reason) when it is not a probe (a wrong type too:
    the caller turns every reason into `file:line: reason`)."""
    if not isinstance(obj, dict):
        raise ValueError(f"expected an object {{\"id\", \"prompt\", \"expected\"}}, "  # noqa: TRY004
                         f"got {type(obj).__name__}")
    unknown = [k for k in obj if k not in KEYS]
    if unknown:
        raise ValueError(f"unknown key(s) {', '.join(map(repr, unknown))} (known: "
                         f"{', '.join(KEYS)})")
    missing = [k for k in KEYS if k not in obj]
    if missing:
        raise ValueError(f"missing {', '.join(map(repr, missing))}")
    pid = _text(obj["id"])
    if pid is None or not pid.strip():
        raise ValueError("id: expected a non-empty string or a number")
    if not isinstance(obj["prompt"], str) or not obj["prompt"].strip():
        raise ValueError("prompt: expected a non-empty string")
    if "\0" in obj["prompt"]:
        raise ValueError("prompt: cannot contain NUL (it is passed as an argument)")
    expected = _text(obj["expected"])
    if expected is None:
        raise ValueError("expected: expected a string or a number")
    if grader == "gsm8k" and number(expected) is None:
        raise ValueError(f"expected: {expected!r} is not a number (grader gsm8k)")
    return Probe(pid, obj["prompt"], expected)


def read_probes(path: Path, grader: str) -> list[Probe]:
    """Every probe of a file, in file order; ConfigError `path:line: reason` on the first bad
    line (a duplicate id, too, names the line that repeats it)."""
    try:
        # a FIFO or /dev/zero is refused at the open, never waited on or read without end
        text = read_regular(path, MAX_PROBES).decode("utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file (quality.prompts)") from None
    except NotRegular as exc:
        why = f"not a regular file ({exc.kind})" if exc.kind else \
            f"{exc.size} bytes, over the {MAX_PROBES >> 20} MiB a probes file may have"
        raise ConfigError(f"{path}: {why} (quality.prompts)") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text ({exc.reason})") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
    probes: list[Probe] = []
    first: dict[str, int] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path}:{lineno}: not JSON ({exc.msg} at column "
                              f"{exc.colno})") from None
        try:
            probe = _probe(obj, grader)
        except ValueError as exc:
            raise ConfigError(f"{path}:{lineno}: {exc}") from None
        if probe.id in first:
            raise ConfigError(f"{path}:{lineno}: id {probe.id!r} again (first on line "
                              f"{first[probe.id]})")
        first[probe.id] = lineno
        probes.append(probe)
    if not probes:
        raise ConfigError(f"{path}: no probes (one JSON object a line)")
    return probes


def probe_path(spec: QualitySpec, matrix_path: str | Path) -> Path:
    """The probe file: `quality.prompts` relative to the matrix file's directory."""
    return Path(matrix_path).parent / Path(spec.prompts).expanduser()


def load_probes(spec: QualitySpec, matrix_path: str | Path) -> list[Probe]:
    """The probes a matrix's `quality:` names (ConfigError file:line on a bad line)."""
    return read_probes(probe_path(spec, matrix_path), spec.grader)
