"""The values a matrix is made of, each a small pydantic type with its own rules: durations
(`45s`, `2m`), the cooldown between cells, where the engine binary is, a model file to push,
and the repeat policy. `matrix.py` puts them together and checks the rules across keys."""
from __future__ import annotations

import math
import re
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    field_validator,
    model_validator,
)

from orchestrator.config.yamlfile import Problems, errors_at

_DURATION = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}
# The longest duration a matrix may give (a week): beyond it a value is a typo, and the agent's
# millisecond arithmetic must stay far inside what a 32-bit shell (mksh) can count.
MAX_DURATION_S = 7 * 24 * 3600.0


def parse_duration(value: Any) -> float:
    """`45`, `45s`, `2m`, `500ms`, `0.5` -> seconds, finite, 0 .. MAX_DURATION_S (YAML's
    `.inf` and `.nan` are floats too: refused here, not discovered by a run that never ends)."""
    if isinstance(value, bool):
        raise ValueError("expected a duration such as 45s")
    if isinstance(value, (int, float)):
        seconds = float(value)
    else:
        match = _DURATION.match(str(value))
        if not match:
            raise ValueError(f"expected a duration such as 45s, got {value!r}")
        seconds = float(match.group(1)) * _UNITS[match.group(2)]
    if not math.isfinite(seconds):
        raise ValueError(f"expected a finite duration, got {value!r}")
    if seconds < 0:
        raise ValueError("a duration cannot be negative")
    if seconds > MAX_DURATION_S:
        raise ValueError(f"at most {MAX_DURATION_S / 86400:g} days, got {seconds:g} s")
    return seconds


_UNTIL = re.compile(r"^\s*(?:(baseline)\s*\+\s*)?(\d+(?:\.\d+)?)\s*C\s*$", re.I)
_ABOVE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*C\s*$", re.I)
_SENSOR = re.compile(r"^[A-Za-z0-9_*?.:-]+$")


class Abort(BaseModel):
    """A thermal ceiling in flight: `abort: {above: 85C, sensor: cpu | battery | <zone type
    pattern>}`. The agent stops the engine's process group when the sensor reads at or above
    `above` in a sample (docs/agent-protocol.md, check_ceiling); the run ends `aborted`."""

    model_config = ConfigDict(extra="forbid")
    above: str
    sensor: str = "cpu"

    @field_validator("above", mode="before")
    @classmethod
    def _above(cls, value: Any) -> str:
        text = str(value)
        match = _ABOVE.match(text)
        if isinstance(value, bool) or not match:
            raise ValueError(f"expected a temperature such as 85C, got {value!r}")
        if not 0 < float(match.group(1)) <= 200:
            raise ValueError(f"expected a ceiling between 0 and 200 °C, got {value!r}")
        return text.strip()

    @field_validator("sensor")
    @classmethod
    def _sensor(cls, value: str) -> str:
        if not _SENSOR.match(value):
            raise ValueError("expected cpu, battery or a zone type pattern (letters, digits, "
                             "_ * ? . : -)")
        return value

    @property
    def above_mC(self) -> int:
        match = _ABOVE.match(self.above)
        assert match is not None
        return round(float(match.group(1)) * 1000)



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


MAX_REPEAT = 1000   # rounds per config: more is a typo (and a plan too large to hold)


class RepeatPolicy(BaseModel):
    """How many times each config runs: `repeat: 3` (exactly 3), or adaptive,
    `repeat: {min: 3, max: 10, until: 2%}`: after `min` interleaved rounds, more rounds run
    until every config's 95% interval half-width is within `until` percent of its mean, or
    `max` rounds have run (Phoronix's dynamic run count, judged by intervals). Or
    `repeat: {until: decided, equivalence: 2%, max: 10}` (docs/decision.md): rounds of the
    configs whose comparison with their baseline is still undecided, from `min` (default 2)
    rounds to `max`, until each differs or is equivalent within `equivalence`."""

    model_config = ConfigDict(extra="forbid")
    min: int = Field(ge=1, le=MAX_REPEAT)
    max: int = Field(ge=1, le=MAX_REPEAT)
    # target half-width of the 95% interval, % of the mean; or "decided" (the decision rule)
    until: float | Literal["decided"] | None = None
    equivalence: float | None = None    # `until: decided`: the margin within which configs
                                        # count as equivalent, % (default 2%)
    # `until: decided`: tokens of a warm-up run before round 0, not measured (default 16;
    # 0: none): the first run would otherwise start colder than every later one
    warmup: int | None = Field(default=None, ge=0, le=MAX_REPEAT * 1000)

    @model_validator(mode="before")
    @classmethod
    def _from_count(cls, value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            return {"min": value, "max": value}
        if isinstance(value, dict) and value.get("until") == "decided" and "min" not in value:
            return {**value, "min": 2}      # a look needs two pairs
        return value

    @field_validator("until", "equivalence", mode="before")
    @classmethod
    def _percent(cls, value: Any) -> Any:
        if value == "decided":
            return value
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
        if self.until == "decided":
            if self.min < 2:
                raise ValueError("until: decided needs min of at least 2 (a look needs two "
                                 "pairs)")
            if self.equivalence is not None and not 0 < self.equivalence < 100:
                raise ValueError("equivalence must be a percentage between 0 and 100")
            return self
        if self.equivalence is not None:
            raise ValueError("equivalence goes with `until: decided`")
        if self.warmup is not None:
            raise ValueError("warmup goes with `until: decided`")
        if self.until is not None and not 0 < self.until < 100:
            raise ValueError("until must be a percentage between 0 and 100")
        if self.until is None and self.max != self.min:
            raise ValueError("give `until: X%` (the interval to reach) for adaptive repeats")
        return self

    @property
    def decided(self) -> bool:
        """`until: decided`: rounds until every comparison is decided (run/decided.py)."""
        return self.until == "decided"

    @property
    def target(self) -> float:
        """The interval target of `until: X%` (0 for the decision rule or a fixed count)."""
        return self.until if isinstance(self.until, float) else 0.0

    @property
    def adaptive(self) -> bool:
        """Rounds beyond `min` depend on the results (either rule)."""
        return self.max > self.min or self.decided


class SessionTurn(BaseModel):
    """One turn of a `session:` block (docs/sessions.md, "Live sessions"): the request the
    agent writes to the engine's stdin after `idle`, cancelled at `deadline` (from its send).
    None means the default: `n_predict` the matrix's `tokens`, `clear_kv` true for the first
    turn and false after (a chat goes on), `think` left to the engine, no deadline. A
    `prompt_file`'s text is read at load (config/session.py) and kept beside the turn."""

    model_config = ConfigDict(extra="forbid")
    prompt: str | None = None
    prompt_file: str | None = None
    n_predict: int | None = Field(default=None, gt=0, le=10_000_000)
    clear_kv: bool | None = None
    idle: float = 0.0
    think: bool | None = None
    deadline: float | None = None
    _file_text: str | None = PrivateAttr(default=None)

    @field_validator("idle", "deadline", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> float | None:
        return None if value is None else parse_duration(value)

    @field_validator("deadline")
    @classmethod
    def _positive(cls, value: float | None) -> float | None:
        if value is not None and value <= 0:
            raise ValueError("a deadline must be longer than 0 s")
        return value

    @field_validator("prompt")
    @classmethod
    def _no_nul(cls, value: str | None) -> str | None:
        if value is not None and "\0" in value:
            raise ValueError("contains a NUL byte")
        return value

    @model_validator(mode="after")
    def _one_prompt(self) -> "SessionTurn":
        if (self.prompt is None) == (self.prompt_file is None):
            raise ValueError("give the turn's `prompt` or `prompt_file` (one of them)")
        return self

    @property
    def text(self) -> str | None:
        """The prompt sent: `prompt`, else the text load_matrix read from `prompt_file`
        (None when it has not been read: a matrix parsed from stored text)."""
        return self.prompt if self.prompt is not None else self._file_text

    def with_file_text(self, text: str) -> None:
        """Keep `prompt_file`'s text (config/session.py read_session_files)."""
        self._file_text = text

    @property
    def file_text(self) -> str | None:
        """`prompt_file`'s text once read (None before)."""
        return self._file_text


class ConfigSpec(BaseModel):
    """A config in its mapping form, `name: {flags: "--flags", route_trace: true}`; the string
    form `name: "--flags"` stays the usual one. `route_trace` None follows the matrix's;
    `session` (turns) replaces the matrix's `session:` for this config."""

    model_config = ConfigDict(extra="forbid")
    flags: str = ""
    route_trace: bool | None = None
    session: list[SessionTurn] | None = Field(default=None, min_length=1)
