"""Where a driver log's sections start, what each header says, and what its preamble says.

A section starts at a header line of one of these shapes (docs/import.md, "Summary logs"):
- a rule of `=` or `-` (three or more) with a name, closed by another rule or not:
  `==================== k2_io4_pf0 ====================`, `--- gpu24 ---`, `=== run 3`;
- `--- cell NAME - DESCRIPTION: FLAGS`: a rule, an optional kind word (`cell`, `run`, `config`,
  `case`), the cell's name, an optional ` - ` description, and after a colon the engine flags
  the cell ran with (`--- cell A - GPU: --gpu-require --gpu-expert-slots 24`);
- `$ COMMAND ...`: the command line a driver echoed before running it; its flags are the run's.
A `$` line that directly follows a rule header (no summary line between) is that section's
command, not a new section: drivers print both.

The section's name is the cell's name and, when the header describes it, the description,
joined by `-` and kept to the characters a config name may hold (`A - GPU` -> `A-GPU`): the
name alone (`A`) says nothing in a table, the description alone may repeat. A `$` section is
named by its `--csv` file's stem (so it lines up with that CSV), else by its flags
(`gpu-require_gpu-expert-slots-24`), else `run-N`. Two sections named alike get `_1`, `_2`
(repeats of one name, as ingest/grouping.py reads them).

What a header or a command says besides flags (`-m`, `-p`, `-n`) and what the file's
preamble says (the lines before the first header: `model: X`, `prompt: "..."`, `tokens: 24`,
`-n 24`, `date: ...`, `flags: ...` for every section) become the section's settings under
the names the importer reads: `model`, `prompt`, `n_predict`, `date`, ...
"""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from typing import Any

_RULE = re.compile(r"^\s*(?:={3,}|-{3,})\s*(?P<body>[A-Za-z0-9(\[].*?)\s*(?:={3,}|-{3,})?\s*$")
_COMMAND = re.compile(r"^\s*\$\s+(?P<cmd>\S.*)$")
_KIND_WORD = re.compile(r"^(?:cell|run|config|case|test)\s+", re.IGNORECASE)
_NOT_NAME = re.compile(r"[^A-Za-z0-9_.=,+-]+")
_NO_FLAGS = {"", "none", "(none)", "default", "defaults", "(defaults)", "-"}
# argv options that are not the run's flags but facts of its own: option -> setting
_VALUE_OPTIONS = {"-m": "model", "--model": "model", "-p": "prompt", "--prompt": "prompt",
                  "-n": "n_predict", "--n-predict": "n_predict", "--tokens": "n_predict",
                  "--csv": "csv", "-f": "prompt_file", "--prompt-file": "prompt_file"}
# preamble keys (lower case, `-`/` ` as `_`) -> the setting they give
_PREAMBLE_KEYS = {"model": "model", "model_path": "model", "gguf": "model",
                  "prompt": "prompt", "tokens": "n_predict", "n_predict": "n_predict",
                  "n": "n_predict", "max_tokens": "n_predict", "n_tokens": "n_predict",
                  "date": "date", "started": "started", "start": "start", "time": "time",
                  "timestamp": "timestamp", "engine": "engine", "build": "build",
                  "commit": "commit", "device": "device", "threads": "threads",
                  "flags": "flags", "common_flags": "flags", "ctx": "n_ctx", "n_ctx": "n_ctx"}
_KEY_VALUE = re.compile(r"^\s*#?\s*(?P<key>[A-Za-z][A-Za-z_ -]{0,24}?)\s*[:=]\s*(?P<value>\S.*?)\s*$")


@dataclass
class Header:
    """What one section header says."""

    name: str
    flags: str | None = None            # None: the header gives none
    label: str | None = None            # its description (`GPU`), or the command line
    settings: dict[str, Any] = field(default_factory=dict)   # model, prompt, n_predict, csv


def slug(text: str) -> str:
    """`text` as a config name: letters, digits and `_ . = , + -` only."""
    return _NOT_NAME.sub("-", text).strip("-") or "run"


def rule_header(line: str) -> Header | None:
    """The header a rule line is (`=== NAME ===`, `--- cell A - GPU: FLAGS`), or None."""
    found = _RULE.match(line)
    if found is None:
        return None
    body = _KIND_WORD.sub("", found.group("body").strip())
    head, sep, rest = body.partition(":")
    flags: str | None = None
    if sep and (rest.strip().startswith("-") or rest.strip().lower() in _NO_FLAGS):
        flags = "" if rest.strip().lower() in _NO_FLAGS else rest.strip()
    else:
        head = body
    cell, dash, description = head.partition(" - ")
    cell, description = cell.strip(), description.strip()
    name = slug(f"{cell}-{description}" if dash and description else head.strip())
    settings: dict[str, Any] = {}
    if flags:
        flags, settings = split_argv(flags)
    return Header(name, flags, description or None, settings)


def command_header(line: str, index: int) -> Header | None:
    """The header a `$ COMMAND` line is, or None; `index`: its place (for `run-N`)."""
    found = _COMMAND.match(line)
    if found is None:
        return None
    try:
        argv = shlex.split(found.group("cmd"))
    except ValueError:                  # an unbalanced quote: words as they stand
        argv = found.group("cmd").split()
    while argv and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", argv[0]):
        argv = argv[1:]                 # VAR=value before the program
    flags, settings = split_argv(shlex.join(argv[1:]) if argv else "")
    csv = settings.get("csv")
    if csv:
        name = slug(re.sub(r"\.csv$", "", str(csv).replace("\\", "/").rpartition("/")[2]))
    else:
        name = slug(flags.replace("--", "").replace(" ", "_")) if flags else f"run-{index}"
    return Header(name, flags, found.group("cmd").strip(), settings)


def split_argv(text: str) -> tuple[str, dict[str, Any]]:
    """(the flags without -m/-p/-n/--csv/-f and their values, those values as settings)."""
    try:
        argv = shlex.split(text)
    except ValueError:
        argv = text.split()
    kept: list[str] = []
    settings: dict[str, Any] = {}
    i = 0
    while i < len(argv):
        word = argv[i]
        option, eq, inline = word.partition("=")
        if option in _VALUE_OPTIONS and (eq or i + 1 < len(argv)):
            value = inline if eq else argv[i + 1]
            settings[_VALUE_OPTIONS[option]] = _number(value) \
                if _VALUE_OPTIONS[option] == "n_predict" else value
            i += 1 if eq else 2
            continue
        kept.append(word)
        i += 1
    return shlex.join(kept), settings


def _number(value: str) -> Any:
    return int(value) if value.strip().isdigit() else value


def preamble_settings(lines: list[str]) -> tuple[dict[str, Any], str | None]:
    """(the settings a file's preamble gives, its flags for every section or None). Only the
    keys a preamble plausibly holds are read (_PREAMBLE_KEYS); argv-like words (`-n 24`,
    `-m model.gguf`) on any of its lines count too."""
    settings: dict[str, Any] = {}
    flags: str | None = None
    for line in lines:
        found = _KEY_VALUE.match(line)
        key = found.group("key").strip().lower().replace("-", "_").replace(" ", "_") \
            if found else None
        if found and key in _PREAMBLE_KEYS:
            value = found.group("value").strip().strip("\"'")
            name = _PREAMBLE_KEYS[key]
            if name == "flags":
                flags, more = split_argv(value)
                settings.update(more)
            else:
                settings.setdefault(name, _number(value) if name in ("n_predict", "threads",
                                                                     "n_ctx") else value)
        elif re.search(r"(?:^|\s)(?:-[mnp]|--model|--n-predict)\s+\S", line):
            _, more = split_argv(line.strip().lstrip("$").strip())
            for k, v in more.items():
                settings.setdefault(k, v)
    return settings, flags
