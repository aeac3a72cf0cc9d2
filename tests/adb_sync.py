"""The device side of adb's `sync:` service (file transfer), for tests/adb_emulator.py.

Protocol (AOSP adb SYNC.TXT, v1 only: the emulator does not advertise stat_v2/ls_v2/sendrecv_v2):
every request is a 4-byte id + u32 LE length + that many bytes (a path, except DATA/DONE).
  STAT path  -> "STAT" mode u32, size u32, mtime u32 (all 0 when the path does not exist; lstat)
  LIST path  -> "DENT" mode size mtime namelen name ... then "DONE" + 16 zero bytes
  SEND "path,mode" then "DATA" len + bytes (<= 64 KiB) ... "DONE" mtime -> "OKAY" 0 | "FAIL" len msg
  RECV path  -> "DATA" len + bytes ... "DONE" 0 | "FAIL" len msg
  QUIT       -> the stream is closed
Device paths are real paths on this machine (see adb_emulator.py).
"""
from __future__ import annotations

import os
import stat
import struct

SYNC_DATA_MAX = 64 * 1024
MAX_PATH = 1024


def _u32(n: int) -> bytes:
    return struct.pack("<I", n & 0xFFFFFFFF)


def _fail(msg: str) -> bytes:
    raw = msg.encode("utf-8", "replace")
    return b"FAIL" + _u32(len(raw)) + raw


def _fs(path: bytes) -> str:
    return os.fsdecode(path)


def _stat_tuple(path: str):
    try:
        st = os.lstat(path)
    except OSError:
        return 0, 0, 0
    return st.st_mode, st.st_size, int(st.st_mtime)


def serve_sync(stream) -> None:
    """Serve one sync: stream; `stream` has read_exact(n) (EOFError at the end) and write(bytes)."""
    while True:
        try:
            hdr = stream.read_exact(8)
        except EOFError:
            return
        cid, n = hdr[:4], struct.unpack("<I", hdr[4:])[0]
        if cid == b"QUIT":
            return
        if n > MAX_PATH:
            stream.write(_fail(f"path too long: {n}"))
            return
        arg = stream.read_exact(n) if n else b""
        if cid == b"STAT":
            stream.write(b"STAT" + b"".join(_u32(v) for v in _stat_tuple(_fs(arg))))
        elif cid == b"LIST":
            _list(stream, _fs(arg))
        elif cid == b"SEND":
            if not _send(stream, arg):
                return
        elif cid == b"RECV":
            _recv(stream, _fs(arg))
        else:
            stream.write(_fail(f"unknown sync command {cid!r}"))
            return


def _list(stream, path: str) -> None:
    out = bytearray()
    try:
        names = [".", ".."] + sorted(os.listdir(path))
    except OSError:
        names = []
    for name in names:
        try:
            st = os.lstat(os.path.join(path, name))
        except OSError:
            continue
        raw = os.fsencode(name)
        out += b"DENT" + _u32(st.st_mode) + _u32(st.st_size) + _u32(int(st.st_mtime))
        out += _u32(len(raw)) + raw
        if len(out) >= SYNC_DATA_MAX:
            stream.write(bytes(out))
            out.clear()
    stream.write(bytes(out) + b"DONE" + bytes(16))


def _send_target(spec: bytes):
    """ID_SEND's `path,mode`: (path, mode, the open file or None, the error or None)."""
    path_b, comma, mode_b = spec.rpartition(b",")
    err = None
    mode = 0o100644
    if not comma:
        path_b, err = spec, "missing , in ID_SEND"
    else:
        try:
            mode = int(mode_b)
        except ValueError:
            err = f"bad mode {mode_b!r}"
    path = _fs(path_b)
    f = None
    if err is None and not stat.S_ISLNK(mode):
        try:
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            if os.path.lexists(path) and not os.path.isdir(path):
                os.unlink(path)
            f = open(path, "wb")
        except OSError as e:
            err = f"couldn't create file: {e.strerror}"
    return path, mode, f, err


def _finish_send(path: str, mode: int, f, link_target: bytearray, mtime: int) -> str | None:
    """DONE: make the symlink, or close the file and set its mode and mtime; the error."""
    try:
        if stat.S_ISLNK(mode):
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            if os.path.lexists(path):
                os.unlink(path)
            os.symlink(bytes(link_target).rstrip(b"\0"), path)
        else:
            f.close()
            os.chmod(path, mode & 0o7777)
            os.utime(path, (mtime, mtime))
    except OSError as e:
        return f"{e.strerror}"
    return None


def _send(stream, spec: bytes) -> bool:
    """Receive one file; False when the stream must be closed (protocol violation)."""
    path, mode, f, err = _send_target(spec)
    is_link = stat.S_ISLNK(mode)
    link_target = bytearray()
    while True:
        try:
            hdr = stream.read_exact(8)
        except EOFError:
            break
        cid, n = hdr[:4], struct.unpack("<I", hdr[4:])[0]
        if cid == b"DATA":
            if n > SYNC_DATA_MAX:
                stream.write(_fail(f"data packet too large: {n}"))
                break
            data = stream.read_exact(n)
            if err is None:
                try:
                    if is_link:
                        link_target += data
                    else:
                        f.write(data)
                except OSError as e:
                    err = f"write failed: {e.strerror}"
            continue
        if cid != b"DONE":
            stream.write(_fail(f"invalid data message {cid!r}"))
            break
        if err is None:
            err = _finish_send(path, mode, f, link_target, n)
        if err is None:
            stream.write(b"OKAY" + _u32(0))
            return True
        stream.write(_fail(err))
        _discard(f, path)
        return True
    _discard(f, path)
    return False


def _discard(f, path: str) -> None:
    if f is not None and not f.closed:
        f.close()
        try:
            os.unlink(path)
        except OSError:
            pass


def _recv(stream, path: str) -> None:
    try:
        f = open(path, "rb")
    except OSError as e:
        stream.write(_fail(f"open failed: {e.strerror}"))
        return
    with f:
        while True:
            try:
                chunk = f.read(SYNC_DATA_MAX)
            except OSError as e:
                stream.write(_fail(f"read failed: {e.strerror}"))
                return
            if not chunk:
                break
            stream.write(b"DATA" + _u32(len(chunk)) + chunk)
    stream.write(b"DONE" + _u32(0))
