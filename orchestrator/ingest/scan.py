"""Which files of a study folder `orch import` reads, and why it reads no others.

The folder is walked recursively. Every regular file is classified by its name (what it holds is
checked when it is read, ingest/checks.py); every other entry gets a reason:
- `<stem>.csv`: a run's per-token CSV; `<stem>.metrics` / `.log` / `.out` beside it are its
  sidecars (pressure values, summary lines, whole stdout);
- `<tag>.route.csv`: a routing trace, one run with `<tag>.metrics` as its per-token CSV;
- `driver*.log`: a matrix driver's log, read for each run's ENTRY STATE line;
- a `.out` / `.log` without a CSV of its stem: a matrix driver's stdout, whose
  `==== NAME ====` sections may be summary-only runs (decided when read);
- `<tag>.state`: device state before/after the run `<tag>`;
- by content, whatever the name (ingest/sniff.py): turn records (`BMOE_DONE` lines), device
  series (`.mem`-style, sample CSVs with a time column) and summary logs (`.txt` ...).
A design file's `files:` rules (glob -> kind) come before all of these.
Nothing that is not a regular file is opened (a FIFO would block the import forever), so the
type is taken from stat() first; symlinked folders are not followed (no loops), a symlink loop
(a -> b, b -> a) is skipped as such, and a symlink to a file outside the folder is skipped with
its target (an import reads the folder it was given, nothing else). A name that is not UTF-8
is skipped with its bytes shown as `\xff`.
"""
from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass, field
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.ingest.sniff import sniff

if TYPE_CHECKING:
    from orchestrator.config.design import FileRule

ROUTE_SUFFIX = ".route.csv"   # bmoe-cli --route-trace; its run's per-token CSV is <tag>.metrics
SIDECAR_SUFFIXES = (".metrics", ".log", ".out")
CSV_HEAD = 64 * 1024      # a CSV's header is read to tell a sample CSV from a per-token one
_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISDIR, "a folder"))


@dataclass
class RunFiles:
    """The files of one run found in one folder."""

    config: str                       # the run's name: its stem, under its subfolder
    csv: Path                         # the per-token CSV (a traced run's <tag>.metrics)
    sidecars: list[Path] = field(default_factory=list)
    route: Path | None = None
    state: Path | None = None


@dataclass
class Series:
    """A device series file: its subfolder, path, kind (`series`: .mem-style, `samples`: a
    CSV) and the design's rule for it (None: read by its header)."""

    folder: str
    path: Path
    kind: str
    rule: FileRule | None = None


@dataclass
class Scan:
    runs: list[RunFiles] = field(default_factory=list)
    turn_files: list[tuple[str, Path]] = field(default_factory=list)   # (subfolder, file)
    series: list[Series] = field(default_factory=list)
    stdouts: list[tuple[str, Path]] = field(default_factory=list)   # (subfolder, file)
    driver_logs: dict[str, list[Path]] = field(default_factory=dict)  # subfolder -> logs
    skipped: list[tuple[str, str]] = field(default_factory=list)     # (relative path, reason)


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


Rules = Callable[[str], "FileRule | None"]


def scan(folder: Path, max_bytes: int, rules: Rules | None = None) -> Scan:
    """Every file under `folder`, classified (see the module doc). `rules`: a design's
    `files:` rule of a path relative to the folder (Design.file_rule)."""
    out = Scan()
    _walk(folder, folder, out, max_bytes, rules or (lambda _rel: None))
    return out


def _walk(top: Path, folder: Path, out: Scan, max_bytes: int, rules: Rules) -> None:
    rel = folder.relative_to(top).as_posix()
    rel = "" if rel == "." else rel
    files: dict[str, Path] = {}
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError as exc:
        out.skipped.append((rel or ".", f"unreadable folder: {exc.strerror or exc}"))
        return
    for entry in entries:
        name = f"{rel}/{entry.name}" if rel else entry.name
        if not _utf8(entry.name):   # a folder too: nothing under it is named in text either
            out.skipped.append((os.fsencode(name).decode("utf-8", "backslashreplace"),
                                "its name is not UTF-8 (the store keeps names as text): "
                                "rename it to import it"))
            continue
        if entry.is_symlink():
            reason = _symlink_reason(top, entry.path)
            if reason is not None:
                out.skipped.append((name, reason))
                continue
        if entry.is_dir(follow_symlinks=False):
            _walk(top, Path(entry.path), out, max_bytes, rules)
            continue
        try:
            info = os.stat(entry.path)       # follows a symlink to what would be opened
        except OSError as exc:
            out.skipped.append((name, f"unreadable: {exc.strerror or exc}"))
            continue
        if not stat.S_ISREG(info.st_mode):
            out.skipped.append((name, f"not a regular file ({_kind(info.st_mode)}), not opened"))
        elif info.st_size > max_bytes:
            out.skipped.append((name, (f"too large ({info.st_size >> 20} MiB > "
                                      f"{max_bytes >> 20} MiB limit)")))
        elif not os.access(entry.path, os.R_OK):
            out.skipped.append((name, "unreadable: permission denied"))
        else:
            files[entry.name] = Path(entry.path)
    _classify(rel, files, out, rules)


def _utf8(name: str) -> bool:
    """Whether a file name read from the disk was valid UTF-8 (Python keeps each byte that was
    not as a lone surrogate, which no store or terminal can write)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _symlink_reason(top: Path, path: str) -> str | None:
    """Why the symlink `path` is not read, or None to read what it points to (a file inside
    `top`). A loop raises ELOOP from every stat(), so it is named here, not left to abort."""
    try:
        target = Path(os.path.realpath(path, strict=True))
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "symlink loop"
        return f"unreadable: {exc.strerror or exc}"
    if target.is_dir():
        return "symlink to a folder, not followed"
    root = Path(os.path.realpath(top))
    if not target.is_relative_to(root):
        return f"symlink to a file outside the folder ({target})"
    return None


def _classify(rel: str, files: dict[str, Path], out: Scan, rules: Rules) -> None:
    used: set[str] = set()
    _ruled(rel, files, out, used, rules)
    runs = _runs(rel, files, out, used)
    _attach(runs, files, used)
    _leftovers(rel, files, used, out)
    out.runs.extend(runs[k] for k in sorted(runs))


def _named(rel: str, stem: str) -> str:
    return f"{rel}/{stem}" if rel else stem


def _runs(rel: str, files: dict[str, Path], out: Scan, used: set[str]) -> dict[str, RunFiles]:
    """The folder's runs by stem: each per-token CSV, and each route trace with its run's
    CSV or .metrics (a trace without either is skipped)."""
    runs: dict[str, RunFiles] = {}
    for fname, path in files.items():
        if fname in used:
            continue
        if fname.endswith(ROUTE_SUFFIX):
            tag = fname[:-len(ROUTE_SUFFIX)]
            metrics = f"{tag}.metrics"
            if f"{tag}.csv" in files:
                runs.setdefault(tag, RunFiles(_named(rel, tag), files[f"{tag}.csv"])).route = path
            elif metrics in files:
                runs.setdefault(tag, RunFiles(_named(rel, tag), files[metrics])).route = path
                used.add(metrics)
            else:
                out.skipped.append((_named(rel, fname), (f"route trace without its {metrics} "
                                                         "(the traced run's per-token CSV)")))
                continue
            used.add(fname)
        elif fname.endswith(".csv") and sniff(path, CSV_HEAD) == "samples":
            out.series.append(Series(rel, path, "samples"))
            used.add(fname)
        elif fname.endswith(".csv"):
            runs.setdefault(path.stem, RunFiles(_named(rel, path.stem), path)).csv = path
            used.add(fname)
    return runs


def _ruled(rel: str, files: dict[str, Path], out: Scan, used: set[str], rules: Rules) -> None:
    """The files a design's `files:` rule says what they are, before any recognition."""
    for fname, path in files.items():
        rule = rules(_named(rel, fname))
        if rule is None or (rule.kind == "runs" and fname.endswith(".csv")):
            continue                   # a per-token CSV: _runs takes it by its stem
        if rule.kind == "runs":
            out.runs.append(RunFiles(_named(rel, path.stem), path))
        elif rule.kind == "turns":
            out.turn_files.append((rel, path))
        elif rule.kind == "samples":
            out.series.append(Series(rel, path, "samples", rule))
        else:
            out.stdouts.append((rel, path))
        used.add(fname)


def _attach(runs: dict[str, RunFiles], files: dict[str, Path], used: set[str]) -> None:
    """Each run's sidecars and .state file, by its stem."""
    for stem, run in runs.items():
        for suffix in SIDECAR_SUFFIXES:
            side = files.get(stem + suffix)
            if side is not None and side != run.csv:
                run.sidecars.append(side)
                used.add(side.name)
        state = files.get(stem + ".state")
        if state is not None:
            run.state = state
            used.add(state.name)


def _leftovers(rel: str, files: dict[str, Path], used: set[str], out: Scan) -> None:
    """What no run took: driver logs, matrix stdouts, or skipped with the reason."""
    for fname, path in files.items():
        if fname in used:
            continue
        kind = sniff(path)
        if kind == "turns":
            out.turn_files.append((rel, path))
        elif kind in ("series", "samples"):
            out.series.append(Series(rel, path, kind))
        elif fname.startswith("driver") and fname.endswith(".log"):
            out.driver_logs.setdefault(rel, []).append(path)
        elif path.suffix in (".out", ".log") or kind == "summary-log":
            out.stdouts.append((rel, path))
        elif path.suffix == ".metrics":
            out.skipped.append((_named(rel, fname),
                                f"sidecar without its CSV (no {path.stem}.csv)"))
        elif path.suffix == ".state":
            out.skipped.append((_named(rel, fname), (f"state file without its run (no "
                                                     f"{path.stem}.csv or {path.stem}{ROUTE_SUFFIX})")))
        else:
            out.skipped.append((_named(rel, fname), ("unknown kind (not a per-token .csv, a "
                                                     "sidecar .metrics/.log/.out, a driver "
                                                     "log, a summary log, turn records, a "
                                                     "device series or a .state file; a "
                                                     "design's `files:` can say what it is)")))
