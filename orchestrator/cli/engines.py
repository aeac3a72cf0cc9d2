"""Commands that prepare engines and models: `orch engines build`, `orch models make-moe`."""
from __future__ import annotations

import click

from orchestrator.errors import Failed

ENGINE_BUILDS = ("llama.cpp", "probes")


@click.group()
def engines() -> None:
    """Build the engines orch can run (llama.cpp from PyPI's llama-cpp-python sdist) and the
    ceiling probes (`orch ceilings`)."""


@engines.command("build")
@click.argument("engine", type=click.Choice(ENGINE_BUILDS))
@click.option("--version", "version", metavar="V", help="llama-cpp-python release whose "
              "vendored llama.cpp to build (default: the version orch pins).")
@click.option("--jobs", "-j", type=click.IntRange(1), default=2, show_default=True,
              help="Parallel compile jobs.")
@click.option("--force", is_flag=True, help="Rebuild even when the cache has this version.")
@click.option("--bindings/--no-bindings", default=None,
              help="Also pip-install llama-cpp-python (same version, without compiling "
                   "llama.cpp again) for the Python orch runs in; the llama-token engine "
                   "needs it. Default: only for the version orch pins (another version's "
                   "bindings would replace them).")
@click.option("--abi", type=click.Choice(["x86_64", "arm64", "all"]), default="all",
              show_default=True, help="probes: the ABI(s) to build for.")
def build_cmd(engine: str, version: str | None, jobs: int, force: bool,
              bindings: bool | None, abi: str) -> None:
    """Build ENGINE into the cache and print where it is.

    \b
    llama.cpp: downloads the llama-cpp-python sdist of --version (default: the pinned one)
    with pip (it vendors llama.cpp's source), compiles llama-bench, llama-completion and
    libllama with cmake + ninja into $ORCH_LLAMA_CACHE/<version> (default
    ~/.cache/orch/llama.cpp/<version>), one directory per version side by side; a finished
    build is reused. Its BUILT stamp records the version, the llama.cpp commit (from the
    sdist's CHANGELOG, also compiled in as the build commit llama-bench reports), the cmake
    flags and the time it took. A matrix runs it with `binary: {build: llama.cpp@V}`.
    Needs cmake, ninja and g++ (Debian: apt-get install cmake ninja-build g++). About 6
    minutes on 2 cores.

    \b
    probes: the static C probes of `orch ceilings` (iobench, membench) for --abi: x86_64 with
    `cc -static` (Debian: gcc libc6-dev), arm64 with `aarch64-linux-gnu-gcc -static`
    (gcc-aarch64-linux-gnu libc6-dev-arm64-cross), into ~/.cache/orch/probes/<sha>/<abi>/
    ($ORCH_PROBE_CACHE); a build of the same sources is reused. Seconds.
    """
    if engine == "probes":
        _build_probes(abi, force)
        return
    from orchestrator.tools.llamacpp_build import (
        LLAMA_CPP_VERSION,
        build,
        install_bindings,
    )

    def log(line: str) -> None:
        click.echo(line)

    # a BuildError is the handler's one line (exit 1)
    done = build(version or LLAMA_CPP_VERSION, jobs=jobs, force=force, log=log)
    if bindings or (bindings is None and done.version == LLAMA_CPP_VERSION):
        install_bindings(done, log=log)
    click.echo(f"llama-bench:      {done.binary('llama-bench')}")
    click.echo(f"llama-completion: {done.binary('llama-completion')}")
    click.echo(f"libllama:         {done.lib_dir}  (LLAMA_CPP_LIB_PATH)")
    stamp = done.identity()
    click.echo(f"llama.cpp commit: {stamp.get('llama_cpp_commit') or 'unknown'} "
               f"(llama-bench reports {stamp.get('reported_build') or 'unknown'}); built in "
               f"{stamp.get('seconds', '?')} s")


@engines.command("builds")
def builds_cmd() -> None:
    """List the llama.cpp builds in the cache: version, llama.cpp commit, the build its
    llama-bench reports (run.engine_build of its runs), build time and cmake flags."""
    from orchestrator.tools.llamacpp_build import cache_root, cached_builds

    found = cached_builds()
    if not found:
        click.echo(f"no llama.cpp build in {cache_root()} (orch engines build llama.cpp)")
    for b in found:
        s = b.identity()
        flags = " ".join(f for f in s.get("cmake_flags", []) if "INSTALL_RPATH" not in f)
        click.echo(f"{b.version}: llama.cpp {s.get('llama_cpp_commit') or '?'}, reports "
                   f"{s.get('reported_build') or '?'}, built {s.get('built_at', '?')} in "
                   f"{s.get('seconds', '?')} s, {b.root}\n  {flags}")


def _build_probes(abi: str, force: bool) -> None:
    from orchestrator.tools.probe_build import ABIS, PROBES, build

    for one in ABIS if abi == "all" else (abi,):   # a ProbeBuildError: the handler's line
        done = build(one, force=force, log=click.echo)
        for name in PROBES:
            click.echo(f"{name} ({one}): {done.binary(name)}")


@click.group()
def models() -> None:
    """Make models for the engines to run (no model hub is needed)."""


@models.command("make-moe")
@click.option("--size", type=click.Choice(["tiny", "medium"]), default="tiny", show_default=True,
              help="tiny: 4 layers x 8 experts, top-2, ~7 MB; medium: 8 layers x 16 experts, "
                   "top-4, embedding 512, expert FF 1024, f16, ~416 MB.")
@click.option("--out", "-o", type=click.Path(dir_okay=False), metavar="PATH",
              help="Where to write the GGUF (default ~/.cache/orch/models/qwen3moe-SIZE.gguf, "
                   "the path matrices/llama-local.yaml uses).")
@click.option("--seed", type=int, default=0, show_default=True, help="Weight seed.")
def make_moe_cmd(size: str, out: str | None, seed: int) -> None:
    """Write a random-weight qwen3moe GGUF that llama.cpp loads: a real MoE graph (router,
    top-k experts) with seeded random weights and a byte vocabulary whose generated text is
    printable ASCII. Same size and seed, same file."""
    try:
        from orchestrator.tools.moe_model import default_model_path, make_moe
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise Failed(f"{exc}; install orch's `llama` extra (pip install -e '.[llama]')") \
            from None
    try:
        import gguf  # noqa: F401
    except ImportError:
        raise Failed("the `gguf` package is missing; install orch's `llama` extra "
                     "(pip install -e '.[llama]')") from None
    make_moe(size, out or default_model_path(size), seed=seed, log=click.echo)
