"""A real FUSE mount for the tests: Debian's `bindfs` over /dev/fuse, mounted and unmounted with
bounded waits.

Why bindfs: it is a plain pass-through FUSE daemon (like Android's /sdcard daemon over
/data/media), packaged in Debian, and needs no code of ours. It runs in the foreground (`-f`)
as a child we own, so a mount that will not go away can still be ended by its pid.
`fuse_unavailable()` says why FUSE cannot be mounted here (None when it can); tests hand that
to ci.unavailable(), so under CI a machine without FUSE fails.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from typing import Self

import waiting

MOUNT_WAIT = 10.0  # seconds a mount or unmount may take before it counts as failed


def mount_type(path: str) -> str | None:
    """The /proc/mounts type of the mount exactly at `path` (None: nothing mounted there)."""
    path = os.path.realpath(path)
    found = None
    with open("/proc/mounts") as f:
        for line in f:
            fields = line.split()
            if len(fields) >= 3 and fields[1].replace("\\040", " ") == path:
                found = fields[2]  # the last one listed is the one on top
    return found


def _wait(pred, timeout: float) -> bool:
    return waiting.wait_until(pred, timeout, 0.02)


class FuseMount:
    """`bindfs -f SOURCE MOUNTPOINT`: MOUNTPOINT shows SOURCE through a FUSE daemon."""

    def __init__(self, source: str, mountpoint: str):
        self.source, self.mountpoint = os.path.realpath(source), os.path.realpath(mountpoint)
        self.proc: subprocess.Popen | None = None

    def mount(self) -> Self:
        """Mount, or raise OSError with bindfs's own words (and the exit code)."""
        bindfs = shutil.which("bindfs")
        if bindfs is None:
            raise OSError("bindfs is not installed (apt-get install bindfs fuse3)")
        with tempfile.TemporaryFile() as log:
            self.proc = subprocess.Popen([bindfs, "-f", self.source, self.mountpoint],
                                         stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                         start_new_session=True)
            up = _wait(lambda: self.proc.poll() is not None or mount_type(self.mountpoint)
                       in ("fuse", "fuse.bindfs"), MOUNT_WAIT)
            if not up or self.proc.poll() is not None:
                rc = self.proc.poll()
                self.unmount()
                log.seek(0)
                words = log.read().decode(errors="replace").strip() or "no output"
                raise OSError(f"bindfs {self.source} {self.mountpoint} failed "
                              f"(exit {rc}): {words}")
        return self

    def unmount(self) -> None:
        """fusermount -u (umount -l if that fails), then end the daemon; all bounded."""
        if mount_type(self.mountpoint) in ("fuse", "fuse.bindfs"):
            for cmd in (["fusermount3", "-u", self.mountpoint], ["fusermount", "-u", self.mountpoint],
                        ["umount", "-l", self.mountpoint]):
                if shutil.which(cmd[0]) is None:
                    continue
                try:
                    subprocess.run(cmd, check=False, capture_output=True, timeout=MOUNT_WAIT)
                except subprocess.TimeoutExpired:
                    continue
                if _wait(lambda: mount_type(self.mountpoint) not in ("fuse", "fuse.bindfs"), 2.0):
                    break
        if self.proc is not None:
            try:
                self.proc.wait(MOUNT_WAIT)  # the daemon leaves once its mount is gone
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(MOUNT_WAIT)
            self.proc = None

    def __enter__(self) -> Self:
        return self.mount()

    def __exit__(self, *exc) -> None:
        self.unmount()


def fuse_unavailable() -> str | None:
    """Why a FUSE file system cannot be mounted on this machine, or None when one can (tried:
    a bindfs mount of a temp dir, unmounted again)."""
    if not os.path.exists("/dev/fuse"):
        return ("/dev/fuse does not exist (modprobe fuse; in a container: "
                "mknod /dev/fuse c 10 229, or run it with --device /dev/fuse)")
    with tempfile.TemporaryDirectory(prefix="orch-fuse-check-") as d:
        src, mnt = os.path.join(d, "src"), os.path.join(d, "mnt")
        os.mkdir(src)
        os.mkdir(mnt)
        try:
            with FuseMount(src, mnt):
                pass
        except OSError as e:
            return f"cannot mount FUSE: {e}"
    return None
