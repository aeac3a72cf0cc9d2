"""Build the ceiling probes (probes/iobench.c, probes/membench.c) as static binaries per ABI.

Phones have no Python, awk or dd, so the storage and memory ceilings are measured by two small
C programs pushed to the device. Static linking makes one binary run on any Linux of its ABI,
Android included (no dynamic loader, no libc version to match). x86_64 builds natively with
`cc -static -O2`; arm64 with Debian's cross compiler `aarch64-linux-gnu-gcc -static` (on an
arm64 host the native `cc`). Builds are cached under
    $ORCH_PROBE_CACHE, else $XDG_CACHE_HOME/orch/probes, else ~/.cache/orch/probes
as <root>/<sha256 of the sources and flags, 16 hex>/<abi>/{iobench,membench}: a changed
source gets a new directory, an unchanged one is never rebuilt.
"""
from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from orchestrator.errors import BuildError

PROBES = ("iobench", "membench")
ABIS = ("x86_64", "arm64")
CFLAGS = ("-static", "-O2", "-pthread", "-Wall")
# uname -m -> orch's ABI name
_MACHINES = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "arm64", "arm64": "arm64",
             "armv8l": "arm64", "aarch64_be": None}
_CROSS = {"x86_64": "x86_64-linux-gnu-gcc", "arm64": "aarch64-linux-gnu-gcc"}
_DEBIAN = {"x86_64": "gcc libc6-dev", "arm64": "gcc-aarch64-linux-gnu libc6-dev-arm64-cross"}

Log = Callable[[str], None]


class ProbeBuildError(BuildError):
    """The probes cannot be built: no compiler for the ABI, an unknown ABI, a failed compile."""


@dataclass(frozen=True)
class ProbeBuild:
    """The probe binaries of one ABI in the cache."""

    abi: str
    root: Path
    sha: str

    def binary(self, name: str) -> Path:
        return self.root / name


def abi_of_machine(machine: str) -> str:
    """orch's ABI for `uname -m` (x86_64 | arm64); ProbeBuildError for any other machine."""
    abi = _MACHINES.get(machine.strip().lower())
    if abi is None:
        raise ProbeBuildError(f"unknown ABI {machine.strip()!r} (uname -m): orch builds probes "
                              f"for {', '.join(ABIS)}")
    return abi


def source(name: str) -> Path:
    return Path(str(resources.files("orchestrator.probes").joinpath(f"{name}.c")))


def sources_sha() -> str:
    """sha256 over the probe sources and the compile flags: the cache key."""
    digest = hashlib.sha256(" ".join(CFLAGS).encode())
    for name in PROBES:
        digest.update(name.encode() + b"\0" + source(name).read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def cache_root() -> Path:
    if os.environ.get("ORCH_PROBE_CACHE"):
        return Path(os.environ["ORCH_PROBE_CACHE"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "orch" / "probes"


def compiler(abi: str) -> str:
    """The compiler for `abi` on this host: the native cc when the host is that ABI, else the
    Debian cross compiler. ProbeBuildError naming the packages when it is missing."""
    if abi not in ABIS:
        raise ProbeBuildError(f"unknown ABI {abi!r}: orch builds probes for {', '.join(ABIS)}")
    host = _MACHINES.get(platform.machine().lower())
    names = (["cc", "gcc"] if host == abi else []) + [_CROSS[abi]]
    for name in names:
        path = shutil.which(name)
        if path:
            return path
    raise ProbeBuildError(f"no C compiler for {abi}: none of {', '.join(names)} is on PATH "
                          f"(Debian: apt-get install {_DEBIAN[abi]})")


def find_build(abi: str) -> ProbeBuild | None:
    """The cached build of the current sources for `abi`, or None."""
    build = ProbeBuild(abi, cache_root() / sources_sha() / abi, sources_sha())
    return build if all(build.binary(n).is_file() for n in PROBES) else None


def build(abi: str, force: bool = False, log: Log = print) -> ProbeBuild:
    """Build (or find in the cache) the probes for `abi`. Each binary is compiled to a temp
    name and renamed, so an interrupted build never leaves a broken cached file."""
    if abi not in ABIS:
        raise ProbeBuildError(f"unknown ABI {abi!r}: orch builds probes for {', '.join(ABIS)}")
    if not force and (found := find_build(abi)) is not None:
        log(f"probes for {abi}: cached in {found.root}")
        return found
    cc = compiler(abi)
    done = ProbeBuild(abi, cache_root() / sources_sha() / abi, sources_sha())
    done.root.mkdir(parents=True, exist_ok=True)
    for name in PROBES:
        out = done.binary(name)
        tmp = out.with_name(f".{name}.{os.getpid()}.tmp")
        argv = [cc, *CFLAGS, "-o", str(tmp), str(source(name))]
        log(f"building {name} for {abi}: {' '.join(argv)}")
        try:
            result = subprocess.run(argv, check=False, capture_output=True, text=True,
                                    timeout=300)
        except subprocess.TimeoutExpired:
            raise ProbeBuildError(f"{cc} did not finish building {name} within 300 s") from None
        if result.returncode != 0:
            tmp.unlink(missing_ok=True)
            hint = (f" (static linking needs the C library's .a files: apt-get install "
                    f"{_DEBIAN[abi]})" if "cannot find -l" in result.stderr else "")
            raise ProbeBuildError(f"building {name} for {abi} failed (rc {result.returncode})"
                                  f"{hint}:\n{result.stderr.strip()[-2000:]}")
        os.chmod(tmp, 0o755)
        os.replace(tmp, out)
    return done
