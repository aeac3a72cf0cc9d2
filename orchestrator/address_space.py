"""Numeric libraries under an address-space limit (`ulimit -v`; docs/reliability.md, "Low
memory").

numpy, scipy, pandas (with pyarrow) and matplotlib take hundreds of MB of address space to
load, most of it at import time: each OpenBLAS (numpy and scipy carry one each) allocates a
buffer per thread in its library constructor, where no Python signal handler runs, and under
a limit too low for it that allocation retries for ever (`orch run` stored every cell, then
hung at 100% CPU in its end-of-run analysis; SIGTERM and Ctrl-C did nothing). A failure later
in the import is a bare MemoryError, an ImportError "failed to map segment" or a SIGSEGV.

So, before any of them is imported (orchestrator/entry.py calls `prepare` before it imports
the commands):

- their thread pools are bounded to one thread (OPENBLAS_NUM_THREADS, OMP_NUM_THREADS, ... set
  to 1 unless the user set them): orch's arrays are small, and one thread's buffers are a
  fraction of a many-core machine's. The processes orch starts (engines on the local device)
  get the user's environment, without these (`user_environ`): a measurement is not changed.
- under a limit, the first import of each library checks the room left (the limit less what
  is mapped now, /proc/self/status VmSize) against a floor measured per library (FLOORS);
  without room it raises LowMemory, one line naming the limit and what was needed, instead
  of starting a load that hangs or crashes. `orch run` skips its analysis on it (the rows are
  stored); other commands exit 1 with the line.

Standard library only (and orchestrator.errors): it runs before the commands are imported.
"""
from __future__ import annotations

import os
import resource
import sys
from collections.abc import Sequence
from types import ModuleType

from orchestrator.errors import Failed

# One thread for every numeric library's pool (the BLAS implementations, OpenMP, numexpr),
# and arrow's system allocator (its default pool reserves 1 GiB of address space at once).
BOUNDED = {
    "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
    "BLIS_NUM_THREADS": "1", "VECLIB_MAXIMUM_THREADS": "1", "NUMEXPR_NUM_THREADS": "1",
    "GOTO_NUM_THREADS": "1", "ARROW_DEFAULT_MEMORY_POOL": "system",
}

# Address space (kB) each library adds when it is imported with BOUNDED set, measured with
# `ulimit -v` on x86-64 Linux (numpy 2, scipy 1.1x, pandas 2 + pyarrow, matplotlib 3; see
# docs/reliability.md, "Low memory"), rounded up by about a tenth. Without its dependencies:
# DEPENDS adds those not loaded yet.
FLOORS = {"numpy": 92_000, "scipy": 176_000, "pandas": 64_000, "pyarrow": 184_000,
          "matplotlib": 56_000, "arch": 32_000}
DEPENDS = {"scipy": ("numpy",), "pandas": ("numpy", "pyarrow"), "pyarrow": ("numpy",),
           "matplotlib": ("numpy",),
           "arch": ("numpy", "pandas", "pyarrow", "scipy", "matplotlib")}
WORK_KB = 32_000   # room left for the work itself once the library is in (orch's arrays are small)

# the names `prepare` set, also in the environment (MARKER) so that an orch process started
# by orch (a lab worker's consumers) knows them too: the engines it starts get neither
MARKER = "ORCH_BOUNDED_ENV"
_set_by_orch: set[str] = set()


class LowMemory(Failed):
    """A library does not fit under the address-space limit: exit 1, one line."""


def limit_kb() -> int | None:
    """The soft RLIMIT_AS in kB, None without one."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_AS)
    return None if soft == resource.RLIM_INFINITY else soft // 1024


def mapped_kb() -> int:
    """The address space mapped now (VmSize), 0 where /proc does not say."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith("VmSize:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def limit_text(limit: int | None = None) -> str:
    limit = limit_kb() if limit is None else limit
    return f"the address-space limit (ulimit -v {limit} kB)" if limit is not None else \
        "the machine's memory (no address-space limit is set)"


def memory_line() -> str:
    """What a MemoryError (or a library that failed to map) says: the limit it ran into."""
    limit = limit_kb()
    advice = "; raise it (ulimit -v) or unset it" if limit is not None else ""
    return f"out of memory under {limit_text(limit)}{advice}"


def is_out_of_memory(exc: BaseException) -> bool:
    """A MemoryError, or an import that could not map a library (the same cause)."""
    if isinstance(exc, MemoryError):
        return True
    text = str(exc)
    return isinstance(exc, (ImportError, OSError)) and (
        "failed to map segment" in text or "Cannot allocate memory" in text
        or "cannot allocate memory" in text)


def needed_kb(*names: str) -> int:
    """What importing `names` adds: their floors and those of their dependencies not loaded
    yet, each once, and WORK_KB."""
    todo = {n for name in names for n in (name, *DEPENDS.get(name, ())) if n not in sys.modules}
    return sum(FLOORS[n] for n in todo) + WORK_KB


def check_room(*names: str) -> None:
    """Raise LowMemory when the libraries `names` (those not loaded yet) do not fit under the
    limit together (nothing without a limit)."""
    limit = limit_kb()
    todo = [n for n in names if n not in sys.modules]
    if limit is None or not todo:
        return
    need, room = needed_kb(*todo), limit - mapped_kb()
    if room < need:
        they = "it needs" if len(todo) == 1 else "they need"
        raise LowMemory(f"not enough memory to load {', '.join(todo)}: {they} about "
                        f"{need // 1024} MB more, {max(room, 0) // 1024} MB are left under "
                        f"{limit_text(limit)}; raise the limit or unset it")


class _Guard:
    """First in sys.meta_path: checks the room before the first import of each library of
    FLOORS; finds nothing itself (the other finders load the module). A meta path finder by
    protocol, not importlib.abc's class: that import pulls in tempfile and more, before
    orch's first line runs."""

    def __init__(self) -> None:
        self.approved: set[str] = set()

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> None:
        if fullname in FLOORS and fullname not in self.approved and fullname not in sys.modules:
            check_room(fullname)
            # its dependencies were counted with it: their own imports, nested, pass
            self.approved.update((fullname, *DEPENDS.get(fullname, ())))
        return None


def load(modules: Sequence[str]) -> None:
    """Import `modules` now, their room checked together first: LowMemory, one line, when
    they do not fit, before the caller starts work that would need them half-way (`orch
    run`: a library loaded mid-cell, beside the run's threads, is where it failed)."""
    import importlib

    check_room(*dict.fromkeys(m.split(".")[0] for m in modules if m.split(".")[0] in FLOORS))
    for module in modules:
        try:
            importlib.import_module(module)
        except (MemoryError, ImportError, OSError) as exc:
            if not is_out_of_memory(exc):
                raise
            raise LowMemory(f"not enough memory to load {module.split('.')[0]}: "
                            f"{memory_line()}") from None


def prepare() -> None:
    """Bound the numeric libraries' threads and guard their first imports; once, before any of
    them is imported."""
    _set_by_orch.update(n for n in os.environ.get(MARKER, "").split(",") if n in BOUNDED)
    for name, value in BOUNDED.items():
        if name not in os.environ:
            os.environ[name] = value
            _set_by_orch.add(name)
    if _set_by_orch:
        os.environ[MARKER] = ",".join(sorted(_set_by_orch))
    if not any(isinstance(finder, _Guard) for finder in sys.meta_path):
        sys.meta_path.insert(0, _Guard())


def user_environ() -> dict[str, str]:
    """os.environ without what `prepare` set, here or in the orch that started this process
    (MARKER; a lab consumer runs no `prepare` of its own): the environment of the processes
    orch starts."""
    ours = _set_by_orch | {n for n in os.environ.get(MARKER, "").split(",") if n in BOUNDED}
    return {k: v for k, v in os.environ.items() if k not in ours and k != MARKER}
