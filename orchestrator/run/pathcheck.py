"""Model path check, once per device before its cells run (matrix key `path_check`).

Why: a streaming config (`--moe-stream`, `--io odirect`) exists to measure O_DIRECT reads from
flash. On FUSE-backed paths (Android's /sdcard) the kernel hands O_DIRECT to the file system's
daemon. Measured on a real FUSE mount (bindfs over ext4, docs/path-check.md): open(O_DIRECT)
succeeds, even unaligned reads succeed, the FUSE layer's own cache is bypassed, and the daemon
reads the backing file through the page cache all the same: silently buffered (so do the
stacked sdcardfs and esdfs); some daemons refuse it with EINVAL. On RAM file systems (ramfs, tmpfs)
there is no storage to measure, and ramfs refuses O_DIRECT. Either way the numbers would look
plausible and be wrong, or the engine stops. So every model path is looked at on the device (exists, size, file system type from
/proc/mounts by longest mount-point prefix of its real path, else `stat -f -c %T`, and a
one-block `dd iflag=direct` read where `dd` has that flag) and `warn` (default) reports the
problem in the progress output and in each affected run's warnings, `refuse` stops before any
cell runs (ConfigError: exit code 2), `off` skips the check.

Only transport.run with POSIX sh + toybox commands is used, so it works on every device kind.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from orchestrator.config.configs import expand_configs
from orchestrator.config.matrix import LoadedMatrix
from orchestrator.errors import ConfigError
from orchestrator.run.link_retry import retry_link
from orchestrator.transports.base import Transport

_STREAMING = re.compile(r"(?:^|\s)(?:--moe-stream|--io[\s=]+odirect)(?:\s|$)")
# O_DIRECT usually accepted, reads buffered below anyway (the FUSE daemon's backing file,
# sdcardfs/esdfs's lower file system); some refuse it (EINVAL): the dd probe tells which
_BUFFERED = ("fuse", "fuseblk", "sdcardfs", "esdfs")
# in RAM: nothing of the storage is measured; ramfs (and older kernels' tmpfs) refuse O_DIRECT
_IN_RAM = ("ramfs", "tmpfs", "rootfs")

# One line per path: path, kind (f/d/-), size, real path, mount point, mount type,
# statfs type, dd O_DIRECT result (ok/refused/unknown/empty when no dd).
_PROBE = r'''T=$(printf '\t')
for p in "$@"; do
  if [ ! -e "$p" ]; then printf '%s\n' "$p$T-"; continue; fi
  k=d; [ -f "$p" ] && k=f
  size=$(stat -L -c %s -- "$p" 2>/dev/null)
  real=$(realpath -- "$p" 2>/dev/null) || real=$p
  mp= mt=
  while read -r dev mnt typ rest; do
    case $mnt in
      /) m=/ ;;
      *) case $real in "$mnt"|"$mnt"/*) m=$mnt ;; *) continue ;; esac ;;
    esac
    [ ${#m} -ge ${#mp} ] && { mp=$m; mt=$typ; }
  done 2>/dev/null < /proc/mounts
  ft=$(stat -f -c %T -- "$p" 2>/dev/null)
  od=
  if [ "$k" = f ] && command -v dd >/dev/null 2>&1; then
    if out=$(dd if="$p" of=/dev/null bs=4096 count=1 iflag=direct 2>&1); then od=ok
    else case $out in *nvalid\ argument*) od=refused ;; *) od=unknown ;; esac; fi
  fi
  printf '%s\n' "$p$T$k$T$size$T$real$T$mp$T$mt$T$ft$T$od"
done'''


class PathWarning(str):
    """A warning message that also says which cells it concerns: the model, and the configs
    (None: every config of that model)."""

    model: str
    configs: frozenset[str] | None

    def __new__(cls, text: str, model: str, configs: frozenset[str] | None) -> "PathWarning":
        self = super().__new__(cls, text)
        self.model, self.configs = model, configs
        return self

    def applies(self, model: str, config: str) -> bool:
        return model == self.model and (self.configs is None or config in self.configs)


@dataclass
class PathInfo:
    path: str
    exists: bool
    kind: str = "-"
    size: int | None = None
    real: str = ""
    mount: str = ""
    fstype: str = ""
    odirect: str = ""

    def problem(self) -> str | None:
        """Why O_DIRECT streaming from here would not measure storage, or None."""
        fs = self.fstype
        where = f"{fs} file system (mounted at {self.mount})" if self.mount else f"{fs} file system"
        if fs.startswith(_BUFFERED) or fs.startswith("fuse."):
            if self.odirect == "refused":
                return f"on a {where} that refuses O_DIRECT (EINVAL)"
            if fs.startswith("fuse"):  # measured: tests/test_fuse.py
                return (f"on a {where}: O_DIRECT is accepted there but not honoured (the FUSE "
                        f"daemon reads the backing file through the page cache)")
            return f"on a {where}: O_DIRECT reads are served through a page cache"
        if fs in _IN_RAM:
            refuses = " and O_DIRECT is refused" if fs == "ramfs" or self.odirect == "refused" else ""
            return f"on a {where}, i.e. in RAM{refuses}: nothing is read from storage"
        if self.odirect == "refused":
            return f"on a {where} that refuses O_DIRECT (EINVAL)"
        return None


def streaming(flags: str) -> bool:
    return bool(_STREAMING.search(flags))


def probe_paths(transport: Transport, paths: list[str]) -> dict[str, PathInfo]:
    argv = [transport.shell, "-c", _PROBE, "sh", *paths]
    result = retry_link(transport, "the model path check",  # read-only: safe to repeat
                        lambda: transport.run(argv, timeout=120))
    infos: dict[str, PathInfo] = {}
    for line in result.stdout.decode("utf-8", errors="replace").splitlines():
        fields = line.split("\t")
        if len(fields) == 2 and fields[1] == "-":
            infos[fields[0]] = PathInfo(fields[0], exists=False)
        elif len(fields) == 8:
            path, kind, size, real, mount, mtype, ftype, odirect = fields
            infos[path] = PathInfo(path, True, kind, int(size) if size.isdigit() else None,
                                   real, mount, mtype or ftype, odirect)
    return infos


def check_model_paths(transport: Transport, loaded: LoadedMatrix) -> list[str]:
    """Warnings (PathWarning strings) about the matrix's model paths on this device; raises
    ConfigError under `path_check: refuse` when there is any."""
    matrix = loaded.matrix
    mode = matrix.path_check
    models = matrix.device_model_paths()
    paths = sorted(set(models.values()))
    if mode == "off" or not paths:
        return []
    stream_configs = frozenset(name for name, flags in expand_configs(matrix) if streaming(flags))
    infos = probe_paths(transport, paths)
    warnings: list[str] = []
    for model, path in models.items():
        info = infos.get(path)
        if info is None:
            warnings.append(PathWarning(f"model {model}: could not check {path} on "
                                        f"{transport.name}", model, frozenset()))
        elif not info.exists:
            warnings.append(PathWarning(f"model {model}: {path} does not exist on "
                                        f"{transport.name}", model, None))
        elif info.kind == "f" and info.size == 0:
            warnings.append(PathWarning(f"model {model}: {path} is empty", model, None))
        elif stream_configs and (why := info.problem()):
            names = ", ".join(sorted(stream_configs))
            warnings.append(PathWarning(
                f"model {model}: {path} is {why}; the streaming configs ({names}) would not "
                f"measure flash reads. Put the model on the device's own storage (Android: "
                f"/data/local/tmp, not /sdcard)", model, stream_configs))
    if warnings and mode == "refuse":
        raise ConfigError(f"{loaded.path}: path_check is `refuse` on {transport.name}: "
                          + "; ".join(warnings) + " (path_check: warn runs anyway)")
    return warnings
