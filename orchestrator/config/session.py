"""A matrix's `session:` turns as the requests a session cell sends (docs/sessions.md, "Live
sessions"): which configs run as sessions (a config's own `session:` wins over the matrix's),
the turns' prompt files read at load, and each turn resolved into one `SessionRequest`, the
JSON line bmoe-cli's session protocol reads on stdin plus its idle time and deadline. The
plan carries the requests (config/plan.py `Cell.session`), the runner pushes them to the job
directory (run/session_job.py), and the agent writes them (docs/agent-protocol.md,
"Sessions")."""
from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from orchestrator.config.local_files import MAX_PROMPT_BYTES, NotRegular, read_regular
from orchestrator.config.matrix_values import ConfigSpec, SessionTurn

# Engines whose `--session` mode speaks the line protocol: bmoe-cli and orch's moe-probe.
SESSION_ENGINES = ("bmoe", "moe-probe")


@dataclass(frozen=True)
class SessionRequest:
    """One turn of a session cell, resolved: what is sent, and when."""

    turn: int                  # 1-based, the request's `id`
    prompt: str
    n_predict: int
    clear_kv: bool
    idle_s: float              # the wait before it is sent, after the previous turn ended
    think: bool | None = None  # None: not sent (the engine's default)
    deadline_s: float | None = None   # `cancel` this long after the send (None: never)

    def request(self) -> dict[str, Any]:
        """The `generate` request (bmoe-cli session protocol)."""
        body: dict[str, Any] = {"cmd": "generate", "id": self.turn, "prompt": self.prompt,
                                "n_predict": self.n_predict, "clear_kv": self.clear_kv}
        if self.think is not None:
            body["think"] = self.think
        return body

    def agent_line(self) -> str:
        """The line of the job's `session` file: IDLE_MS, DEADLINE_MS (0: none), the request
        as one JSON line (a newline in a prompt is escaped, never a line break)."""
        deadline_ms = round(self.deadline_s * 1000) if self.deadline_s else 0
        body = json.dumps(self.request(), ensure_ascii=False, separators=(",", ":"))
        return f"{round(self.idle_s * 1000)}\t{deadline_ms}\t{body}"


class SessionSource(Protocol):
    """What the resolution reads of a matrix (config/matrix.py Matrix is one)."""

    @property
    def session(self) -> list[SessionTurn] | None: ...

    @property
    def configs(self) -> Any: ...

    @property
    def tokens(self) -> int: ...

    @property
    def engine(self) -> str: ...

    @property
    def timeout(self) -> float: ...


def config_session(matrix: SessionSource, config: str) -> list[SessionTurn] | None:
    """The turns config `config` (as expanded: `NAME`, `NAME+GRID`, or a grid-only name) runs:
    its own `session:`, else the matrix's; None for a one-shot config."""
    configs = matrix.configs or {}
    spec = configs.get(config, configs.get(config.partition("+")[0]))
    if isinstance(spec, ConfigSpec) and spec.session is not None:
        return spec.session
    return matrix.session


def resolve(matrix: SessionSource, turns: Sequence[SessionTurn]) -> tuple[SessionRequest, ...]:
    """The turns as requests, defaults filled in; ValueError when a prompt file's text was
    never read (a matrix parsed back from stored text has only the file's name)."""
    requests = []
    for i, turn in enumerate(turns, start=1):
        text = turn.text
        if text is None:
            raise ValueError(f"session turn {i}: prompt_file {turn.prompt_file} was not read")
        requests.append(SessionRequest(
            turn=i, prompt=text, n_predict=turn.n_predict or matrix.tokens,
            clear_kv=(i == 1) if turn.clear_kv is None else turn.clear_kv,
            idle_s=turn.idle, think=turn.think, deadline_s=turn.deadline))
    return tuple(requests)


def all_sessions(matrix: SessionSource) -> list[tuple[tuple[str | int, ...], list[SessionTurn]]]:
    """Every `session:` block of the matrix with its key path (the matrix's, each config's)."""
    blocks: list[tuple[tuple[str | int, ...], list[SessionTurn]]] = []
    if matrix.session is not None:
        blocks.append((("session",), matrix.session))
    for name, spec in (matrix.configs or {}).items():
        if isinstance(spec, ConfigSpec) and spec.session is not None:
            blocks.append((("configs", name, "session"), spec.session))
    return blocks


def read_session_files(matrix: SessionSource, base: Path) -> list[tuple[tuple[str | int, ...], str]]:
    """Read each turn's `prompt_file` (relative to the matrix's directory) into the turn;
    the problems as (key path, message). A session prompt travels as JSON, so it must be
    UTF-8 (a one-shot prompt file may be any bytes: it is an argv element)."""
    problems: list[tuple[tuple[str | int, ...], str]] = []
    for loc, turns in all_sessions(matrix):
        for i, turn in enumerate(turns):
            if turn.prompt_file is None:
                continue
            where = (*loc, i, "prompt_file")
            path = base / turn.prompt_file
            try:
                raw = read_regular(path, MAX_PROMPT_BYTES)
            except NotRegular as exc:
                problems.append((where, f"{path}: {exc}"))
                continue
            except OSError as exc:
                problems.append((where, f"cannot read {path}: {exc.strerror}"))
                continue
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                problems.append((where, f"{path} is not UTF-8 (a session prompt is sent as "
                                        f"JSON)"))
                continue
            if "\0" in text:
                problems.append((where, f"{path} contains a NUL byte"))
                continue
            turn.with_file_text(text)
    return problems


def session_prompt_texts(matrix: SessionSource) -> dict[str, str]:
    """{prompt_file: text} of every turn whose prompt file was read (read_session_files): what
    a lab batch stores so a worker on another host sends the same turns."""
    return {turn.prompt_file: text for _, turns in all_sessions(matrix) for turn in turns
            if turn.prompt_file is not None and (text := turn.file_text) is not None}


def apply_session_prompt_texts(matrix: SessionSource, texts: dict[str, str]) -> None:
    """The prompt files' texts as stored with a lab batch, into the matrix's turns (files the
    batch did not store stay unread: planning says so)."""
    for _, turns in all_sessions(matrix):
        for turn in turns:
            if turn.prompt_file is not None and turn.prompt_file in texts:
                turn.with_file_text(texts[turn.prompt_file])


def session_problems(matrix: SessionSource) -> list[tuple[tuple[str | int, ...], str]]:
    """A `session:` block needs an engine that speaks the session protocol, and idle times
    that leave the cell's timeout room to run the turns (Matrix's cross-key rules)."""
    problems: list[tuple[tuple[str | int, ...], str]] = []
    for loc, turns in all_sessions(matrix):
        if matrix.engine not in SESSION_ENGINES:
            problems.append((loc, (f"engine {matrix.engine!r} has no session mode (only "
                                   f"{', '.join(SESSION_ENGINES)} speak its protocol)")))
            continue
        idle = sum(turn.idle for turn in turns)
        if matrix.timeout and idle >= matrix.timeout:
            problems.append((loc, (f"the turns' idle times add up to {idle:g} s, not less "
                                   f"than the cell timeout ({matrix.timeout:g} s)")))
    return problems
