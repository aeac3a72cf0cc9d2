"""Build llama.cpp (llama-bench, llama-completion, libllama) from the source that PyPI's
llama-cpp-python sdist vendors, into a per-version cache directory. (About 400 lines, one
concern: fetching, building and stamping one version; the probes' builds are probe_build.py.)

PyPI is the only source registry this project reaches, and the llama-cpp-python sdist carries
llama.cpp's full source, so the sdist is the pinned llama.cpp release. Layout of the cache:

    <root>/<version>/bin/llama-bench, llama-completion   (RPATH $ORIGIN/../lib)
    <root>/<version>/lib/libllama.so, libggml*.so       (LLAMA_CPP_LIB_PATH for the bindings)
    <root>/<version>/sdist/llama_cpp_python-<version>.tar.gz
    <root>/<version>/BUILT                               (stamp, JSON, written last)

<root> is $ORCH_LLAMA_CACHE, else $XDG_CACHE_HOME/orch/llama.cpp, else ~/.cache/orch/llama.cpp.
A directory with its stamp is reused as is; anything else in it is rebuilt.
"""
from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

# a build that cannot go on, with a message for a person (missing tool, failed step): exit 1
from orchestrator.errors import BuildError

# Newest llama-cpp-python whose sdist `pip download --no-binary :all:` fetches (checked 0.3.36).
LLAMA_CPP_VERSION = "0.3.36"
# The older release built beside it (scripts/build-llama) so that regressions between engine
# builds can be measured (`orch compare --builds`, docs/history.md): its llama.cpp
# (ggml-org/llama.cpp@e3a74b299) has llama-completion and runs the random qwen3moe models.
PREVIOUS_VERSION = "0.3.30"
TARGETS = ("llama", "llama-bench", "llama-completion")
BINARIES = ("llama-bench", "llama-completion")
STAMP = "BUILT"
DEBIAN_PACKAGES = {"cmake": "cmake", "ninja": "ninja-build", "c++": "g++"}

CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DGGML_NATIVE=OFF",             # the cache may be copied to another CPU of the same arch
    "-DBUILD_SHARED_LIBS=ON",
    "-DLLAMA_BUILD_SERVER=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",  # would download the web UI
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_APP=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_CURL=OFF",
    "-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON",
    "-DCMAKE_INSTALL_RPATH=$ORIGIN/../lib:$ORIGIN",
)

Log = Callable[[str], None]

# Source patches applied to the vendored llama.cpp before building: (file, old, new, why).
# Each is small and changes no measured code path; a patch whose text is not found (another
# llama.cpp version) is skipped with a note in the log and the stamp.
PATCHES = (
    ("tools/completion/completion.cpp",
     "    atexit([]() { console::cleanup(); });",
     "    atexit([]() { console::cleanup(); common_log_pause(common_log_main()); });",
     # common/log.cpp leaks its logger on purpose (llama.cpp issue 22142), so the async log
     # thread's queue is not drained at exit: on a busy machine llama-completion loses the end
     # of the generated text and the closing common_perf_print lines (seen here in 1 of ~10
     # runs under load). Pausing the logger at exit drains the queue first.
     "drain llama-completion's async log at exit (text end and perf lines were lost)"),
)


@dataclass
class LlamaBuild:
    """A finished build in the cache."""

    version: str
    root: Path

    @property
    def bin_dir(self) -> Path:
        return self.root / "bin"

    @property
    def lib_dir(self) -> Path:
        return self.root / "lib"

    def binary(self, name: str) -> Path:
        return self.bin_dir / name

    @property
    def sdist(self) -> Path:
        return self.root / "sdist" / f"llama_cpp_python-{self.version}.tar.gz"

    def stamp(self) -> dict:
        return json.loads((self.root / STAMP).read_text())

    def identity(self) -> dict:
        """The stamp, with the llama.cpp commit and the build llama-bench reports filled in
        for a build stamped before they were recorded (read from the sdist and the binary)."""
        stamp = self.stamp()
        if not stamp.get("llama_cpp_commit") and self.sdist.is_file():
            stamp["llama_cpp_commit"] = sdist_commit(self.sdist, self.version)
        if not stamp.get("reported_build"):
            stamp["reported_build"] = reported_build(self.binary("llama-completion"))
        return stamp


def cache_root() -> Path:
    if os.environ.get("ORCH_LLAMA_CACHE"):
        return Path(os.environ["ORCH_LLAMA_CACHE"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "orch" / "llama.cpp"


def cache_dir(version: str = LLAMA_CPP_VERSION) -> Path:
    return cache_root() / version


def find_build(version: str = LLAMA_CPP_VERSION) -> LlamaBuild | None:
    """The cached build of `version` when it finished (stamp present, files there), else None."""
    build = LlamaBuild(version, cache_dir(version))
    if not (build.root / STAMP).is_file():
        return None
    if not all(build.binary(b).is_file() for b in BINARIES):
        return None
    if not (build.lib_dir / "libllama.so").is_file():
        return None
    return build


def missing_tools() -> list[str]:
    """Debian packages to install for the tools the build needs that are not on PATH."""
    missing = []
    if not shutil.which("cmake"):
        missing.append(DEBIAN_PACKAGES["cmake"])
    if not shutil.which("ninja"):
        missing.append(DEBIAN_PACKAGES["ninja"])
    if not (shutil.which("c++") or shutil.which("g++")) or not (shutil.which("cc") or shutil.which("gcc")):
        missing.append(DEBIAN_PACKAGES["c++"])
    return missing


def _run(argv: list[str], log: Log, cwd: Path | None = None, env: dict | None = None,
         tail: int = 40) -> None:
    """Run a step, passing its output lines to `log`; raise BuildError with the tail on failure."""
    log("$ " + " ".join(argv))
    last: list[str] = []
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True,
                            errors="replace", bufsize=1)
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            line = line.rstrip("\n")
            log(line)
            last.append(line)
            del last[:-tail]
    finally:
        if proc.poll() is None and sys.exc_info()[0] is not None:
            proc.terminate()
        rc = proc.wait()
    if rc != 0:
        raise BuildError(f"{Path(argv[0]).name} failed (exit {rc}):\n" + "\n".join(last))


def download_sdist(version: str, dest: Path, log: Log) -> Path:
    """llama-cpp-python's sdist from PyPI (through pip, so pip's index settings apply)."""
    target = dest / f"llama_cpp_python-{version}.tar.gz"
    if target.is_file():
        return target
    dest.mkdir(parents=True, exist_ok=True)
    # --no-build-isolation --no-deps: pip still prepares metadata, which is cheap.
    _run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
          "--disable-pip-version-check", f"llama-cpp-python=={version}", "-d", str(dest)], log)
    if not target.is_file():
        found = sorted(dest.glob("llama_cpp_python-*.tar.gz"))
        raise BuildError(f"pip did not leave {target.name} in {dest} (found: "
                         f"{', '.join(p.name for p in found) or 'nothing'})")
    return target


def _extract(sdist: Path, dest: Path) -> Path:
    """Unpack the sdist; returns the vendored llama.cpp source directory."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    with tarfile.open(sdist) as tar:
        if sys.version_info >= (3, 12) or hasattr(tarfile, "data_filter"):
            tar.extractall(dest, filter="data")
        else:  # pragma: no cover - Python without extraction filters
            tar.extractall(dest)
    tops = [p for p in dest.iterdir() if p.is_dir()]
    src = tops[0] / "vendor" / "llama.cpp" if len(tops) == 1 else None
    if src is None or not (src / "CMakeLists.txt").is_file():
        raise BuildError(f"{sdist.name} has no vendor/llama.cpp/CMakeLists.txt")
    return src


_CHANGELOG_COMMIT = re.compile(r"llama\.cpp@([0-9a-f]{7,40})")


def changelog_commit(changelog: str, version: str) -> str | None:
    """The llama.cpp commit llama-cpp-python `version` vendors, from its CHANGELOG.md section
    ("feat: update llama.cpp to ggml-org/llama.cpp@e3a74b299"); a release that did not update
    llama.cpp inherits the newest commit of an older section. None when no section names one.

    The sdist's git metadata is a partial copy (a shallow submodule link that may not
    resolve once unpacked), so llama.cpp's own build-info cannot be relied on for the commit;
    build() compiles this one in, so each version's llama-bench reports its own build_commit
    and two builds' runs are told apart in the store."""
    sections = re.split(r"^## \[", changelog, flags=re.MULTILINE)
    seen = False
    for section in sections[1:]:
        name = section.split("]", 1)[0].strip()
        if name == version:
            seen = True
        if seen and (m := _CHANGELOG_COMMIT.search(section)):
            return m.group(1)
    return None


def sdist_commit(sdist: Path, version: str) -> str | None:
    """changelog_commit() read from the sdist's CHANGELOG.md without unpacking the rest."""
    try:
        with tarfile.open(sdist) as tar:
            for member in tar.getmembers():
                if member.name.count("/") == 1 and member.name.endswith("/CHANGELOG.md"):
                    f = tar.extractfile(member)
                    if f is not None:
                        return changelog_commit(f.read().decode("utf-8", "replace"), version)
    except (OSError, tarfile.TarError):
        return None
    return None


def reported_build(binary: Path) -> str | None:
    """What `binary --version` (llama-completion: llama-bench has no --version in older
    releases) says its build is, as orch stores it in engine_build
    ("<commit> (<number>)"), so a stored run maps back to the cache directory it came from."""
    try:
        out = subprocess.run([str(binary), "--version"], check=False, capture_output=True,
                             text=True, timeout=60, errors="replace")
    except (OSError, subprocess.SubprocessError):
        return None
    text = out.stdout + out.stderr
    # newer: "version: 0.5.0-dev (build 1, commit 0c1e570)"; older: "version: 1 (e3a74b299)"
    if m := re.search(r"\(build (\d+), commit ([0-9A-Za-z.-]+)\)", text):
        return f"{m.group(2)} ({m.group(1)})"
    if m := re.search(r"^version: (\d+) \(([0-9A-Za-z.-]+)\)", text, flags=re.MULTILINE):
        return f"{m.group(2)} ({m.group(1)})"
    return None


def apply_patches(src: Path, log: Log) -> list[str]:
    """Apply PATCHES to the llama.cpp source tree; returns what was applied (or skipped)."""
    done = []
    for rel, old, new, why in PATCHES:
        path = src / rel
        text = path.read_text() if path.is_file() else ""
        if text.count(old) != 1:
            log(f"patch skipped ({rel}: text not found): {why}")
            done.append(f"skipped: {why}")
            continue
        path.write_text(text.replace(old, new))
        log(f"patched {rel}: {why}")
        done.append(why)
    return done


def build(version: str = LLAMA_CPP_VERSION, jobs: int = 2, force: bool = False,
          log: Log = print) -> LlamaBuild:
    """Build llama.cpp `version` into the cache (or return the cached build)."""
    if not force:
        cached = find_build(version)
        if cached is not None:
            log(f"llama.cpp {version}: cached build in {cached.root}")
            return cached
    missing = missing_tools()
    if missing:
        raise BuildError("building llama.cpp needs cmake, ninja and a C/C++ compiler; missing: "
                         f"{', '.join(missing)}. On Debian/Ubuntu: "
                         f"apt-get install {' '.join(missing)}")
    root = cache_dir(version)
    (root / STAMP).unlink(missing_ok=True)
    t0 = time.monotonic()
    sdist = download_sdist(version, root / "sdist", log)
    log(f"llama.cpp {version}: unpacking {sdist.name}")
    src = _extract(sdist, root / "src")
    patches = apply_patches(src, log)
    commit = sdist_commit(sdist, version)
    # The commit from the CHANGELOG, else a name that still differs between versions.
    flags = [*CMAKE_FLAGS, f"-DLLAMA_BUILD_COMMIT={commit or 'lcp-' + version}"]
    work = root / "build"
    if work.exists():
        shutil.rmtree(work)
    env = {**os.environ, "CMAKE_BUILD_PARALLEL_LEVEL": str(jobs)}
    _run(["cmake", "-S", str(src), "-B", str(work), "-G", "Ninja", *flags], log, env=env)
    _run(["cmake", "--build", str(work), "-j", str(jobs), "--target", *TARGETS], log, env=env)
    out_bin, out_lib = root / "bin", root / "lib"
    for d in (out_bin, out_lib):
        if d.exists():
            shutil.rmtree(d)
        d.mkdir()
    built = work / "bin"
    for name in BINARIES:
        if not (built / name).is_file():
            raise BuildError(f"the build finished without {built / name}")
        shutil.copy2(built / name, out_bin / name)
    libs = [p for p in built.iterdir() if p.name.startswith("lib") and ".so" in p.name]
    for lib in libs:
        # Keep symlinks as symlinks (libllama.so -> libllama.so.0 -> ...), if any.
        target = out_lib / lib.name
        if lib.is_symlink():
            target.symlink_to(os.readlink(lib))
        else:
            shutil.copy2(lib, target)
    if not (out_lib / "libllama.so").exists():
        raise BuildError(f"the build finished without libllama.so in {built}")
    seconds = time.monotonic() - t0
    # The sources and objects are not needed any more (about 1 GiB); the sdist stays for the
    # bindings' install.
    shutil.rmtree(work, ignore_errors=True)
    shutil.rmtree(root / "src", ignore_errors=True)
    stamp = {"version": version, "llama_cpp_commit": commit,
             "reported_build": reported_build(out_bin / "llama-completion"),
             "seconds": round(seconds, 1), "targets": list(TARGETS),
             "cmake_flags": flags, "jobs": jobs, "patches": patches,
             "machine": platform.machine(),
             "built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    tmp = root / (STAMP + ".tmp")
    tmp.write_text(json.dumps(stamp, indent=1) + "\n")
    tmp.rename(root / STAMP)
    log(f"llama.cpp {version}: built in {seconds:.0f} s into {root}")
    return LlamaBuild(version, root)


def bindings_version(python: str = sys.executable) -> str | None:
    """llama-cpp-python's version installed for `python`, None when absent. Never imports
    llama_cpp (that would load a library)."""
    code = ("import importlib.metadata as m\ntry: print(m.version('llama-cpp-python'))\n"
            "except m.PackageNotFoundError: pass")
    out = subprocess.run([python, "-c", code], check=False, capture_output=True, text=True,
                         timeout=60)
    return out.stdout.strip() or None


def install_bindings(build: LlamaBuild, python: str = sys.executable, log: Log = print) -> float:
    """pip-install llama-cpp-python `build.version` from the cached sdist without compiling
    llama.cpp again (LLAMA_BUILD=OFF): the package then needs LLAMA_CPP_LIB_PATH=<lib>.
    Returns the seconds it took (0 when already installed)."""
    if bindings_version(python) == build.version:
        log(f"llama-cpp-python {build.version} already installed for {python}")
        return 0.0
    sdist = build.sdist
    if not sdist.is_file():
        sdist = download_sdist(build.version, sdist.parent, log)
    t0 = time.monotonic()
    env = {**os.environ, "CMAKE_ARGS": "-DLLAMA_BUILD=OFF -DLLAVA_BUILD=OFF",
           "CMAKE_BUILD_PARALLEL_LEVEL": "2"}
    _run([python, "-m", "pip", "install", "--disable-pip-version-check", "--no-cache-dir",
          str(sdist)], log, env=env)
    seconds = time.monotonic() - t0
    log(f"llama-cpp-python {build.version} installed in {seconds:.0f} s; "
        f"use LLAMA_CPP_LIB_PATH={build.lib_dir}")
    return seconds


# engine -> the binary of a build it runs (matrix `binary: {build: llama.cpp@V}`)
ENGINE_BINARIES = {"llama-bench": "llama-bench", "llama-cli": "llama-completion",
                   "llama-completion": "llama-completion"}


def cached_binary(spec: str, engine: str | None) -> str:
    """The path of `engine`'s binary in the build cache for "llama.cpp@V" (which need not be
    built yet: `orch run` then fails on the missing file, naming it). ValueError otherwise."""
    name, _, version = spec.partition("@")
    if name != "llama.cpp" or not version or "/" in version or version.startswith("."):
        raise ValueError(f"build: {spec!r}: expected llama.cpp@VERSION (a llama-cpp-python "
                         f"release, e.g. llama.cpp@{LLAMA_CPP_VERSION})")
    if engine not in ENGINE_BINARIES:
        raise ValueError(f"build: engine {engine!r} has no binary in a llama.cpp build (one of "
                         f"{', '.join(ENGINE_BINARIES)})")
    return str(cache_dir(version) / "bin" / ENGINE_BINARIES[engine])


def cached_builds() -> list[LlamaBuild]:
    """Every finished build in the cache, oldest version first."""
    root = cache_root()
    found = [b for d in (sorted(root.iterdir()) if root.is_dir() else [])
             if d.is_dir() and (b := find_build(d.name)) is not None]

    def key(b: LlamaBuild) -> tuple:
        parts = b.version.split(".")
        return tuple((0, int(p)) if p.isdigit() else (1, p) for p in parts)
    return sorted(found, key=key)
