"""Pushes that cannot race (docs/reliability.md, "Two runs pushing one file").

Two orch processes on one controller (two sessions, a lab worker beside `orch run`) may push
one model to one device at once. Each push's temporary name is its own (`unique_suffix`: pid
and random), so neither writes into the other's file nor renames the other's half; and
`push_lock` serialises the whole check-then-push of one destination on one device, so the
second process waits, finds the file there with the same sha256 and pushes nothing (not a
second 2 GB over adb). The resumable parts of a big push (ssh `.orch-part-KEY`, adb
`.orch-part-KEY.N`) keep names derived from the file's version, so that an interrupted push
resumes: the lock is what keeps two pushes of one controller off them. Two controllers
pushing one file to one device at once are not serialised (the lock is a file on the
controller): their sha256 check before the rename still refuses mixed bytes on ssh."""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import secrets
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

# In this process: key -> (its re-entrant lock, [depth, the flocked fd]). The RLock keeps two
# threads apart (flock alone would let two descriptors of one process wait on each other) and
# lets a push that holds the lock call a transport's own locked step (_put_file) again.
_HELD: dict[str, tuple[threading.RLock, list[int]]] = {}
_HELD_GUARD = threading.Lock()


def unique_suffix() -> str:
    """`.orch-tmp-PID-RANDOM`: a temporary name no other push shares."""
    return f".orch-tmp-{os.getpid()}-{secrets.token_hex(4)}"


def _lock_dir() -> Path:
    # per user: another user's lock file would be unwritable; on the controller's /tmp (or
    # $TMPDIR), which a reboot empties with every lock it could hold
    path = Path(tempfile.gettempdir()) / f"orch-push-locks-{os.getuid()}"
    path.mkdir(mode=0o700, exist_ok=True)
    return path


@contextlib.contextmanager
def push_lock(device: str, remote: str) -> Iterator[None]:
    """Hold the controller-wide lock of pushing `remote` to `device`: other threads and
    processes wait; the holding thread may take it again. flock: released when the process
    ends, however it ends."""
    key = hashlib.sha256(f"{device}\0{remote}".encode()).hexdigest()[:32]
    with _HELD_GUARD:
        rlock, state = _HELD.setdefault(key, (threading.RLock(), [0, -1]))
    with rlock:
        if state[0] == 0:
            fd = os.open(_lock_dir() / f"{key}.lock", os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
            except BaseException:
                os.close(fd)
                raise
            state[1] = fd
        state[0] += 1
        try:
            yield
        finally:
            state[0] -= 1
            if state[0] == 0:
                os.close(state[1])   # closing releases the flock
