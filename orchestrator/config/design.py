"""Design files: what a study's write-up says about its result folder that the files cannot
(`orch import DIR --design study.yaml`, docs/import.md).

A design names the device, the models, which files are which config (by globs relative to the
folder), each config's label and flags, the baseline per model, the order the runs were
measured in, and markdown notes for the session, models and configs. It is validated like a
matrix file (config/yamlfile.py): every problem is one `file:line: key.path: message` line.

Matching is pure (no file system): a pattern is an fnmatch glob matched against a file's
POSIX path relative to the folder, the whole path. `*` also crosses `/` (fnmatch has no
path segments), but a bare name such as `run.csv` does not match `sub/run.csv`.

About 470 lines on purpose, as config/matrix.py: the model and its cross-key rules (one
model_validator calls every `_*_problems` check, so every problem of a file is reported at
once with its line) are one contract; split, the checks would import the model they check
and the model the checks, a cycle.
"""
from __future__ import annotations

import datetime as dt
import fnmatch
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from orchestrator.config.design_ab import exclude_problems, pairs_problems
from orchestrator.config.matrix import flag_problems
from orchestrator.config.notes import Notes, applies, key_problems, scoped
from orchestrator.config.yamlfile import Problems, errors_at, load_yaml, validate
from orchestrator.errors import ConfigError

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.=,+-]*")   # as a matrix's config names
_MEASURED = re.compile(r"^(\d{4})-(\d{2})-(\d{2})(?:T(\d{2}):(\d{2})(?::(\d{2}))?)?$")
_TIMESTAMP = "tag:yaml.org,2002:timestamp"
_GLOB_CHARS = re.compile(r"[*?\[]")
KIB_PER_GIB = 1048576    # mem_total_kb is in kB as /proc/meminfo writes it (KiB)
GIB = 1 << 30


def parse_measured(text: str) -> dt.datetime:
    """`YYYY-MM-DD` or `YYYY-MM-DDTHH:MM[:SS]` as a naive datetime: the local time the study
    wrote (a date alone is midnight). Raises ValueError saying what is expected."""
    expected = ("expected YYYY-MM-DD or YYYY-MM-DDTHH:MM[:SS] (local time as written, no time "
                "zone), e.g. 2026-07-21 or 2026-07-21T10:15")
    match = _MEASURED.match(text.strip())
    if match is None:
        raise ValueError(f"{text!r}: {expected}")
    year, month, day, hour, minute, second = (int(p) if p else 0 for p in match.groups())
    try:
        return dt.datetime(year, month, day, hour, minute, second)
    except ValueError as exc:        # 2026-02-30, 25:00
        raise ValueError(f"{text!r} is not a real date and time ({exc}): {expected}") from None


def _matches(rel_path: str, pattern: str) -> bool:
    # case-sensitive on every OS: a study folder's names are what they are
    return fnmatch.fnmatchcase(rel_path, pattern)


def _pattern_problems(loc: tuple[str | int, ...], patterns: list[str]) -> Problems:
    return [((*loc, i), "an empty pattern matches no file") for i, p in enumerate(patterns)
            if not p.strip()]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DeviceFacts(_Strict):
    """The device the study ran on, as its write-up describes it."""

    name: str                       # the device row's name
    soc: str | None = None
    cores: int | None = Field(default=None, gt=0)
    ram_gib: float | None = Field(default=None, gt=0)
    storage: str | None = None
    os: str | None = None
    notes: str | None = None

    def facts(self) -> dict[str, Any]:
        """The facts under the keys a probed device's snapshot uses (the report's device line
        and provenance read these), marked as coming from the design file."""
        out: dict[str, Any] = {"cpu_model": self.soc, "cores": self.cores,
                               "mem_total_kb": (round(self.ram_gib * KIB_PER_GIB)
                                                if self.ram_gib is not None else None),
                               "storage": self.storage, "os": self.os, "notes": self.notes}
        # ram_gib as written too: a view prints what was given, not the kB computed from it
        out["ram_gib"] = self.ram_gib
        return {**{k: v for k, v in out.items() if v is not None}, "source": "design file"}


class ModelInfo(_Strict):
    """A model of the study: which files measured it and what is known about it."""

    files: list[str] = Field(default_factory=list)   # globs: runs whose path matches
    size_bytes: int | None = Field(default=None, gt=0)
    size_gib: float | None = Field(default=None, gt=0)
    facts: dict[str, str | int | float] = Field(default_factory=dict)   # arch, quant, ...
    label: str | None = None

    def size(self) -> int | None:
        """The model file's size in bytes (from size_bytes or size_gib)."""
        if self.size_bytes is not None:
            return self.size_bytes
        return round(self.size_gib * GIB) if self.size_gib is not None else None


class ConfigInfo(_Strict):
    """A config of the study: the files that measured it, its label and flags."""

    files: list[str] = Field(min_length=1)
    label: str | None = None
    flags: str | None = None
    model: str | None = None        # only runs of this model (two models' files share a glob)

    def listed_order(self) -> bool:
        """True when every entry is a file name, not a glob: then the list's order is the
        repeat order (else the runs' time order is)."""
        return not any(_GLOB_CHARS.search(p) for p in self.files)


FILE_KINDS = ("runs", "turns", "samples", "summary-log")


class FileRule(_Strict):
    """How to read files that match a glob (`files:`): what they are and, for a sample CSV,
    what its columns mean (docs/import.md, "files")."""

    kind: Literal["runs", "turns", "samples", "summary-log"]
    columns: dict[str, str] = Field(default_factory=dict)   # CSV column -> sample column
    units: dict[str, str] = Field(default_factory=dict)     # CSV column -> kB, MB, GB, s, ms
    time: str | None = None                                 # the time column
    delimiter: str | None = Field(default=None, min_length=1, max_length=1)
    run: str | None = None          # samples: the run (file stem or glob) they belong to


class Design(_Strict):
    """A study folder's design file (docs/import.md)."""

    title: str | None = None             # the document's title (else "Benchmark report: NAME")
    label: str | None = None             # the session's description (as `orch import --label`)
    # Environment rows, in order; a number (`Compute threads: 4`) is its text
    environment: dict[str, str] = Field(default_factory=dict)

    @field_validator("environment", mode="before")
    @classmethod
    def _environment_text(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return {k: str(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v
                    for k, v in value.items()}
        return value
    device: DeviceFacts | None = None
    engine_build: str | None = None
    measured: str | None = None          # when, for files that cannot say (parse_measured)
    models: dict[str, ModelInfo] = Field(default_factory=dict)
    configs: dict[str, ConfigInfo] = Field(default_factory=dict)
    # one config for every model, or model -> a config or a LIST of configs (several
    # baselines: each gets its own A/B rows, results/ab.py)
    baseline: str | dict[str, str | list[str]] | None = None
    order: list[str] = Field(default_factory=list)   # globs in the order the runs were measured
    # configs measured back to back in every round: tested paired (as a matrix's `pairs:`)
    pairs: list[Annotated[list[str], Field(min_length=2)]] = Field(default_factory=list)
    # runs left out of every figure: a run's file glob -> why (results/exclude.py)
    exclude: dict[str, str] = Field(default_factory=dict)
    notes: Notes | None = None
    files: dict[str, FileRule] = Field(default_factory=dict)   # glob -> how to read it
    trim: int = Field(default=0, ge=0, strict=True)  # first tokens left out (stats/trim.py)
    # configs not run on purpose (an OOM, a device that cannot hold it): CONFIG or
    # MODEL:CONFIG -> why, shown in the model's table notes
    left_out: dict[str, str] = Field(default_factory=dict)

    @field_validator("measured", mode="before")
    @classmethod
    def _measured_text(cls, value: Any) -> Any:
        """YAML reads `2026-07-21` as a date and `2026-07-21T10:15:00` as a datetime: back to
        the text the author wrote, so one parser decides."""
        if isinstance(value, dt.datetime):
            if value.tzinfo is not None:
                raise ValueError("give the local time as written, without a time zone")
            return value.isoformat(timespec="seconds")
        if isinstance(value, dt.date):
            return value.isoformat()
        return value

    @field_validator("measured")
    @classmethod
    def _measured_ok(cls, value: str | None) -> str | None:
        if value is not None:
            parse_measured(value)
        return value

    @field_validator("configs")
    @classmethod
    def _config_names(cls, value: dict[str, ConfigInfo]) -> dict[str, ConfigInfo]:
        for name in value:
            if not _NAME.fullmatch(str(name)):
                raise ValueError(f"config name {name!r}: use letters, digits and . _ - = , + only")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> Design:
        """The rules that relate keys to each other, each error at the key it is about."""
        problems = _model_problems(self) + _config_problems(self) + _baseline_problems(self)
        problems += _notes_problems(self) + _pattern_problems(("order",), self.order)
        problems += _left_out_problems(self)
        problems += pairs_problems(self.pairs, list(self.configs))
        problems += exclude_problems(self.exclude)
        if problems:
            raise errors_at(self, problems)
        return self

    # ---- reading it --------------------------------------------------------------------

    def measured_at(self) -> dt.datetime | None:
        return parse_measured(self.measured) if self.measured is not None else None

    def baseline_for(self, model: str) -> str | None:
        """The config `model`'s A/B deltas are taken against, when the design names one (the
        first of several)."""
        return next(iter(self.baselines_for(model)), None)

    def baselines_for(self, model: str) -> list[str]:
        """Every config `model`'s A/B rows are taken against, in written order."""
        chosen = self.baseline.get(model) if isinstance(self.baseline, dict) else self.baseline
        if chosen is None:
            return []
        return [chosen] if isinstance(chosen, str) else list(chosen)

    def paired(self, a: str, b: str) -> bool:
        """Whether `pairs:` names the two (different) configs as one pair (either order)."""
        return a != b and any(a in pair and b in pair for pair in self.pairs)

    def exclusion(self, rel_path: str) -> tuple[str, str] | None:
        """(glob, reason) of the first `exclude:` entry (written order) matching a run's file,
        by its path in the folder or by its name alone."""
        name = rel_path.rsplit("/", 1)[-1]
        return next(((glob, why) for glob, why in self.exclude.items()
                     if _matches(rel_path, glob) or _matches(name, glob)), None)

    def config_of(self, rel_path: str, model: str | None = None) -> tuple[str, int] | None:
        """(config, position of the first pattern that matched) of a file, the first config
        in written order that matches; a config restricted to another model is skipped (with
        `model` None, restrictions are not applied)."""
        for name, info in self.configs.items():
            if model is not None and info.model is not None and info.model != model:
                continue
            for i, pattern in enumerate(info.files):
                if _matches(rel_path, pattern):
                    return name, i
        return None

    def model_of(self, rel_path: str) -> str | None:
        """The first model (written order) one of whose `files` globs matches the file."""
        for name, info in self.models.items():
            if any(_matches(rel_path, p) for p in info.files):
                return name
        return None

    def file_rule(self, rel_path: str) -> FileRule | None:
        """The `files:` rule of the first glob (written order) that matches the file."""
        return next((rule for glob, rule in self.files.items() if _matches(rel_path, glob)),
                    None)

    def order_key(self, rel_path: str) -> int | None:
        """The position of the first `order` entry that matches the file (None: unlisted)."""
        return next((i for i, p in enumerate(self.order) if _matches(rel_path, p)), None)

    def config_label(self, config: str) -> str | None:
        info = self.configs.get(config)
        return info.label if info is not None else None

    def session_note(self) -> str | None:
        return self.notes.session if self.notes is not None else None

    def model_note(self, model: str) -> str | None:
        return self.notes.models.get(model) if self.notes is not None else None

    def config_note(self, config: str, model: str | None = None) -> str | None:
        """The note on `config` as `model`'s tables show it (a MODEL:CONFIG note first)."""
        return self.notes.config_note(config, model) if self.notes is not None else None

    def left_out_for(self, model: str) -> list[tuple[str, str]]:
        """(config, why) of the configs left out of `model`'s runs on purpose, as written."""
        return [(scoped(key)[1], why) for key, why in self.left_out.items()
                if applies(key, model)]

    def stored(self) -> dict[str, Any]:
        """JSON-ready, as the importer keeps it in the session's import options."""
        return self.model_dump(mode="json", exclude_none=True)


# ---- cross-key checks ----------------------------------------------------------------------

def _one_of(kind: str, names: list[str]) -> str:
    shown = ", ".join(names[:8]) + (f", ... {len(names) - 8} more" if len(names) > 8 else "")
    return f"is not one of the {kind} ({shown})"


def _model_problems(design: Design) -> Problems:
    problems: Problems = []
    for name, info in design.models.items():
        if info.size_bytes is not None and info.size_gib is not None:
            problems.append((("models", name, "size_gib"), "give size_bytes or size_gib, not both"))
        problems += _pattern_problems(("models", name, "files"), info.files)
    return problems


def _config_problems(design: Design) -> Problems:
    problems: Problems = []
    models = list(design.models)
    for name, info in design.configs.items():
        problems += _pattern_problems(("configs", name, "files"), info.files)
        if info.flags is not None:
            problems += [(("configs", name, "flags"), m) for m in flag_problems(info.flags)]
        if info.model is not None and models and info.model not in models:
            problems.append((("configs", name, "model"),
                             f"{info.model!r} {_one_of('models', models)}"))
    return problems


def _baseline_problems(design: Design) -> Problems:
    configs, models = list(design.configs), list(design.models)
    if isinstance(design.baseline, str):
        if configs and design.baseline not in configs:
            return [(("baseline",), f"{design.baseline!r} {_one_of('configs', configs)}")]
        return []
    problems: Problems = []
    for model, chosen in (design.baseline or {}).items():
        if models and model not in models:
            problems.append((("baseline", model), (f"{model!r} {_one_of('models', models)}; add "
                                                   f"it under `models:` (`{model}: {{}}`)")))
            continue
        listed = [chosen] if isinstance(chosen, str) else chosen
        if not listed:
            problems.append((("baseline", model), "an empty list names no baseline"))
        for i, config in enumerate(listed):
            loc = ("baseline", model) if isinstance(chosen, str) else ("baseline", model, i)
            info = design.configs.get(config)
            if configs and info is None:
                problems.append((loc, f"{config!r} {_one_of('configs', configs)}"))
            elif info is not None and info.model is not None and info.model != model:
                problems.append((loc, f"{config!r} is a config of model {info.model!r} only"))
            elif config in listed[:i]:
                problems.append((loc, f"{config!r} is listed twice"))
    return problems


def _notes_problems(design: Design) -> Problems:
    if design.notes is None:
        return []
    configs, models = list(design.configs), list(design.models)
    problems: Problems = [(("notes", "configs", key), message) for key in design.notes.configs
                          for message in key_problems(key, configs, models)]
    problems += [(("notes", "models", m), f"{m!r} {_one_of('models', models)}")
                 for m in design.notes.models if models and m not in models]
    return problems


def _left_out_problems(design: Design) -> Problems:
    """A left-out config need not be one of `configs` (it was not run: it has no files)."""
    models = list(design.models)
    return [(("left_out", key), message) for key, why in design.left_out.items()
            for message in key_problems(key, [], models, why)]


# ---- loading -------------------------------------------------------------------------------

def load_design(path: Path) -> Design:
    """Read and validate a design file; every problem is a ConfigError line
    `file:line: key.path: message`."""
    path = Path(path)
    try:
        data, node, _ = load_yaml(path)
    except ValueError as exc:    # PyYAML builds `2026-13-01` as a date and raises ValueError
        raise ConfigError(_bad_timestamp(path, exc)) from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}:1: expected a mapping with device, models, configs, ...")
    try:
        return validate(Design, data, node, path)
    except ConfigError as exc:
        hints = _bool_words(node, path)
        if hints:
            raise ConfigError("\n".join([str(exc), *hints])) from None
        raise


_BOOL_WORDS = {"off", "on", "yes", "no", "y", "n"}


def _bool_words(node: Any, path: Path) -> list[str]:
    """Where YAML read an unquoted off/on/yes/no as true/false: a config named `off` becomes
    the key False, and the error it causes must say why (the first three are named)."""
    found: list[str] = []

    def walk(item: Any) -> None:
        if isinstance(item, yaml.MappingNode):
            for key, value in item.value:
                walk(key)
                walk(value)
        elif isinstance(item, yaml.SequenceNode):
            for value in item.value:
                walk(value)
        elif isinstance(item, yaml.ScalarNode) and item.tag == "tag:yaml.org,2002:bool" \
                and item.style is None and item.value.lower() in _BOOL_WORDS:
            word = item.value
            found.append(f"{path}:{item.start_mark.line + 1}: {word!r} is read by YAML as "
                         f"{word.lower() in ('on', 'yes', 'y')}: quote it ('{word}') to mean "
                         f"the word")

    walk(node)
    return found[:3]


def _bad_timestamp(path: Path, exc: ValueError) -> str:
    """Where the date YAML could not build is (the composed tree needs no construction)."""
    def walk(node: yaml.Node, keys: tuple[str, ...]) -> str | None:
        if isinstance(node, yaml.MappingNode):
            pairs = [(str(k.value), v) for k, v in node.value]
        elif isinstance(node, yaml.SequenceNode):
            pairs = [(str(i), v) for i, v in enumerate(node.value)]
        else:
            if not isinstance(node, yaml.ScalarNode) or node.tag != _TIMESTAMP:
                return None
            try:
                yaml.SafeLoader("").construct_yaml_timestamp(node)
                return None
            except ValueError as bad:
                key = ".".join(keys) or "(top level)"
                return (f"{path}:{node.start_mark.line + 1}: {key}: {node.value!r} is not a real "
                        f"date ({bad})")
        return next((found for part, value in pairs
                     if (found := walk(value, (*keys, part))) is not None), None)

    root = yaml.compose(path.read_text(encoding="utf-8"), Loader=yaml.SafeLoader)
    return (walk(root, ()) if root is not None else None) or f"{path}: {exc}"


def design_from_stored(data: Mapping[str, Any] | None) -> Design | None:
    """The Design an import stored (`Design.stored()`); None without one or for data this
    orch no longer reads (a design stored by another version): the session then reads as a
    plain import."""
    if not data:
        return None
    try:
        return Design.model_validate(dict(data))
    except ValidationError:
        return None


def session_design(session: Any) -> Design | None:
    """The design of a stored session (a SessionRow or anything with `import_options`)."""
    options = getattr(session, "import_options", None) if session is not None else None
    design = design_from_stored(options.get("design")) if isinstance(options, Mapping) else None
    if design is None:       # a live session: its matrix's notes, shown the same way
        from orchestrator.config.stored_matrix import stored_matrix_data

        notes = stored_matrix_data(getattr(session, "matrix_text", None)).get("notes") \
            if session is not None else None
        if isinstance(notes, Mapping):
            try:
                design = Design(notes=Notes.model_validate(notes))
            except ValueError:
                return None
    return design
