"""Engine adapters: build an engine's argv for a cell and turn its output into rows.

An adapter never talks to a device. The runner gives it the tagged lines the agent streamed
(C: a per-token CSV line, O: stdout, E: stderr) and stores what it returns: token rows as they
complete, and at the end one `RunRecord` (orchestrator/record.py) for the run as a whole.
"""
from __future__ import annotations

import abc
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from orchestrator.record import RunRecord


@dataclass
class TokenRow:
    """One generated token. The fields but `extra` are the store's token columns; anything else
    an engine reports per token goes to `extra` (e.g. the 22-column bmoe CSV's rss_mib, ...)."""

    step: int
    wall_ms: float | None = None
    io_ms: float | None = None
    compute_ms: float | None = None
    stall_ms: float | None = None
    mgmt_ms: float | None = None
    read_bytes: int | None = None
    cache_hit_pct: float | None = None
    majflt: float | None = None
    cpu_ms: float | None = None
    # which generate() of a session the token belongs to (the CSV's `turn` column, 1-based in
    # session mode); None for a one-shot run (docs/sessions.md)
    turn: int | None = None
    extra: dict[str, Any] | None = None


# The token columns, in the store's order (db/schema.py's token table has exactly these).
TOKEN_COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(TokenRow) if f.name != "extra")


@dataclass
class CellSpec:
    """What an adapter needs to build the command of one cell."""

    binary: str                    # path of the engine on the device
    model_path: str | None         # path of the model on the device (None for moe-probe)
    prompt: str
    tokens: int
    flags: list[str]               # the config's flags, already split shell-like
    csv_path: str                  # absolute path on the device for the per-token CSV
    extra: dict[str, Any] = field(default_factory=dict)
    # where the engine writes its `# route_trace v1` file (None: no trace); the runner fetches
    # it after the run (engines that can trace: config/matrix.py ROUTE_TRACE_ENGINES)
    route_trace_path: str | None = None

    def route_trace_argv(self) -> list[str]:
        """`--route-trace PATH` when the cell traces (bmoe-cli's flag, which moe-probe and
        llama-token share), else nothing."""
        return ["--route-trace", self.route_trace_path] if self.route_trace_path else []


class RunParser(abc.ABC):
    """Stateful parser for the lines of one run."""

    @abc.abstractmethod
    def feed(self, tag: str, text: str) -> list[TokenRow]:
        """Take one stream line's payload (tag C, O or E); return the token rows it completes."""

    @abc.abstractmethod
    def record(self) -> RunRecord:
        """What the run's output said as a whole, typed; may be called again after more lines.
        A run killed halfway still gets a record (complete=False, with what arrived)."""

    def warnings(self) -> list[str]:
        """Engine-reported warnings worth surfacing (e.g. O_DIRECT unsupported)."""
        return []

    def failure(self) -> str | None:
        """The engine's own one-line account of why it failed (e.g. bmoe's fatal BMOE_ERROR),
        which the runner makes the failed run's cause; None: it said nothing."""
        return None


class EngineAdapter(abc.ABC):
    name: str = "?"
    # Whether the engine writes a per-token CSV that the agent should tail.
    writes_csv: bool = True

    @abc.abstractmethod
    def build_argv(self, cell: CellSpec) -> list[str]:
        """The engine's argv, one element per argument, never joined into a shell string."""

    @abc.abstractmethod
    def new_parser(self, prompt: str | None = None) -> RunParser:
        """A parser for one run (feed() its lines, then record()); `prompt` lets it strip an
        echoed prompt from the text."""

    def version_argv(self, binary: str) -> list[str] | None:
        """A command that prints the engine's version, run once per device and binary when a
        run's own output does not name its build (None: the engine has no such command)."""
        return None

    def parse_version(self, output: str) -> str | None:
        """The build named in `version_argv`'s output (stdout and stderr together)."""
        return None

    def builtin_binary(self) -> Path | None:
        """A local file orch ships and pushes as this engine when the matrix names no binary."""
        return None
