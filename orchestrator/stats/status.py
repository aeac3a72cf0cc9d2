"""How a run ended: the one vocabulary of `run.status` (docs/architecture.md, "The store").

A `StrEnum`, so a member is the very string the store holds (`Status.OK == "ok"`) and a status
read back from any store, any version, compares and formats as before. Only `ok` runs take
part in a figure of a config; every other ended status is shown, daggered, and left out.
"""
from __future__ import annotations

from enum import StrEnum


class Status(StrEnum):
    RUNNING = "running"          # recording (or a controller died while it recorded)
    OK = "ok"                    # the engine ended with exit 0 and its X line arrived
    FAILED = "failed"            # non-zero exit, or could not start
    KILLED = "killed"            # a signal, with no evidence of memory exhaustion
    OOM = "oom"                  # killed, with the kernel's OOM line or free RAM below 3%
    TIMEOUT = "timeout"          # exceeded the matrix's per-cell timeout
    ABORTED = "aborted"          # stopped by the agent at the matrix's thermal ceiling
    INTERRUPTED = "interrupted"  # the stream ended without an X line (resumable)
    WARMUP = "warmup"            # a warm-up run that ended ok: kept, never measured

    @property
    def ended(self) -> bool:
        """Whether the run has ended (its figures are final)."""
        return self is not Status.RUNNING

    @property
    def counts(self) -> bool:
        """Whether the run takes part in its config's figures: ok runs only."""
        return self is Status.OK

    @classmethod
    def of(cls, value: str | None) -> Status | None:
        """A stored status as a member; None for NULL or a value this orch does not know
        (a newer orch's): such a run is shown as stored and counts for nothing."""
        try:
            return cls(value) if value is not None else None
        except ValueError:
            return None


# what a run that did not end ok may be resumed from (`orch run --resume`, the lab)
RESUMABLE = frozenset({Status.RUNNING, Status.INTERRUPTED})
