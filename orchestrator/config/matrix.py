"""Matrix files: the YAML a user writes to describe a benchmark sweep, validated with pydantic."""
from __future__ import annotations

import hashlib
import itertools
import re
import shlex
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from orchestrator.config.yamlfile import (
    ConfigError,
    Problems,
    errors_at,
    load_yaml,
    validate,
)

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.=,+-]*$")


def parse_duration(value: Any) -> float:
    """`45`, `45s`, `2m`, `500ms` -> seconds."""
    if isinstance(value, bool):
        raise ValueError("expected a duration such as 45s")
    if isinstance(value, (int, float)):
        seconds = float(value)
    else:
        match = _DURATION.match(str(value))
        if not match:
            raise ValueError(f"expected a duration such as 45s, got {value!r}")
        seconds = float(match.group(1)) * _UNITS[match.group(2)]
    if seconds < 0:
        raise ValueError("a duration cannot be negative")
    return seconds


_UNTIL = re.compile(r"^\s*(?:(baseline)\s*\+\s*)?(\d+(?:\.\d+)?)\s*C\s*$", re.I)


class Cooldown(BaseModel):
    """How the device settles before each cell: a fixed wait between cells (`cooldown: 45s`)
    or a thermal condition checked on the device before every cell:
    `{until: baseline+2C | 40C, sensor: cpu | battery | <zone type pattern>, min: 10s, max: 300s}`.
    """

    model_config = ConfigDict(extra="forbid")
    seconds: float = 0.0
    until: str | None = None
    sensor: str = "cpu"
    min: float = 0.0
    max: float = 300.0
    interval: float = 1.0

    @model_validator(mode="before")
    @classmethod
    def _from_scalar(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return value
        return {"seconds": parse_duration(value)}

    @field_validator("min", "max", "interval", mode="before")
    @classmethod
    def _durations(cls, value: Any) -> float:
        return parse_duration(value)

    @field_validator("until")
    @classmethod
    def _until(cls, value: str | None) -> str | None:
        if value is not None and not _UNTIL.match(str(value)):
            raise ValueError("expected `baseline+2C` or an absolute `40C`")
        return value

    @field_validator("interval")
    @classmethod
    def _interval(cls, value: float) -> float:
        if value <= 0:
            raise ValueError("the sensor needs an interval above 0 between readings")
        return value

    @model_validator(mode="after")
    def _condition_or_timer(self) -> "Cooldown":
        given = self.model_fields_set
        problems: Problems = []
        if self.until is None:
            # Without `until` these would be silently ignored: the timer is `seconds` alone.
            problems += [((key,), "only with `until` (a thermal condition)")
                         for key in ("sensor", "min", "max", "interval") if key in given]
        else:
            if "seconds" in given:
                problems.append((("seconds",), ("give `seconds` (a fixed wait) or `until` "
                                                "(a thermal condition), not both")))
            if self.max < self.min:
                problems.append((("max",), f"must be at least min ({self.min:g} s)"))
        if problems:
            raise errors_at(self, problems)
        return self

    @property
    def is_condition(self) -> bool:
        return self.until is not None

    def threshold_mC(self, baseline: dict[str, float] | None) -> int:
        """The condition's absolute limit in milli-°C; `baseline+X` needs the device's idle
        baseline for the sensor (orch calibrate)."""
        match = _UNTIL.match(str(self.until))
        assert match is not None
        delta = float(match.group(2)) * 1000
        if not match.group(1):
            return int(delta)
        if not baseline or self.sensor not in baseline:
            raise ValueError(f"cooldown.until is relative to the idle baseline of sensor "
                             f"{self.sensor!r}, which this device has none of")
        return int(baseline[self.sensor] + delta)


class BinarySpec(BaseModel):
    """Where the engine is: a path already on the device, or a local file orch pushes."""

    model_config = ConfigDict(extra="forbid")
    device: str | None = None
    local: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _from_scalar(cls, value: Any) -> Any:
        if isinstance(value, str):
            return {"device": value}
        return value

    @model_validator(mode="after")
    def _one_of(self) -> "BinarySpec":
        if (self.device is None) == (self.local is None):
            raise ValueError("give either a device path or `local: FILE` to push")
        return self


class ModelFile(BaseModel):
    """A model file on the controller that orch pushes to the device (skipped when the device
    already has the same bytes)."""

    model_config = ConfigDict(extra="forbid")
    local: str


class RepeatPolicy(BaseModel):
    """How many times each config runs: `repeat: 3` (exactly 3), or adaptive,
    `repeat: {min: 3, max: 10, until: 2%}`: after `min` interleaved rounds, more rounds run
    until every config's 95% interval half-width is within `until` percent of its mean, or
    `max` rounds have run (Phoronix's dynamic run count, judged by intervals)."""

    model_config = ConfigDict(extra="forbid")
    min: int = Field(ge=1)
    max: int = Field(ge=1)
    until: float | None = None          # target half-width of the 95% interval, % of the mean

    @model_validator(mode="before")
    @classmethod
    def _from_count(cls, value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            return {"min": value, "max": value}
        return value

    @field_validator("until", mode="before")
    @classmethod
    def _percent(cls, value: Any) -> Any:
        if isinstance(value, str):
            text = value.strip().removesuffix("%").strip()
            try:
                return float(text)
            except ValueError:
                raise ValueError("expected a percentage such as `2%`") from None
        return value

    @model_validator(mode="after")
    def _bounds(self) -> "RepeatPolicy":
        if self.max < self.min:
            raise ValueError("max must be at least min")
        if self.until is not None and not 0 < self.until < 100:
            raise ValueError("until must be a percentage between 0 and 100")
        if self.until is None and self.max != self.min:
            raise ValueError("give `until: X%` (the interval to reach) for adaptive repeats")
        return self

    @property
    def adaptive(self) -> bool:
        return self.max > self.min


class Matrix(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    description: str | None = None
    engine: str
    binary: BinarySpec | None = None
    models: dict[str, str | ModelFile] = Field(default_factory=dict)
    prompt: str | None = None
    prompt_file: str | None = None
    tokens: int = Field(default=64, gt=0)
    configs: dict[str, str] = Field(default_factory=dict)
    grid: dict[str, Annotated[list[str | int | float | bool], Field(min_length=1)]] = \
        Field(default_factory=dict)
    repeat: RepeatPolicy = Field(default_factory=lambda: RepeatPolicy(min=1, max=1))
    order: Literal["as-written", "interleaved", "shuffled"] = "as-written"
    seed: int | None = None
    cooldown: Cooldown = Field(default_factory=Cooldown)
    timeout: float = 600.0
    env: dict[str, str] = Field(default_factory=dict)
    # the config the others are compared with: one name for every model, or model -> config;
    # default: the first config
    baseline: str | dict[str, str] | None = None
    labels: dict[str, str] = Field(default_factory=dict)   # config -> label shown in reports
    # A/B pairs that run back to back in every repeat, so each comparison sees the same
    # device state: [[baseline, candidate], ...]
    pairs: list[Annotated[list[str], Field(min_length=2)]] = Field(default_factory=list)
    sample_interval: float = 1.0
    engine_options: dict[str, Any] = Field(default_factory=dict)
    path_check: Literal["warn", "refuse", "off"] = "warn"  # model paths vs streaming (pathcheck.py)

    @field_validator("name")
    @classmethod
    def _name_ok(cls, value: str) -> str:
        if not _NAME.match(value):
            raise ValueError("use letters, digits and . _ - = , + only")
        return value

    @field_validator("path_check", mode="before")
    @classmethod
    def _bare_off(cls, value: Any) -> Any:
        return "off" if value is False else value  # YAML 1.1 reads a bare `off` as false

    @field_validator("timeout", "sample_interval", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> float:
        return parse_duration(value)

    @field_validator("configs")
    @classmethod
    def _config_names(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if not _NAME.match(str(name)):
                raise ValueError(f"config name {name!r}: use letters, digits and . _ - = , + only")
        return value

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        for key, val in value.items():
            if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", key):
                raise ValueError(f"{key!r} is not a valid environment variable name")
            if "\n" in val or "\0" in val:
                raise ValueError(f"{key}: values cannot contain newlines")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> "Matrix":
        """The rules that relate keys to each other, each error at the key it is about."""
        problems: Problems = []
        if self.prompt is not None and self.prompt_file is not None:
            problems.append((("prompt_file",), "give `prompt` or `prompt_file`, not both"))
        if not self.configs and not self.grid:
            problems.append(((), "give at least one of `configs` or `grid`"))
        else:
            problems += _duplicate_config_names(self)
        if not problems:
            names = [name for name, _ in expand_configs(self)]
            problems += _baseline_and_pairs(self, names)
        if problems:
            raise errors_at(self, problems)
        return self

    def config_names(self) -> list[str]:
        return [name for name, _ in expand_configs(self)]

    def baseline_for(self, model: str) -> str:
        """The config `model`'s A/B deltas are taken against (never another model's runs)."""
        if isinstance(self.baseline, dict):
            if model in self.baseline:
                return self.baseline[model]
        elif self.baseline is not None:
            return self.baseline
        return self.config_names()[0]

    def label(self, config: str) -> str:
        """A config's human-readable label (`labels:`), else its name."""
        return self.labels.get(config, config)


def _one_of(names: list[str]) -> str:
    shown = ", ".join(names[:8]) + (f", ... {len(names) - 8} more" if len(names) > 8 else "")
    return f"is not one of the configs ({shown})"


def _baseline_and_pairs(matrix: Matrix, names: list[str]) -> Problems:
    known = set(names)
    problems: Problems = []
    if isinstance(matrix.baseline, dict):
        models = set(matrix.models) or {"-"}
        for model, config in matrix.baseline.items():
            if model not in models:
                problems.append((("baseline", model), f"{model!r} is not one of the models "
                                                      f"({', '.join(sorted(models))})"))
            elif config not in known:
                problems.append((("baseline", model), f"{config!r} {_one_of(names)}"))
    elif matrix.baseline is not None and matrix.baseline not in known:
        problems.append((("baseline",), f"{matrix.baseline!r} {_one_of(names)}"))
    for config in matrix.labels:
        if config not in known:
            problems.append((("labels", config), f"{config!r} {_one_of(names)}"))
    pair_of: dict[str, int] = {}
    for i, pair in enumerate(matrix.pairs):
        for j, name in enumerate(pair):
            if name not in known:
                problems.append((("pairs", i, j), f"{name!r} {_one_of(names)}"))
            elif name in pair_of:
                where = "this pair" if pair_of[name] == i else f"pair {pair_of[name]}"
                problems.append((("pairs", i, j), f"{name!r} is already in {where}"))
            else:
                pair_of[name] = i
    return problems


def _duplicate_config_names(matrix: Matrix) -> Problems:
    """Two cells with one config name would share a cell key (resume, reports, A/B would mix
    them): two grid values that name alike (`1` and "1", `true` and "on", a repeat), or, in
    the rarer case, names put together from `configs` and `grid` that meet."""
    problems: Problems = []
    for flag, values in matrix.grid.items():
        first: dict[str, int] = {}
        for j, value in enumerate(values):
            part = _flag_value(flag, value)[0]
            if first.setdefault(part, j) != j:
                problems.append((("grid", flag, j), (f"gives the config name {part!r} again "
                                                     f"(as value {first[part]} does)")))
    if problems:
        return problems
    seen: set[str] = set()
    for name, _ in expand_configs(matrix):
        if name in seen:
            return [(("configs",) if matrix.configs else ("grid",),
                     f"two configs are named {name!r}")]
        seen.add(name)
    return []


class LoadedMatrix(BaseModel):
    """A validated matrix plus what provenance needs: where it came from, its exact text."""

    matrix: Matrix
    path: str
    text: str
    sha256: str
    prompt_text: str


def load_matrix(path: str | Path) -> LoadedMatrix:
    path = Path(path)
    data, node, text = load_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}:1: expected a mapping with name, engine, configs, ...")
    matrix = validate(Matrix, data, node, path)
    if matrix.prompt_file is not None:
        prompt_path = (path.parent / matrix.prompt_file)
        try:
            prompt_text = prompt_path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"{path}: prompt_file: cannot read {prompt_path}: {exc.strerror}") from None
    else:
        prompt_text = matrix.prompt or ""
    return LoadedMatrix(matrix=matrix, path=str(path), text=text,
                        sha256=hashlib.sha256(text.encode()).hexdigest(), prompt_text=prompt_text)


def _flag_value(flag: str, value: object) -> tuple[str, list[str]]:
    """One grid entry -> (name part, flag tokens). Booleans switch a bare flag on/off."""
    short = flag.lstrip("-")
    if isinstance(value, bool):
        return (f"{short}={'on' if value else 'off'}", [flag] if value else [])
    return (f"{short}={value}", [flag, str(value)])


def expand_configs(matrix: Matrix) -> list[tuple[str, str]]:
    """(name, flag string) pairs: `configs` as written, crossed with the `grid` product."""
    grid_items: list[tuple[str, str]] = []
    if matrix.grid:
        flags = list(matrix.grid)
        for combo in itertools.product(*(matrix.grid[f] for f in flags)):
            parts = [_flag_value(f, v) for f, v in zip(flags, combo)]
            name = ",".join(p[0] for p in parts)
            tokens = [t for p in parts for t in p[1]]
            grid_items.append((name, shlex.join(tokens)))
    if not matrix.configs:
        return grid_items
    base = list(matrix.configs.items())
    if not grid_items:
        return base
    return [(f"{cname}+{gname}", f"{cflags} {gflags}".strip())
            for cname, cflags in base for gname, gflags in grid_items]
