"""Local files a matrix names (`{local: FILE}` models, `binary: {local: FILE}`, `prompt_file`)
must be regular files once links are followed: a FIFO would block the read, `/dev/zero` would
never end, a directory has no bytes to push (docs/path-check.md, "Files that are not regular
files"). And a prompt reaches the engine as one argv element, which Linux bounds
(MAX_ARG_STRLEN, 128 KiB): a longer one is refused at load, not met as exit 126 at exec."""
from __future__ import annotations

import os
import stat
from pathlib import Path

ARG_MAX_BYTES = 131072             # MAX_ARG_STRLEN: one argv element, its NUL included
MAX_PROMPT_BYTES = ARG_MAX_BYTES - 4096   # a margin for what an adapter puts beside it

_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISDIR, "a directory"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"))


def kind_of(mode: int) -> str:
    """What a non-regular file is, in words ("a FIFO", "a character device", ...)."""
    return next((name for test, name in _KINDS if test(mode)), "not a file")


def not_regular(path: Path) -> str | None:
    """The kind of what `path` names when that is not a regular file (links followed); None
    for a regular file and for a path that names nothing (its reader reports that)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    return None if stat.S_ISREG(mode) else kind_of(mode)


def push_problem(path: Path, must_exist: bool) -> str | None:
    """Why the local file `path` cannot be pushed: `PATH is not a regular file (KIND)`, or,
    when `must_exist`, `PATH does not exist` (a `{local: FILE}` model is checked at load;
    a `binary: {local: FILE}` that is missing is still the push's to report). None when fine."""
    kind = not_regular(path)
    if kind is not None:
        return f"{path} is not a regular file ({kind})"
    if must_exist and not os.path.exists(path):
        return f"{path} does not exist"
    return None


class NotRegular(OSError):
    """What was opened is not a regular file (`kind`) or is larger than allowed (`size`)."""

    def __init__(self, message: str, kind: str | None = None, size: int | None = None) -> None:
        super().__init__(message)
        self.kind, self.size = kind, size


def read_regular(path: Path, limit: int) -> bytes:
    """At most `limit` bytes of a regular file, refusing anything else at the moment of
    opening (it may have been swapped for a FIFO since it was checked): O_NONBLOCK makes even
    that open return at once, fstat says what was opened, and a file over `limit` is refused
    from its size, unread."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            kind = kind_of(info.st_mode)
            raise NotRegular(f"{path} is not a regular file ({kind})", kind=kind)
        if info.st_size > limit:
            raise NotRegular(f"{path} is {info.st_size} bytes", size=info.st_size)
        with os.fdopen(fd, "rb", closefd=False) as handle:
            data = handle.read(limit + 1)
        if len(data) > limit:   # it grew since fstat
            raise NotRegular(f"{path} is over {limit} bytes", size=len(data))
        return data
    finally:
        os.close(fd)


def prompt_too_long(size: int) -> str | None:
    """Why a prompt of `size` bytes cannot be one argv element, or None."""
    if size <= MAX_PROMPT_BYTES:
        return None
    return (f"prompt is {size} bytes; one argument can hold at most {ARG_MAX_BYTES} on Linux "
            f"(orch allows {MAX_PROMPT_BYTES}, leaving room for what an engine adds)")
