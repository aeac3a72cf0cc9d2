"""Matrix files: the YAML a user writes to describe a benchmark sweep, validated with pydantic.

About 490 lines on purpose: the model and its cross-key rules (one model_validator, so every
rule reports its key path and line together, grid-built names and prompt bounds included) are
one concern; value types live in matrix_values.py, the configs' expansion in configs.py, a
stored matrix read back in stored_matrix.py, the checks of local files in local_files.py, the
`session:` rules and prompt files in session.py and the notes' model in notes.py."""
from __future__ import annotations

import hashlib
import re
import shlex
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails

from orchestrator.config.configs import expand_configs, flag_value
from orchestrator.config.local_files import (
    MAX_PROMPT_BYTES,
    NotRegular,
    prompt_too_long,
    push_problem,
    read_regular,
)
from orchestrator.config.matrix_values import (
    Abort,
    BinarySpec,
    ConfigSpec,
    Cooldown,
    ModelFile,
    RepeatPolicy,
    SessionTurn,
    parse_duration,
)
from orchestrator.config.notes import Notes
from orchestrator.config.probes import load_probes
from orchestrator.config.quality import QualitySpec
from orchestrator.config.session import read_session_files, session_problems
from orchestrator.config.yamlfile import (
    Problems,
    errors_at,
    line_of,
    load_yaml,
    validate,
)
from orchestrator.errors import ConfigError

# The config name rule, a FULL match (`_NAME.fullmatch`: `$` with re.match would let "x\n" by):
# written names, and the names orch builds from `grid` values, which are printed and stored.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.=,+-]*")
NAME_RULE = "use letters, digits and . _ - = , + only"
MAX_TOKENS = 10_000_000         # tokens per cell: more is a typo
MAX_SEED = 2**63 - 1            # the store keeps the seed in a 64-bit integer column
MAX_CELLS = 1_000_000           # cells a matrix may plan at all (beyond: refused at load)
ASK_CELLS = 1_000               # `orch run` asks for --yes above this many cells
# Engines that write a `# route_trace v1` file when given `--route-trace PATH` (docs/routes.md §1):
# bmoe-cli itself, and orch's moe-probe and llama-token.
ROUTE_TRACE_ENGINES = ("bmoe", "llama-token", "moe-probe")
NUL_PROMPT = ("contains a NUL byte, which no argv element can carry (every other byte, CR "
              "included, reaches the engine as written)")


class Matrix(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    description: str | None = None
    title: str | None = None       # the report's title (else "Benchmark report: NAME")
    engine: str
    binary: BinarySpec | None = None
    # llama.cpp builds as one more grid dimension (`[llama.cpp@0.3.30, llama.cpp@0.3.36]`):
    # every config runs once per build, named `CONFIG@VERSION`, with that build's cached binary
    builds: list[str] = Field(default_factory=list)
    models: dict[str, str | ModelFile] = Field(default_factory=dict)
    prompt: str | None = None
    prompt_file: str | None = None
    tokens: int = Field(default=64, gt=0, le=MAX_TOKENS)
    configs: dict[str, str | ConfigSpec] = Field(default_factory=dict)
    grid: dict[str, Annotated[list[str | int | float | bool], Field(min_length=1)]] = \
        Field(default_factory=dict)
    repeat: RepeatPolicy = Field(default_factory=lambda: RepeatPolicy(min=1, max=1))
    order: Literal["as-written", "interleaved", "shuffled"] = "as-written"
    seed: int | None = Field(default=None, ge=0, le=MAX_SEED)
    cooldown: Cooldown = Field(default_factory=Cooldown)
    abort: Abort | None = None  # a thermal ceiling in flight: the run ends `aborted`
    timeout: float = 600.0      # per cell, seconds (sub-second allowed); 0 = no timeout
    env: dict[str, str] = Field(default_factory=dict)
    # the config the others are compared with: one name for every model, or model -> config;
    # default: the first config
    baseline: str | dict[str, str] | None = None
    labels: dict[str, str] = Field(default_factory=dict)   # config (or model) -> its label
    # A/B pairs that run back to back in every repeat, so each comparison sees the same
    # device state: [[baseline, candidate], ...]
    pairs: list[Annotated[list[str], Field(min_length=2)]] = Field(default_factory=list)
    sample_interval: float = 1.0
    engine_options: dict[str, Any] = Field(default_factory=dict)
    path_check: Literal["warn", "refuse", "off"] = "warn"  # model paths vs streaming (pathcheck.py)
    route_trace: bool = False      # every config writes a route trace (a config's own value wins)
    quality: QualitySpec | None = None   # quality probes beside the cells (config/quality.py, run/quality.py)
    # per-token statistics over each run's tokens after its first `trim` (`orch table --trim`
    # wins; stats/trim.py)
    trim: int = Field(default=0, ge=0, strict=True)
    # markdown printed beside the tables they concern (session, per model, per config)
    notes: Notes | None = None
    # a live session: the turns every config runs through the engine's session protocol
    # (a config's own `session:` wins; config/session.py, docs/sessions.md)
    session: list[SessionTurn] | None = Field(default=None, min_length=1)

    @field_validator("name")
    @classmethod
    def _name_ok(cls, value: str) -> str:
        if not _NAME.fullmatch(value):
            raise ValueError(NAME_RULE)
        return value

    @field_validator("binary", mode="before")
    @classmethod
    def _cached_build(cls, value: Any, info: Any) -> Any:
        """`binary: {build: llama.cpp@V}`: the llama.cpp build cache's binary of version V
        (`orch engines build llama.cpp --version V`) for this engine."""
        if not (isinstance(value, dict) and "build" in value):
            return value
        if (info.context or {}).get("stored"):
            # a stored session's matrix says what it ran, on any machine that reads it: the
            # build, not this machine's cache path (the run rows keep the path that ran)
            return {"device": f"build {value['build']}"}
        from orchestrator.tools.llamacpp_build import cached_binary

        return {"device": cached_binary(str(value["build"]), info.data.get("engine"))}

    @field_validator("builds")
    @classmethod
    def _builds(cls, value: list[str], info: Any) -> list[str]:
        """Each entry names a llama.cpp cache version this engine has a binary in (whether it
        is built is load_matrix's question: a stored matrix still reads without the cache)."""
        from orchestrator.tools.llamacpp_build import cached_binary

        seen: set[str] = set()
        for spec in value:
            cached_binary(spec, info.data.get("engine"))
            if spec in seen:
                raise ValueError(f"{spec} is named twice")
            seen.add(spec)
        return value

    @field_validator("path_check", mode="before")
    @classmethod
    def _bare_off(cls, value: Any) -> Any:
        return "off" if value is False else value  # YAML 1.1 reads a bare `off` as false

    @field_validator("timeout", "sample_interval", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> float:
        return parse_duration(value)

    @field_validator("sample_interval")
    @classmethod
    def _interval(cls, value: float) -> float:
        if value < 0.01:
            raise ValueError("at least 0.01 s (10ms) between samples")
        return value

    @field_validator("prompt")
    @classmethod
    def _prompt_bytes(cls, value: str | None) -> str | None:
        if value is not None and "\0" in value:
            raise ValueError(NUL_PROMPT)
        too_long = prompt_too_long(len(value.encode("utf-8", "surrogateescape"))) \
            if value is not None else None
        if too_long:
            raise ValueError(too_long)
        return value

    @field_validator("configs", mode="before")
    @classmethod
    def _config_forms(cls, value: Any) -> Any:
        """A config is a flag string or a ConfigSpec mapping. Checked here, one form per value,
        so an error reads `configs.NAME: expected a string` or `configs.NAME.KEY: ...` rather
        than one error per form the value is not."""
        if not isinstance(value, dict):
            return value
        out: dict[Any, Any] = {}
        problems: list[InitErrorDetails] = []
        for name, item in value.items():
            if isinstance(item, dict):
                try:
                    item = ConfigSpec.model_validate(item)
                except ValidationError as exc:
                    for e in exc.errors(include_url=False):
                        detail = InitErrorDetails(type=e["type"], loc=(name, *e["loc"]),
                                                  input=e["input"])
                        if "ctx" in e:
                            detail["ctx"] = e["ctx"]
                        problems.append(detail)
            elif not isinstance(item, (str, ConfigSpec)):
                problems.append(InitErrorDetails(type="string_type", loc=(name,), input=item))
            out[name] = item
        if problems:
            raise ValidationError.from_exception_data("configs", problems)
        return out

    @field_validator("configs")
    @classmethod
    def _config_names(cls, value: dict[str, str | ConfigSpec]) -> dict[str, str | ConfigSpec]:
        for name in value:
            if not _NAME.fullmatch(str(name)):
                raise ValueError(f"config name {name!r}: {NAME_RULE}")
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
    def _consistent(self) -> Matrix:
        """The rules that relate keys to each other, each error at the key it is about."""
        problems: Problems = []
        if self.prompt is not None and self.prompt_file is not None:
            problems.append((("prompt_file",), "give `prompt` or `prompt_file`, not both"))
        if self.builds and self.binary is not None:
            problems.append((("builds",), ("give `builds:` or `binary:`, not both (each "
                                           "build names its own binary)")))
        if self.builds and self.quality is not None:
            problems.append((("builds",), ("quality probes do not run per build yet: drop "
                                           "`quality:` or `builds:`")))
        if not self.configs and not self.grid:
            problems.append(((), "give at least one of `configs` or `grid`"))
        elif self.planned_cells() > MAX_CELLS:
            problems.append((("grid",) if self.grid else ("configs",),
                             (f"plans {self.planned_cells():,} cells (configs x grid x models "
                              f"x repeat); at most {MAX_CELLS:,}")))
        else:
            problems += _grid_names(self) or _duplicate_config_names(self)
            problems += _flag_strings(self)
        if not problems:
            names = [name for name, _ in expand_configs(self)]
            problems += _baseline_and_pairs(self, names)
            problems += _route_trace_engine(self)
            problems += session_problems(self)
        if problems:
            raise errors_at(self, problems)
        return self

    def planned_cells(self) -> int:
        """How many cells the matrix plans at most (repeat.max rounds), by arithmetic: a grid
        too large to expand is refused before it is expanded."""
        grid = 1
        for values in self.grid.values():
            grid *= len(values)
        return (max(1, len(self.configs)) * grid * max(1, len(self.models))
                * max(1, len(self.builds)) * self.repeat.max)

    def device_model_paths(self) -> dict[str, str]:
        """`models:` as name -> path on the device, for a matrix run/model_push.py prepared
        (it puts each `{local: FILE}` model's device path in); ValueError before that."""
        paths = {name: spec for name, spec in self.models.items() if isinstance(spec, str)}
        if len(paths) != len(self.models):
            raise ValueError("models: a {local: FILE} model is not pushed yet "
                             "(run/model_push.py prepare_models)")
        return paths

    def build_binaries(self) -> dict[str, str]:
        """`builds:` as version -> the build cache's binary for this engine, in the order
        written (empty without `builds:`)."""
        from orchestrator.tools.llamacpp_build import cached_binary

        return {spec.partition("@")[2]: cached_binary(spec, self.engine) for spec in self.builds}

    def config_names(self) -> list[str]:
        return [name for name, _ in expand_configs(self)]

    def baseline_for(self, model: str) -> str:
        """The config `model`'s A/B deltas are taken against (never another model's runs)."""
        if isinstance(self.baseline, dict) and model in self.baseline:
            chosen = self.baseline[model]
        elif isinstance(self.baseline, str):
            chosen = self.baseline
        else:
            chosen = self.config_names()[0]
        builds = list(self.build_binaries())
        return f"{chosen}@{builds[0]}" if builds else chosen   # `builds:`: on the first build

    def label(self, config: str) -> str:
        """A config's human-readable label (`labels:`), else its name; a `builds:` cell's
        label is its config's, then `@VERSION`."""
        base, at, build = config.rpartition("@")
        if at and build in self.build_binaries() and base in self.labels:
            return f"{self.labels[base]}@{build}"
        return self.labels.get(config, config)


def _flag_strings(matrix: Matrix) -> Problems:
    """Every flag string split now, as the runner will split it: an unbalanced quote is a
    load error at its key, not a traceback after the earlier cells ran."""
    problems: Problems = []
    for name, spec in matrix.configs.items():
        flags = spec.flags if isinstance(spec, ConfigSpec) else spec
        loc: tuple[str | int, ...] = ("configs", name, "flags") if isinstance(spec, ConfigSpec) \
            else ("configs", name)
        problems += [(loc, message) for message in flag_problems(flags)]
    for flag, values in matrix.grid.items():   # grid values are quoted by orch: only NUL
        problems += [(("grid", flag, j), "contains a NUL byte, which no argv element can carry")
                     for j, value in enumerate(values) if "\0" in f"{flag}{value}"]
    return problems


def flag_problems(flags: str) -> list[str]:
    """What is wrong with one flag string (empty: it splits into argv elements)."""
    if "\0" in flags:
        return ["contains a NUL byte, which no argv element can carry"]
    try:
        shlex.split(flags)
    except ValueError as exc:   # "No closing quotation", "No escaped character"
        return [f"cannot be split into flags: {str(exc).lower()} in {flags!r}"]
    return []


def _route_trace_engine(matrix: Matrix) -> Problems:
    """`route_trace: true` where the engine cannot write a trace: refused at the key that asks."""
    if matrix.engine in ROUTE_TRACE_ENGINES:
        return []
    message = (f"engine {matrix.engine!r} cannot write a route trace (only "
               f"{', '.join(ROUTE_TRACE_ENGINES)} can)")
    asked: Problems = [(("route_trace",), message)] if matrix.route_trace else []
    asked += [(("configs", name, "route_trace"), message) for name, spec in matrix.configs.items()
              if isinstance(spec, ConfigSpec) and spec.route_trace]
    return asked


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
                problems.append((("baseline", model), (f"{model!r} is not one of the models "
                                                       f"({', '.join(sorted(models))})")))
            elif config not in known:
                problems.append((("baseline", model), f"{config!r} {_one_of(names)}"))
    elif matrix.baseline is not None and matrix.baseline not in known:
        problems.append((("baseline",), f"{matrix.baseline!r} {_one_of(names)}"))
    for config in matrix.labels:
        if config not in known and config not in matrix.models:   # a model's label: headings
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


def _grid_names(matrix: Matrix) -> Problems:
    """The config names built from `grid` (`FLAG=VALUE`, joined by , and +) follow the name
    rule as written ones do: a value with a space, a slash or a control character (an escape
    sequence would reach every terminal that prints the name) is refused at its key."""
    problems: Problems = []
    for flag, values in matrix.grid.items():
        for j, value in enumerate(values):
            part = flag_value(flag, value)[0]
            if not _NAME.fullmatch(part):
                problems.append((("grid", flag, j),
                                 f"gives the config name {part!r}: {NAME_RULE}"))
    return problems


def _duplicate_config_names(matrix: Matrix) -> Problems:
    """Two cells with one config name would share a cell key (resume, reports, A/B would mix
    them): two grid values that name alike (`1` and "1", `true` and "on", a repeat), or, in
    the rarer case, names put together from `configs` and `grid` that meet."""
    problems: Problems = []
    for flag, values in matrix.grid.items():
        first: dict[str, int] = {}
        for j, value in enumerate(values):
            part = flag_value(flag, value)[0]
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
    _local_files_regular(path, node, matrix)
    if matrix.prompt_file is not None:
        prompt_text = read_prompt_file(path, node, matrix.prompt_file)
    else:
        prompt_text = matrix.prompt or ""
    session_problems = read_session_files(matrix, path.parent)
    if session_problems:
        raise ConfigError("\n".join(f"{path}:{line_of(node, loc) or 1}: {'.'.join(map(str, loc))}: "
                                     f"{message}" for loc, message in session_problems))
    if matrix.quality is not None:   # a bad probe line: file:line, exit 2, nothing written
        load_probes(matrix.quality, path)
    for i, (version, binary) in enumerate(matrix.build_binaries().items()):
        if not Path(binary).is_file():
            raise ConfigError(f"{path}:{line_of(node, ('builds', i)) or 1}: builds: "
                              f"llama.cpp@{version} is not built ({binary} is missing): run "
                              f"`orch engines build llama.cpp --version {version}`")
    return LoadedMatrix(matrix=matrix, path=str(path), text=text,
                        sha256=hashlib.sha256(text.encode()).hexdigest(), prompt_text=prompt_text)


def _local_files_regular(path: Path, node: Any, matrix: Matrix) -> None:
    """Every local file the matrix pushes is a regular file once links are followed (a FIFO
    or /dev/zero would hang the push and the hash): one `file:line: key: PATH is not a
    regular file (KIND)` line per offender. A `{local: FILE}` model that does not exist is
    refused here too (`PATH does not exist`), before the store is opened; a missing local
    binary is still the push's to report."""
    named: list[tuple[tuple[str, ...], str, bool]] = [
        (("models", name, "local"), spec.local, True) for name, spec in matrix.models.items()
        if isinstance(spec, ModelFile)]
    if matrix.binary is not None and matrix.binary.local is not None:
        named.append((("binary", "local"), matrix.binary.local, False))
    messages = []
    for loc, local, must_exist in named:
        problem = push_problem(path.parent / local, must_exist)
        if problem is not None:
            messages.append(f"{path}:{line_of(node, loc) or 1}: {'.'.join(loc)}: {problem}")
    if messages:
        raise ConfigError("\n".join(messages))


def read_prompt_file(path: Path, node: Any, name: str) -> str:
    """The prompt file's bytes as they are: no newline translation (CR and CRLF reach the
    engine), any encoding (bytes that are not UTF-8 are carried as surrogate escapes and
    written back as the same bytes); only NUL is refused, and what is no regular file or is
    too long for one argv element (refused from its size, unread)."""
    prompt_path = path.parent / name
    where = f"{path}:{line_of(node, ('prompt_file',)) or 1}: prompt_file"
    try:
        raw = read_regular(prompt_path, MAX_PROMPT_BYTES)
    except NotRegular as exc:
        if exc.size is not None:
            raise ConfigError(f"{where}: {prompt_path}: {prompt_too_long(exc.size)}") from None
        raise ConfigError(f"{where}: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read {prompt_path}: {exc.strerror}") from None
    if b"\0" in raw:
        raise ConfigError(f"{where}: {prompt_path} {NUL_PROMPT}")
    return raw.decode("utf-8", errors="surrogateescape")
