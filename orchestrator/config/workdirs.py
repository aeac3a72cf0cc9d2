"""Device workdirs that cannot be trusted: a system folder, or one overlapping another
device's on the same machine (docs/reliability.md, "Overlapping workdirs").

A device's agent owns its workdir: it writes `agent/` and `runs/` there and, before a run,
stops the processes tagged with a job of its runs folder that no live job owns. A second
device whose workdir lies inside the first's (or is the same) has its jobs in the first's
folder, where they are not the first's to judge; so the inventory refuses such a pair at
load, naming both devices and both paths. Machines are compared by the entries' own
`target()` (transports/base.py): local, an SSH host:port (and jump host), an adb serial.
Paths are compared as written, normalised (`//`, `/./`, a trailing `/`), after `~` is
resolved where that needs no device (local); a `~` path and an absolute one on a remote
machine cannot be compared without it and are let through. Symbolic links are not followed:
orch cannot see them before it connects."""
from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable

from orchestrator.transports.base import DeviceEntry

# Folders a workdir may lie under but never be: orch would write agent/ and runs/ into the
# system's own folders. The folders themselves only: /data/local/tmp/orch (adb's default)
# and /usr/local/orch are fine. Linux's, then Android's.
SYSTEM_FOLDERS = frozenset({
    "/", "/bin", "/boot", "/dev", "/etc", "/home", "/media", "/mnt", "/opt", "/proc", "/root",
    "/run", "/sbin", "/srv", "/sys", "/usr", "/usr/bin", "/usr/lib", "/usr/local",
    "/usr/sbin", "/usr/share", "/var", "/var/lib", "/var/log",
    "/acct", "/apex", "/cache", "/config", "/data", "/data/local", "/odm", "/product",
    "/sdcard", "/storage", "/system", "/vendor",
})


def normal(path: str) -> str:
    """`path` without repeated slashes, `.` components and a trailing slash (`~` kept)."""
    path = posixpath.normpath(re.sub("/+", "/", path))
    return "/" if path == "//" else path


def system_folder(path: str) -> bool:
    """A folder of the system itself (/, /usr, /lib64, /data ...), not one under it."""
    path = normal(path)
    return path in SYSTEM_FOLDERS or re.fullmatch(r"/lib[^/]*", path) is not None


def _inside(inner: str, outer: str) -> bool:
    return inner == outer or inner.startswith(outer.rstrip("/") + "/")


def _comparable(a: tuple[DeviceEntry, str], b: tuple[DeviceEntry, str]) -> bool:
    (entry_a, path_a), (entry_b, path_b) = a, b
    if entry_a.target() != entry_b.target():
        return False
    home_a, home_b = path_a.startswith("~"), path_b.startswith("~")
    if home_a or home_b:
        # `~` is the user's home: comparable only between two `~` paths of the same user
        return home_a and home_b and entry_a.home_of() == entry_b.home_of()
    return True


def workdir_problems(devices: Iterable[tuple[str, DeviceEntry, str]],
                     listed: Iterable[str] | None = None) -> list[tuple[str, str]]:
    """(device, one-line message) for each device whose workdir is a system folder or
    overlaps another device's workdir on the same machine. `devices`: (name, entry, its
    workdir, the default where the entry gives none); `listed`: the devices a message may be
    given to (those of the file: not the implicit `local`), all when None. A pair's message
    goes to the containing device, else to the other, and names both devices and paths."""
    resolved = [(name, entry, normal(entry.expand_home(workdir)))
                for name, entry, workdir in devices]
    names = set(listed) if listed is not None else {name for name, _, _ in resolved}
    problems: list[tuple[str, str]] = []
    for name, entry, path in resolved:
        if system_folder(path) and name in names:
            problems.append((name, f"{path} is a system folder (orch writes agent/ and runs/ "
                                   f"into its workdir): use a folder of orch's own under it"))
    for i, (name, entry, path) in enumerate(resolved):
        for other, other_entry, other_path in resolved[i + 1:]:
            if system_folder(path) or system_folder(other_path) or \
                    not _comparable((entry, path), (other_entry, other_path)):
                continue
            if _inside(other_path, path):
                problems += _overlap((name, path), (other, other_path), names)
            elif _inside(path, other_path):
                problems += _overlap((other, other_path), (name, path), names)
    return problems


def _overlap(outer: tuple[str, str], inner: tuple[str, str],
             names: set[str]) -> list[tuple[str, str]]:
    """The message for OUTER's workdir holding INNER's (or being the same folder)."""
    (outer_name, outer_path), (inner_name, inner_path) = outer, inner
    if outer_path == inner_path:
        at, other = (inner_name, outer_name) if inner_name in names else (outer_name, inner_name)
        return [(at, f"{outer_path} is also the workdir of device {other} on the same "
                     f"machine: give each device a folder of its own")]
    if outer_name in names:
        return [(outer_name, f"{outer_path} contains {inner_path}, the workdir of device "
                             f"{inner_name} on the same machine (its jobs would be taken for "
                             f"this device's strays): give each device a folder of its own, "
                             f"side by side")]
    return [(inner_name, f"{inner_path} lies inside {outer_path}, the workdir of device "
                         f"{outer_name} on the same machine (this device's jobs would be "
                         f"taken for that one's strays): give each device a folder of its "
                         f"own, side by side")]
