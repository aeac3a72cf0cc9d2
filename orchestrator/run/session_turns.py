"""A live session run's turns and status (docs/sessions.md, "Live sessions"): the engine's
parser says what each turn did (`RunRecord.turns`, from its BMOE_* lines); the agent's T lines
say when orch sent each request, when its end was seen, and whether it was cancelled; the
plan says what was asked (idle, clear_kv). This module puts the three together, one `Turn`
per request sent, and decides the run's status: ok only when every turn ended with its
BMOE_DONE (a cancelled turn included); a fatal BMOE_ERROR fails the run with its message.
"""
from __future__ import annotations

from typing import Any

from orchestrator.config.session import SessionRequest
from orchestrator.record import Turn
from orchestrator.run.stream import TurnEvent
from orchestrator.stats.status import Status

_ENDS = ("done", "error", "fatal")


def session_turns(parsed: list[Turn], events: list[TurnEvent],
                  requests: tuple[SessionRequest, ...]) -> list[Turn]:
    """One Turn per request sent (or parsed): the parser's figures, and from orch's side what
    the parser left empty: started_ms / ended_ms (the T lines' sent and end), idle_before_s and
    clear_kv (the plan), cancelled (a T cancel), error (a T error or fatal: the engine parser
    names its message, engines/bmoe_session.py; without one, "BMOE_ERROR")."""
    by_turn = {turn.turn: turn for turn in parsed}
    numbers = sorted({e.turn for e in events} | set(by_turn))
    asked = {request.turn: request for request in requests}
    turns = []
    for number in numbers:
        mine = [e for e in events if e.turn == number]
        turn = by_turn.get(number) or Turn(turn=number, request_id=number)
        sent = next((e.t_ms for e in mine if e.event == "sent"), None)
        end = next((e for e in mine if e.event in _ENDS), None)
        request = asked.get(number)
        update: dict[str, Any] = {}
        if turn.started_ms is None and sent is not None:
            update["started_ms"] = float(sent)
        if turn.ended_ms is None and end is not None:
            update["ended_ms"] = float(end.t_ms)
        if request is not None:
            if turn.idle_before_s is None:
                update["idle_before_s"] = request.idle_s
            if turn.clear_kv is None:
                update["clear_kv"] = request.clear_kv
            update["extra"] = {**turn.extra, "request": _asked(request)}
        if turn.cancelled is None and any(e.event == "cancel" for e in mine):
            update["cancelled"] = True
        if turn.error is None and end is not None and end.event != "done":
            update["error"] = "fatal BMOE_ERROR" if end.event == "fatal" else "BMOE_ERROR"
        turns.append(turn.model_copy(update=update))
    return turns


def stored_requests(requests: tuple[SessionRequest, ...]) -> list[dict[str, Any]]:
    """A session run's requests as its record keeps them (`RunRecord.extra["session"]`): each
    request as sent, with its idle time and deadline."""
    return [request.request() | {"idle_s": request.idle_s, "deadline_s": request.deadline_s}
            for request in requests]


def session_changed(earlier: Any, requests: tuple[SessionRequest, ...]) -> bool:
    """An earlier run of a cell (`--resume`) asked for another session than the cell does
    now: a one-shot run where the cell is a session (its argv has no `--session`) or the
    reverse, or other requests than its record kept. It is run again, as after a change of
    flags; a run that stored no requests yet (interrupted) is judged by its argv alone."""
    argv = getattr(earlier, "argv", None) or []
    if ("--session" in argv) != bool(requests):
        return True
    if not requests:
        return False
    try:
        stored = earlier.record.extra.get("session")
    except (AttributeError, ValueError):
        return False
    return stored is not None and stored != stored_requests(requests)


def _asked(request: SessionRequest) -> dict[str, Any]:
    """What the turn asked for, as stored with it (the prompt by its length: the matrix
    stored with the session has it)."""
    return {"n_predict": request.n_predict, "think": request.think,
            "deadline_s": request.deadline_s, "prompt_chars": len(request.prompt)}


def session_status(status: str, cause: str | None, events: list[TurnEvent],
                   turns: list[Turn], requests: tuple[SessionRequest, ...]
                   ) -> tuple[str, str | None]:
    """The run's status once its turns are known: a fatal BMOE_ERROR fails it with its
    message (whatever the engine's exit); an otherwise ok run fails when a turn ended with a
    recoverable error or never ended. A cancelled turn ended with its BMOE_DONE: ok."""
    errors = {turn.turn: turn.error for turn in turns if turn.error}
    fatal = next((e for e in events if e.event == "fatal"), None)
    if fatal is not None:
        message = errors.get(fatal.turn) or "no message"
        return Status.FAILED, f"fatal BMOE_ERROR in turn {fatal.turn}: {message}"
    if status != Status.OK:
        return status, cause
    done = {e.turn for e in events if e.event == "done"}
    for request in requests:
        if request.turn in errors:
            return Status.FAILED, f"turn {request.turn}: {errors[request.turn]}"
        if request.turn not in done:
            return Status.FAILED, (f"turn {request.turn} of {len(requests)} never ended "
                                   f"(no BMOE_DONE)")
    return status, cause
