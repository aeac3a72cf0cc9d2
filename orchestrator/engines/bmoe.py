"""Adapter for bmoe-cli (BigMoeOnEdge): argv building and per-run stream parsing."""
from __future__ import annotations

import re
from collections import deque
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from orchestrator.engines.base import CellSpec, EngineAdapter, RunParser, TokenRow
from orchestrator.engines.bmoe_format import BmoeCsvParser, parse_summary_lines
from orchestrator.engines.bmoe_session import SessionLines, session_fields
from orchestrator.record import RunRecord, trailer_fields

STDERR_TAIL = 50
# stdout is kept whole for the text and the summary lines, but a runaway engine must not be
# able to fill the controller's memory: beyond this many lines only the last ones are kept
# (the summary lines come last, so they survive).
MAX_STDOUT_LINES = 100_000
_WARNING = re.compile(r"warn|O_DIRECT.*(unsupported|not supported|fail)", re.IGNORECASE)


_NONE: list[TokenRow] = []


class BmoeRunParser(RunParser):
    """A bmoe run's lines: the CSV (token rows, preamble, trailers), stdout (summary lines;
    in session mode the BMOE_* lines, engines/bmoe_session.py) and stderr."""

    def __init__(self, prompt: str | None = None, expected_turns: int | None = None) -> None:
        self.csv = BmoeCsvParser()
        self.prompt = prompt
        self.session = SessionLines()
        # the requests a session run sends, when the caller knows it: fewer turns = incomplete
        self.expected_turns = expected_turns
        self._stdout: deque[str] = deque(maxlen=MAX_STDOUT_LINES)
        self._stderr: deque[str] = deque(maxlen=STDERR_TAIL)
        self._warnings: list[str] = []
        # feed("C", text) for the recorder's hot path: the row itself (or None), not a list
        self.feed_row = self.csv.feed
        # ... and as the tuple of the row's fields, for a recorder that only stores it
        self.feed_values = self.csv.feed_values

    def feed(self, tag: str, text: str) -> list[TokenRow]:
        if tag == "C":
            row = self.csv.feed(text)
            return _NONE if row is None else [row]
        if tag == "O":
            # BMOE_* lines (session mode, or --progress) are the session's, not summary text;
            # BMOE_PROGRESS, one per token, is counted only: the CSV carries the token rows
            if "BMOE_" not in text or not self.session.feed(text):
                self._stdout.append(text)
        elif tag == "E":
            self._stderr.append(text)
            if _WARNING.search(text) and len(self._warnings) < 20:
                self._warnings.append(text.strip())
        return []

    def record(self) -> RunRecord:
        """The last `# summary` trailer's figures, filled from the stdout summary lines where
        the trailer is missing (a killed run) or older than a key. extra: the raw `trailer`
        and the parsed summary `lines` (every figure they print, e.g. cpu_pct, mib_per_s).
        A session run (BMOE_* lines seen) is read from its turns instead (_session_record)."""
        lines = parse_summary_lines(self._stdout, prompt=self.prompt)
        text = lines.pop("text")
        settings = dict(self.csv.settings)
        errors = list(self.csv.finish())
        if self.session.seen:
            return self._session_record(lines, settings, errors)
        trailer = self.csv.trailers[-1] if self.csv.trailers else None
        return RunRecord(
            complete=self.csv.complete, errors=errors, settings=settings,
            text=text, stderr_tail=list(self._stderr), engine_build=_engine_build(settings),
            extra={"trailer": trailer, "lines": lines},
            **trailer_fields(trailer, lines, settings))

    def _session_record(self, lines: dict[str, Any], settings: dict[str, Any],
                        errors: list[str]) -> RunRecord:
        """A session run: its turns (one per BMOE_DONE), the run's figures over all of them
        (session_fields: tokens summed, prompt and prefill of the first turn), never the last
        turn's `# summary` alone; every trailer is kept in extra.trailers, one per turn."""
        session = self.session
        turns = session.turns()
        if session.fatal is not None:
            errors.insert(0, f"engine fatal error: {session.fatal}")
        errors += session.errors
        streaming = trailer_fields(None, None, settings)["streaming"]
        fields = session_fields(turns)
        if streaming is None and fields.get("read_mib"):
            streaming = True
        text = "\n\n".join(t.text for t in turns if t.text) or None
        return RunRecord(
            complete=session.complete(self.expected_turns), errors=errors, settings=settings,
            text=text, stderr_tail=list(self._stderr), engine_build=_engine_build(settings),
            streaming=streaming, turns=turns,
            extra={"trailer": None, "trailers": list(self.csv.trailers), "lines": lines,
                   "session": {"ready": session.ready}},
            **fields)

    def failure(self) -> str | None:
        """The engine's own account of why the run failed: a fatal BMOE_ERROR's message."""
        fatal = self.session.fatal
        return None if fatal is None else f"engine fatal error: {fatal}"

    def warnings(self) -> list[str]:
        return list(self._warnings)


def summary_record(lines: list[str]) -> RunRecord:
    """A run known only from its stdout summary lines (a matrix driver's `==== NAME ====`
    section, no per-token CSV): complete when the `generation:` line is there, since the engine
    prints it once generation finished; no token rows, so tok/s is the engine's own."""
    parsed = parse_summary_lines(lines)
    text = parsed.pop("text")
    done = "generation" in parsed
    return RunRecord(complete=done, errors=[] if done else ["no 'generation:' summary line"],
                     text=text, extra={"trailer": None, "lines": parsed, "summary_only": True},
                     **trailer_fields(None, parsed, {}))


def _engine_build(settings: dict[str, object]) -> str | None:
    """The preamble's `engine=` (bmoe preamble v2; llama-token adds its bindings' version)."""
    engine = settings.get("engine")
    if engine is None:
        return None
    bindings = settings.get("llama_cpp_python")
    return f"{engine} (llama-cpp-python {bindings})" if bindings is not None else str(engine)


class BmoeOptions(BaseModel):
    """bmoe-cli reads no engine_options: any key is a mistake."""

    model_config = ConfigDict(extra="forbid")


def strict_options(engine: str, model: type[BaseModel],
                   options: dict[str, Any] | None) -> BaseModel:
    """`options` validated against `model` (extra="forbid"); a ValueError names each bad key
    as `engine_options.KEY: ...`, an unknown one with the keys the engine reads."""
    try:
        return model.model_validate(options or {})
    except ValidationError as exc:
        known = ", ".join(model.model_fields) or "none"
        problems = []
        for err in exc.errors():
            loc = ".".join(str(p) for p in err["loc"])
            msg = err["msg"].removeprefix("Value error, ")
            if err["type"] == "extra_forbidden":
                msg = f"unknown option for {engine} (known: {known})"
            problems.append(f"engine_options{'.' + loc if loc else ''}: {msg}")
        raise ValueError("; ".join(problems)) from None


class BmoeAdapter(EngineAdapter):
    name = "bmoe"
    writes_csv = True
    options_model: type[BaseModel] = BmoeOptions   # the engine_options this engine reads

    def __init__(self, options: dict[str, Any] | None = None) -> None:
        self.options = strict_options(self.name, self.options_model, options)

    def build_argv(self, cell: CellSpec) -> list[str]:
        if not cell.model_path:
            raise ValueError("bmoe-cli needs a model path (-m)")
        return [cell.binary, "-m", cell.model_path, "-p", cell.prompt, "-n", str(cell.tokens),
                *cell.flags, "--csv", cell.csv_path, *cell.route_trace_argv()]

    def new_parser(self, prompt: str | None = None) -> RunParser:
        return BmoeRunParser(prompt=prompt)
