"""The one path by which orch reads a file from a device (docs/reliability.md, "Files fetched
from a device are checked and bounded").

A device file is whatever the engine (or anything else on the device) left at the path: a
symlink to /dev/zero would be read until the controller runs out of memory, a FIFO would block
the read for ever. So one command on the device checks the path first, without opening it:
`[ -f ]` (links followed) and no FIFO, character or block device; then its size against the
bound of its kind; then streams at most that bound plus one byte (`head -c`), under a timeout.
A refusal, a file over its bound or a timeout is one FetchRefused / CommandTimedOut line that
the caller stores on the run; nothing here hangs or holds more than the bound.
Transport.get_bytes stays the transports' raw primitive; orch's own reads come through here.
The per-token CSV and the engine's stdout and stderr are not fetched: the agent drains them on
the device into the spool (its CSV only once `[ -f ]` holds, so never a FIFO or /dev/zero),
and the spool reaches orch line by line (`attach`), each line held to SPOOL_LINE.
"""
from __future__ import annotations

from dataclasses import dataclass

from orchestrator.line_bound import MAX_LINE
from orchestrator.transports.base import (
    CommandResult,
    CommandTimedOut,
    RemoteFileNotFound,
    Transport,
    TransportError,
)

MiB = 1 << 20


@dataclass(frozen=True)
class FileKind:
    """What a fetched file is, and the most of it orch will hold (with the reason)."""

    name: str
    max_bytes: int
    reason: str


# A route trace is one row per token and MoE layer (docs/routes.md): 100,000 tokens x 64
# layers x ~30 bytes is ~190 MiB, far beyond any run orch measures on a phone.
ROUTE_TRACE = FileKind("route trace", 256 * MiB,
                       "one row per token and layer; 100,000 tokens of a 64-layer model fit")
# Device facts (the agent's F lines): a few hundred short lines.
FACTS = FileKind("facts", 1 * MiB, "a few hundred key=value lines")
# One line of a job's spool, which the agent streams (`attach`) rather than orch fetching it
# whole: the spool itself is consumed line by line into the store, so only a line is held,
# and an engine printing without newlines must not make that line the controller's memory.
# The bound is import's too: one owner, orchestrator/line_bound.py.
SPOOL_LINE = FileKind("spool line", MAX_LINE, "an engine's output line; a longer one is cut")

# The device streams at least this fast (adb over USB 2, ssh over a slow Wi-Fi); with the
# fixed part, the timeout of a fetch of `max_bytes`.
FETCH_RATE = 2 * MiB      # bytes/s
FETCH_BASE_S = 30.0

# On the device: $1 the path, $2 the bound. Exit 3: nothing there (a dangling link included);
# 4: not a regular file (stderr: what it is); 5: over the bound (stderr: its size); else the
# first bound+1 bytes on stdout. The checks never open the path: a FIFO is not waited on.
# POSIX sh + toybox (mksh), dash, bash.
FETCH_SCRIPT = r'''p=$1 max=$2
[ -e "$p" ] || exit 3
if [ ! -f "$p" ] || [ -p "$p" ] || [ -c "$p" ] || [ -b "$p" ]; then
  k=$(stat -L -c %F -- "$p" 2>/dev/null)
  echo "${k:-not a regular file}" >&2; exit 4
fi
s=$(stat -L -c %s -- "$p" 2>/dev/null)
case $s in ''|*[!0-9]*) ;; *) [ "$s" -le "$max" ] || { echo "$s" >&2; exit 5; } ;; esac
exec head -c "$((max + 1))" -- "$p"'''


# On the device: $1 the bound, the rest a command whose output orch reads whole (the agent's
# facts, which quote device files and properties): at most bound+1 bytes of it pass; its exit
# status follows on stderr as the last line `orch-rc N` (a pipeline's own is head's).
BOUNDED_OUTPUT = r'''max=$1; shift
{ "$@"; echo "orch-rc $?" >&2; } | head -c "$((max + 1))"'''


class FetchRefused(TransportError):
    """A device file orch will not read: not a regular file, or larger than its kind's bound."""


def fetch_timeout(kind: FileKind) -> float:
    """How long a fetch of `kind` may take: FETCH_BASE_S plus its bound at FETCH_RATE."""
    return FETCH_BASE_S + kind.max_bytes / FETCH_RATE


def fetch_file(transport: Transport, remote: str, kind: FileKind,
               timeout: float | None = None) -> bytes:
    """The whole of the device file `remote`, checked and bounded as its `kind` says.
    RemoteFileNotFound when nothing is there; FetchRefused when it is no regular file or over
    the bound; CommandTimedOut past the timeout (default fetch_timeout(kind)); LinkLost as
    any command (the caller's retry_link rides it out)."""
    path = transport._path(remote)   # noqa: SLF001 - the transport's own view of a relative path
    limit = fetch_timeout(kind) if timeout is None else timeout
    try:
        result = transport.run([transport.shell, "-c", FETCH_SCRIPT, "sh", path,
                                str(kind.max_bytes)], timeout=limit)
    except CommandTimedOut:
        raise CommandTimedOut(f"{transport.name}: the fetch of {kind.name} {remote} did not "
                              f"finish within {limit:g} s") from None
    said = (result.stderr or result.stdout).decode(errors="replace").strip()[:200]
    if result.rc == 3:
        raise RemoteFileNotFound(f"{transport.name}: reading {remote}: no such file")
    if result.rc == 4:
        raise FetchRefused(f"{transport.name}: {remote} is not a regular file "
                           f"({said or 'unknown kind'}): not read")
    if result.rc == 5 or (result.rc == 0 and len(result.stdout) > kind.max_bytes):
        size = f"{said} bytes" if result.rc == 5 and said.isdigit() else "more"
        raise FetchRefused(f"{transport.name}: {remote} is {size}, over the {kind.name} bound "
                           f"of {kind.max_bytes // MiB} MiB ({kind.reason}): not read")
    if result.rc != 0:
        raise TransportError(f"{transport.name}: reading {remote} failed (rc {result.rc}): "
                             f"{said}")
    return result.stdout


def bounded_output(transport: Transport, argv: list[str], kind: FileKind,
                   timeout: float) -> CommandResult:
    """Run argv on the device for its whole output, as fetch_file reads a file: at most the
    bound of `kind` plus one byte reaches orch (FetchRefused beyond it), under `timeout`. The
    command's own exit status is the result's rc."""
    result = transport.run([transport.shell, "-c", BOUNDED_OUTPUT, "sh", str(kind.max_bytes),
                            *argv], timeout=timeout)
    if len(result.stdout) > kind.max_bytes:
        raise FetchRefused(f"{transport.name}: the {kind.name} output of {argv[-1]} is over its "
                           f"bound of {kind.max_bytes // MiB} MiB ({kind.reason}): not read")
    head, _, last = result.stderr.rstrip(b"\n").rpartition(b"\n")
    rc = last.removeprefix(b"orch-rc ")
    if last.startswith(b"orch-rc ") and rc.isdigit():
        return CommandResult(int(rc), result.stdout, head)
    return result
