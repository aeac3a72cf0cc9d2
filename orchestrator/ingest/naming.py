"""What an imported file's name says, and what it must never be taken to say.

- **Models.** A file's own words win (the CSV preamble's `model=`, a route trace's `model=`:
  the GGUF file name without its folder and `.gguf`). Only a file that says nothing is named
  by its path, and then only by a word that is a model family (`gemma`, `qwen5k`, `gptoss`):
  study folders name files `<role>_<model>_<k>` as often as `<model>_<config>`, and the role
  (`baseline`, `warmup`) is never a model. `--model GLOB=NAME` rules match the path relative
  to the study folder and win over everything.
- **Times.** A stem with a timestamp (`bmoe-20260721-090406`, `run_2026-07-21T09-04-06`)
  carries the run's start as the study's clock read it: local time, returned naive.
- **Repeat indices.** `qw-a1`/`qw-a2` and `qwen-lru_a`/`qwen-lru_b` are repeats of `qw-a` and
  `qwen-lru` when their settings agree (ingest/grouping.py decides).
"""
from __future__ import annotations

import datetime as dt
import fnmatch
import re
from collections.abc import Mapping, Sequence
from pathlib import PurePosixPath

from orchestrator.errors import ConfigError

# Families of open-weight models people run with llama.cpp; a file-name word that starts with
# one of them names the model (`qwen5k` stays `qwen5k`: the study meant another setup).
MODEL_FAMILIES = (
    "gemma", "qwen", "gptoss", "gpt-oss", "gpt", "llama", "mistral", "mixtral", "deepseek",
    "phi", "olmoe", "granite", "glm", "kimi", "minimax", "dbrx", "grok", "arctic", "jamba",
    "falcon", "yi", "internlm", "hunyuan", "ernie", "ling", "smollm", "tinyllama", "exaone",
    "nemotron", "command", "aya", "jetmoe", "moonlight", "ring", "seed", "step", "gemini",
)
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9.]*")
_STAMPS = (
    # bmoe-cli's own: bmoe-20260721-090406; also 20260721_090406, 20260721T090406
    re.compile(r"(?<!\d)(?P<d>\d{8})[-_T]?(?P<t>\d{6})(?!\d)"),
    # ISO-like: 2026-07-21T09-04-06, 2026-07-21_09:04:06, 2026-07-21 09.04
    re.compile(r"(?<!\d)(?P<d>\d{4}-\d{2}-\d{2})[T_ ](?P<t>\d{2}[-:.]\d{2}(?:[-:.]\d{2})?)(?!\d)"),
)
_REPEAT = re.compile(r"^(?P<base>.*?[A-Za-z].*?)(?:(?P<sep>[-_.])(?P<letter>[a-h])|"
                     r"(?P<sep2>[-_.]?)(?:r|run|rep)?(?<!\d)(?P<digit>\d{1,2}))$")


def model_from_file_name(value: object) -> str | None:
    """A preamble's or trace's `model=` value as a model name: the GGUF file's name without
    its folder and `.gguf` (`/data/local/tmp/x/Qwen3-30B-A3B-Q4_K_M.gguf` -> the stem)."""
    if value is None or not str(value).strip():
        return None
    name = PurePosixPath(str(value).strip().replace("\\", "/")).name
    return name[:-5] if name.lower().endswith(".gguf") else name


def model_from_path(rel: str) -> str | None:
    """The model a file's path names (see the module doc), or None: the first word of the
    stem (then of its folders, innermost first) that starts with a model family."""
    path = PurePosixPath(rel)
    stem = path.name.split(".")[0]
    for part in [stem, *reversed(path.parent.parts)]:
        for word in re.split(r"[-_ ]+", part):
            if _is_model_word(word):
                return word
    return None


def _is_model_word(word: str) -> bool:
    low = word.lower()
    return bool(_WORD.fullmatch(word)) and any(low.startswith(f) for f in MODEL_FAMILIES) \
        and not low.startswith(("stepwise", "seeded", "ringbuf"))


def model_globs(values: Sequence[str]) -> dict[str, str]:
    """`--model NAME` (every run) and `--model GLOB=NAME` (runs whose path relative to the
    study folder matches GLOB, e.g. `*gemma*=gemma-4-26b`; a plain word W is the glob `W_*`
    as before) -> {GLOB or "*": NAME}, in the order given (the first match wins)."""
    rules: dict[str, str] = {}
    for value in values:
        glob, sep, name = value.partition("=")
        if sep and (not glob or not name):
            raise ConfigError(f"--model {value!r}: expected NAME or GLOB=NAME")
        rules[glob if sep else "*"] = name if sep else value
    return rules


def rule_model(rules: Mapping[str, str], rel: str) -> str | None:
    """The model a --model rule gives the file at `rel` (its path in the study folder)."""
    for glob, name in rules.items():
        if not any(c in glob for c in "*?[/"):
            glob = f"{glob}[-_]*"      # a bare word: the file-name prefix (gptoss_k2.csv)
        if glob == "*" or fnmatch.fnmatchcase(rel, glob) \
                or fnmatch.fnmatchcase(PurePosixPath(rel).name, glob):
            return model_from_file_name(name)     # a GGUF file name lines up with preambles
    return None


def name_time(stem: str) -> dt.datetime | None:
    """The timestamp in a file's stem (local time as written), or None."""
    for pattern in _STAMPS:
        found = pattern.search(stem)
        if not found:
            continue
        digits = re.sub(r"\D", "", found.group("d") + found.group("t"))
        try:
            return dt.datetime.strptime(digits.ljust(14, "0"), "%Y%m%d%H%M%S")
        except ValueError:
            continue       # 20261399-...: digits, not a date
    return None


def without_time(stem: str) -> str:
    """The stem with its timestamp and the separators around it removed (`bmoe`)."""
    for pattern in _STAMPS:
        stem = pattern.sub("", stem)
    return stem.strip("-_. ")


def repeat_index(name: str) -> tuple[str, int, bool] | None:
    """(base, index, marked) when the name ends in a repeat index: `qw-a1` -> (`qw-a`, 1,
    False), `qwen-lru_b` -> (`qwen-lru`, 1, True), `run_2` -> (`run`, 2, True); `marked`: a
    separator sets the index off. The index only orders the repeats (0- or 1-based alike).
    Whether it IS a repeat is decided with the other runs (ingest/grouping.py): `gemma_k6`
    ends in a digit too."""
    found = _REPEAT.match(name)
    if not found:
        return None
    base = found.group("base").rstrip("-_.")
    if found.group("letter"):
        return base, ord(found.group("letter")) - ord("a"), True
    return base, int(found.group("digit")), bool(found.group("sep2"))
