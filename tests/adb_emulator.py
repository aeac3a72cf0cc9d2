"""An emulated Android phone: a device-side adb daemon (TCP transport) for orch's tests.

Attach it to a real adb server with `adb -P PORT connect 127.0.0.1:<phone.port>` (fixtures in
conftest_adb.py). Wire protocol: AOSP adb protocol.txt (24-byte LE header: command, arg0, arg1,
data length, byte-sum checksum, magic = command ^ 0xffffffff). Services: `shell:CMD` (v1),
`shell,v2[,opts]:CMD` (shell protocol; TERM= honoured, pty ignored: always pipes), `exec:CMD`
(as v1), `sync:` (adb_sync.py). Anything else is refused with CLSE.

Path mapping: device paths are REAL absolute paths on this machine. The fake root `.root`
(a temp dir, or the one passed in) holds an Android-like tree:
  .root/system/bin             the ONLY entry of PATH: toybox applet symlinks, sh -> mksh,
                               `getprop` and `dumpsys` shims (mksh scripts)
  .root/data/local/tmp         == .data_dir (stands for /data/local/tmp; orch's workdir)
  .root/sdcard -> .sdcard_dir  a dir under /dev/shm; where FUSE can be mounted it is, as on a
                               phone, a FUSE mount (bindfs, tests/fuse_mount.py) of
                               .root/data/media/0 (== .sdcard_backing): O_DIRECT is accepted
                               there and reads go through the backing file's page cache
                               (docs/path-check.md). Else, as root, a private ramfs mount (which
                               refuses O_DIRECT), else the plain tmpfs dir. `.sdcard_fs` says
                               which (fuse, ramfs, tmpfs), `.sdcard_fuse_error` why not FUSE,
                               `.sdcard_refuses_odirect` whether O_DIRECT opens fail there
  .root/sys/class/thermal/thermal_zone{0,1,2}/{type,temp}   $ORCH_THERMAL_DIR, temp in mC
  .root/sys/class/power_supply/battery/temp                 $ORCH_BATTERY_DIR, temp in dC
  .root/sys/class/power_supply/battery/{current_now,voltage_now,status,charge_counter,power_now}
                               only once a test calls set_power() (a PowerGauge scripts them)
  .root/sys/class/{powercap,hwmon}   $ORCH_POWERCAP_DIR, $ORCH_HWMON_DIR (empty: the phone has
                               no RAPL), $ORCH_POWER_SUPPLY_DIR = .root/sys/class/power_supply
  .root/proc/meminfo                                        $ORCH_MEMINFO
Commands run as `.root/system/bin/sh -c CMD` (mksh) with a clean environment, cwd = .root, in
their own session/process group. The group is SIGKILLed when the host closes the stream, the
connection drops or the phone stops; a job left running by a shell that ended normally
(`nohup x &`, `setsid x &`) lives on, as on a phone, until close().

Over 400 lines on purpose: one emulated phone (the adb wire protocol, its services and the
Android-like files) that the adb, phone and energy tests share; split, its pieces would only be
used together.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid

try:
    from .adb_sync import serve_sync
    from .fuse_mount import FuseMount
except ImportError:  # imported as a top-level module (tests/ on sys.path)
    from adb_sync import serve_sync
    from fuse_mount import FuseMount

A_CNXN, A_OPEN, A_OKAY, A_CLSE, A_WRTE = (
    struct.unpack("<I", c)[0] for c in (b"CNXN", b"OPEN", b"OKAY", b"CLSE", b"WRTE"))
VERSION, MAX_PAYLOAD, FEATURES = 0x01000001, 1 << 20, "shell_v2,cmd"
DEBUG = bool(os.environ.get("ORCH_EMU_DEBUG"))
DEFAULT_PROPS = {
    "ro.product.model": "EMU-15R", "ro.product.manufacturer": "OrchEmu",
    "ro.product.name": "emu", "ro.product.device": "emu",
    "ro.build.fingerprint": "orch/emu/emu:16/EMU.1/1:user/release-keys",
    "ro.build.version.release": "16", "ro.build.version.sdk": "36",
    "ro.soc.model": "EMU8650", "ro.board.platform": "emu", "ro.product.cpu.abi": "arm64-v8a",
}
THERMAL_ZONES = ("cpu-0-0", "cpu-1-0", "battery")
MEMINFO = {"MemTotal": 11_725_000, "MemFree": 1_250_000, "MemAvailable": 6_500_000,
           "Buffers": 4_000, "Cached": 4_900_000, "SwapCached": 0, "Active": 3_100_000,
           "Inactive": 4_200_000, "SwapTotal": 4_194_300, "SwapFree": 4_000_000}


def pack(cmd: int, a0: int, a1: int, data: bytes = b"") -> bytes:
    return struct.pack("<6I", cmd, a0, a1, len(data), sum(data) & 0xFFFFFFFF, cmd ^ 0xFFFFFFFF) + data


def _log(*a) -> None:
    if DEBUG:
        print("[emu]", *a, file=sys.stderr, flush=True)


def _write_atomic(path: str, text: str, mode: int | None = None) -> None:
    tmp = f"{path}.{threading.get_ident()}.tmp"
    with open(tmp, "w") as f:
        f.write(text)
    if mode is not None:
        os.chmod(tmp, mode)
    os.replace(tmp, path)


def _killpg(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


class Stream:
    """One adb stream. read()/read_exact() consume host WRTEs; write() honours flow control."""

    def __init__(self, conn: "_Conn", lid: int, rid: int):
        self.conn, self.lid, self.rid = conn, lid, rid
        self.cond, self.wlock = threading.Condition(), threading.Lock()
        self.inbuf = bytearray()
        self.ready = True  # False while our last WRTE waits for the host's OKAY
        self.closed = False
        self.on_close: list = []

    def feed(self, data: bytes) -> None:
        with self.cond:
            self.inbuf += data
            self.cond.notify_all()

    def read(self, n: int = 65536) -> bytes:
        """Up to n bytes; b"" once the stream is closed and drained."""
        with self.cond:
            while not self.inbuf and not self.closed:
                self.cond.wait()
            out = bytes(self.inbuf[:n])
            del self.inbuf[:n]
            return out

    def read_exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.read(n - len(buf))
            if not chunk:
                raise EOFError
            buf += chunk
        return bytes(buf)

    def write(self, data: bytes) -> None:
        """Send as WRTEs of <= the host's max payload, one in flight; BrokenPipeError if closed."""
        step = self.conn.max_payload
        with self.wlock:
            for i in range(0, len(data), step):
                with self.cond:
                    while not self.ready and not self.closed:
                        self.cond.wait()
                    if self.closed:
                        raise BrokenPipeError("stream closed")
                    self.ready = False
                self.conn.send(A_WRTE, self.lid, self.rid, data[i:i + step])

    def okayed(self) -> None:
        with self.cond:
            self.ready = True
            self.cond.notify_all()

    def close(self, send_clse: bool = True) -> None:
        with self.cond:
            if self.closed:
                return
            self.closed = True
            self.cond.notify_all()
        self.conn.forget(self)
        if send_clse:
            self.conn.send(A_CLSE, self.lid, self.rid)
        for cb in self.on_close:
            cb()


class _Conn:
    """One host connection (the adb server's transport to this device); run() is its reader."""

    def __init__(self, phone: "EmulatedPhone", sock: socket.socket):
        self.phone, self.sock = phone, sock
        self.wlock, self.lock = threading.Lock(), threading.Lock()
        self.streams: dict[int, Stream] = {}
        self.next_id, self.max_payload = 1, 4096
        self.thread = threading.Thread(target=self.run, daemon=True, name="adb-emu-conn")

    def send(self, cmd: int, a0: int, a1: int, data: bytes = b"") -> None:
        pkt = pack(cmd, a0, a1, data)
        try:
            with self.wlock:
                self.sock.sendall(pkt)
        except OSError:
            pass  # the reader notices the dead socket and tears everything down

    def forget(self, s: Stream) -> None:
        with self.lock:
            self.streams.pop(s.lid, None)

    def _recv(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise EOFError
            buf += chunk
        return bytes(buf)

    def run(self) -> None:
        try:
            while True:
                cmd, a0, a1, n, _chk, magic = struct.unpack("<6I", self._recv(24))
                if magic != cmd ^ 0xFFFFFFFF:
                    _log("bad magic", hex(cmd))
                    break
                self.handle(cmd, a0, a1, self._recv(n) if n else b"")
        except (OSError, EOFError):
            pass
        finally:
            self.close_streams()
            self.sock.close()
            with self.phone._lock:
                self.phone._conns.discard(self)

    def close_streams(self) -> None:
        with self.lock:
            streams = list(self.streams.values())
        for s in streams:
            s.close(send_clse=False)

    def handle(self, cmd: int, a0: int, a1: int, data: bytes) -> None:
        if cmd == A_CNXN:
            _log("CNXN", hex(a0), a1, data)
            self.close_streams()
            self.max_payload = max(256, min(a1, MAX_PAYLOAD))
            self.send(A_CNXN, VERSION, MAX_PAYLOAD, self.phone.banner().encode())
        elif cmd == A_OPEN:
            name = data.rstrip(b"\0").decode("utf-8", "surrogateescape")
            _log("OPEN", a0, repr(name[:200]))
            handler = self.phone._service(name)
            if handler is None:
                self.send(A_CLSE, 0, a0)
                return
            with self.lock:
                lid, self.next_id = self.next_id, self.next_id + 1
                s = self.streams[lid] = Stream(self, lid, a0)
            self.send(A_OKAY, lid, a0)
            threading.Thread(target=self._serve, args=(handler, s), daemon=True).start()
        elif cmd in (A_OKAY, A_WRTE, A_CLSE):
            with self.lock:
                s = self.streams.get(a1)
            if s is None:
                return  # e.g. the host's CLSE answering ours
            if cmd == A_OKAY:
                s.okayed()
            elif cmd == A_WRTE:
                s.feed(data)
                self.send(A_OKAY, a1, a0)
            else:
                s.close()  # answered by our CLSE
        else:
            _log("ignored packet", struct.pack("<I", cmd))

    @staticmethod
    def _serve(handler, s: Stream) -> None:
        try:
            handler(s)
        except (BrokenPipeError, EOFError):
            pass
        except Exception as e:  # keep the daemon alive; show what broke
            print(f"[emu] service error: {e!r}", file=sys.stderr)
        finally:
            s.close()


class EmulatedPhone:
    """A fake Android device speaking adb over TCP on 127.0.0.1:port (see the module doc)."""

    def __init__(self, root: str | None = None, port: int = 0, props: dict | None = None,
                 env: dict | None = None, mount_sdcard: bool = True):
        self._own_root = root is None
        self.root = os.path.realpath(root or tempfile.mkdtemp(prefix="orch-emu-"))
        self.props = {**DEFAULT_PROPS, **(props or {})}
        self.port, self.instance = port, uuid.uuid4().hex
        self._lsock: socket.socket | None = None
        self._conns: set[_Conn] = set()
        self._procs: set[subprocess.Popen] = set()
        self._lock = threading.Lock()
        self._build_tree(mount_sdcard)
        self.env = {
            "PATH": self.bin_dir, "HOME": self.root, "TMPDIR": self.data_dir, "SHELL": self.sh,
            "USER": "shell", "LOGNAME": "shell", "HOSTNAME": "localhost",
            "ANDROID_ROOT": os.path.join(self.root, "system"),
            "ANDROID_DATA": os.path.join(self.root, "data"), "EXTERNAL_STORAGE": self.sdcard_dir,
            "ORCH_THERMAL_DIR": self.thermal_dir, "ORCH_BATTERY_DIR": self.battery_dir,
            "ORCH_MEMINFO": self.meminfo_path, "ORCH_EMU_INSTANCE": self.instance,
            "ORCH_POWERCAP_DIR": self.powercap_dir, "ORCH_HWMON_DIR": self.hwmon_dir,
            "ORCH_POWER_SUPPLY_DIR": os.path.dirname(self.battery_dir), **(env or {}),
        }

    @property
    def serial(self) -> str:
        return f"127.0.0.1:{self.port}"

    # ----- the Android-like world -------------------------------------------------------
    def _build_tree(self, mount_sdcard: bool) -> None:
        j = os.path.join
        self.bin_dir, self.sh = j(self.root, "system", "bin"), j(self.root, "system", "bin", "sh")
        self.data_dir = j(self.root, "data", "local", "tmp")
        self.thermal_dir = j(self.root, "sys", "class", "thermal")
        self.battery_dir = j(self.root, "sys", "class", "power_supply", "battery")
        self.powercap_dir = j(self.root, "sys", "class", "powercap")
        self.hwmon_dir = j(self.root, "sys", "class", "hwmon")
        self.meminfo_path = j(self.root, "proc", "meminfo")
        self.prop_file = j(self.root, "system", "build.prop")
        for d in (self.bin_dir, self.data_dir, self.battery_dir, j(self.root, "proc"),
                  self.powercap_dir, self.hwmon_dir):
            os.makedirs(d, exist_ok=True)
        toybox, mksh = shutil.which("toybox"), shutil.which("mksh")
        if not (toybox and mksh):
            raise RuntimeError("EmulatedPhone needs mksh and toybox (apt-get install mksh toybox)")
        applets = subprocess.run([toybox], capture_output=True, text=True, check=True).stdout.split()
        links = {name: toybox for name in applets + ["toybox"] if name not in ("sh", "getprop", "dumpsys")}
        links.update({"sh": mksh, **{n: None for n in ("getprop", "dumpsys")}})
        for name, target in links.items():
            path = j(self.bin_dir, name)
            if os.path.lexists(path):
                os.unlink(path)
            if target:
                os.symlink(target, path)
        _write_atomic(j(self.bin_dir, "getprop"), GETPROP.format(mksh=mksh, f=self.prop_file), 0o755)
        _write_atomic(j(self.bin_dir, "dumpsys"), DUMPSYS.format(mksh=mksh, d=self.battery_dir), 0o755)
        self.write_props()
        for i, kind in enumerate(THERMAL_ZONES):
            os.makedirs(j(self.thermal_dir, f"thermal_zone{i}"), exist_ok=True)
            _write_atomic(j(self.thermal_dir, f"thermal_zone{i}", "type"), kind + "\n")
            self.set_temp(i, 30.0 + i)
        self.set_temp("battery", 28.5)
        self.meminfo = dict(MEMINFO)
        self.set_meminfo()
        _remove_stale_sdcards()
        self.sdcard_dir = tempfile.mkdtemp(prefix=f"orch-emu-sdcard-{os.getpid()}-", dir="/dev/shm")
        self._mount_sdcard(mount_sdcard)
        if os.path.lexists(j(self.root, "sdcard")):
            os.unlink(j(self.root, "sdcard"))
        os.symlink(self.sdcard_dir, j(self.root, "sdcard"))
        self.sdcard_refuses_odirect = _odirect_refused(self.sdcard_dir)

    def _mount_sdcard(self, mount: bool) -> None:
        """/sdcard as on a phone: FUSE over data/media/0; else ramfs (root); else tmpfs."""
        self.sdcard_backing = os.path.join(self.root, "data", "media", "0")
        os.makedirs(self.sdcard_backing, exist_ok=True)
        self.sdcard_fs, self.sdcard_fuse_error = "tmpfs", "mount_sdcard=False"
        self._sdcard_fuse: FuseMount | None = None
        self._sdcard_mounted = False
        if not mount:
            return
        try:
            self._sdcard_fuse = FuseMount(self.sdcard_backing, self.sdcard_dir).mount()
            self.sdcard_fs, self.sdcard_fuse_error = "fuse", None
            return
        except OSError as e:
            self.sdcard_fuse_error = str(e)
        self._sdcard_mounted = os.geteuid() == 0 and subprocess.run(
            ["mount", "-t", "ramfs", "-o", "mode=0775", "orch-emu-sdcard", self.sdcard_dir],
            check=False, capture_output=True).returncode == 0
        self.sdcard_fs = "ramfs" if self._sdcard_mounted else "tmpfs"

    def write_props(self) -> None:
        """Rewrite the file the getprop shim reads (call after changing `.props` in place)."""
        _write_atomic(self.prop_file, "".join(f"{k}={v}\n" for k, v in sorted(self.props.items())))

    def set_prop(self, name: str, value) -> None:
        self.props[name] = str(value)
        self.write_props()

    def _temp_file(self, zone) -> tuple[str, int]:
        if zone == "battery":
            return os.path.join(self.battery_dir, "temp"), 10  # deci-degrees C
        if isinstance(zone, str):
            zone = THERMAL_ZONES.index(zone)
        return os.path.join(self.thermal_dir, f"thermal_zone{int(zone)}", "temp"), 1000  # milli-C

    def set_temp(self, zone, celsius: float) -> None:
        """zone: 0/1/2, a zone type ('cpu-0-0') or 'battery'; the value is in degrees Celsius."""
        path, scale = self._temp_file(zone)
        _write_atomic(path, f"{round(celsius * scale)}\n")

    def get_temp(self, zone) -> float:
        path, scale = self._temp_file(zone)
        with open(path) as f:
            return int(f.read()) / scale

    def set_power(self, current: int | None = None, voltage: int | None = None,
                  status: str | None = None, charge_counter: int | None = None,
                  power: int | None = None) -> None:
        """Write the battery's power_supply files (values as the device's files hold them:
        current_now in µA or mA of either sign, voltage_now in µV or mV, charge_counter µAh,
        power_now µW, status Charging | Discharging | Full | Not charging)."""
        for name, value in (("current_now", current), ("voltage_now", voltage),
                            ("status", status), ("charge_counter", charge_counter),
                            ("power_now", power)):
            if value is not None:
                _write_atomic(os.path.join(self.battery_dir, name), f"{value}\n")

    def set_meminfo(self, **fields_kb: int) -> None:
        """Update /proc/meminfo-style fields (values in kB), e.g. set_meminfo(MemAvailable=1000)."""
        self.meminfo.update(fields_kb)
        _write_atomic(self.meminfo_path, "".join(f"{k + ':':<16}{v:>8} kB\n" for k, v in self.meminfo.items()))

    def banner(self) -> str:
        p = self.props
        return (f"device::ro.product.name={p['ro.product.name']};ro.product.model={p['ro.product.model']};"
                f"ro.product.device={p['ro.product.device']};features={FEATURES}")

    # ----- services ---------------------------------------------------------------------
    def _service(self, name: str):
        if name == "sync:":
            return serve_sync
        if name.startswith("exec:"):  # adb exec-out: like shell v1 (raw bytes, no exit code)
            return lambda s: self._shell(s, name[5:], False, None)
        head, sep, cmd = name.partition(":")
        opts = head.split(",")
        if not sep or opts[0] != "shell":
            return None
        term = [o[5:] for o in opts if o.startswith("TERM=")]
        return lambda s: self._shell(s, cmd, "v2" in opts[1:], term[0] if term else None)

    def _shell(self, s: Stream, cmd: str, v2: bool, term: str | None) -> None:
        P = subprocess.PIPE
        p = subprocess.Popen([self.sh, "-c", cmd] if cmd else [self.sh], cwd=self.root,
                             env={**self.env, "TERM": term} if term else self.env, stdin=P, stdout=P,
                             stderr=P if v2 else subprocess.STDOUT, start_new_session=True)
        with self._lock:
            self._procs.add(p)
        ended = []  # once the shell ended by itself, its background jobs may live on
        s.on_close.append(lambda: ended or _killpg(p.pid))
        if s.closed:  # the host closed the stream before we got here
            _killpg(p.pid)

        def pump(f, kind: int) -> None:
            with f:
                while chunk := f.read1(65536):
                    s.write(struct.pack("<BI", kind, len(chunk)) + chunk if v2 else chunk)

        def feed_stdin() -> None:
            with p.stdin:
                while True:
                    if v2:
                        kind, n = struct.unpack("<BI", s.read_exact(5))
                        data = s.read_exact(n) if n else b""
                        if kind == 4:  # close-stdin
                            return
                        if kind != 0:  # window size change and the like
                            continue
                    elif not (data := s.read()):
                        return
                    p.stdin.write(data)
                    p.stdin.flush()

        threads = [threading.Thread(target=_quietly, args=(pump, p.stdout, 1), daemon=True)]
        if v2:
            threads.append(threading.Thread(target=_quietly, args=(pump, p.stderr, 2), daemon=True))
        for t in threads + [threading.Thread(target=_quietly, args=(feed_stdin,), daemon=True)]:
            t.start()
        try:
            for t in threads:
                t.join()
            rc = p.wait()
            ended.append(True)
        finally:
            with self._lock:
                self._procs.discard(p)
        if v2 and not s.closed:
            s.write(struct.pack("<BIB", 3, 1, (128 - rc if rc < 0 else rc) & 0xFF))  # signal: 128+N

    # ----- lifecycle --------------------------------------------------------------------
    def start(self) -> "EmulatedPhone":
        if self._lsock is None:
            ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            ls.bind(("127.0.0.1", self.port))
            ls.listen(8)
            self.port, self._lsock = ls.getsockname()[1], ls
            self._accept_thread = threading.Thread(target=self._accept, args=(ls,), daemon=True)
            self._accept_thread.start()
        return self

    def _accept(self, ls: socket.socket) -> None:
        while True:
            try:
                sock, _ = ls.accept()
            except OSError:
                return
            _log("host connected")
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            c = _Conn(self, sock)
            with self._lock:
                self._conns.add(c)
            c.thread.start()

    def _halt(self, abrupt: bool) -> None:
        ls, self._lsock = self._lsock, None
        if ls is not None:
            _quietly(ls.shutdown, socket.SHUT_RDWR)  # wakes accept()
            ls.close()
            self._accept_thread.join(5)
        with self._lock:
            conns = list(self._conns)
        for c in conns:  # the reader wakes up, closes every stream, then the socket
            if abrupt:  # RST when it closes, like a cable pulled out
                _quietly(c.sock.setsockopt, socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            _quietly(c.sock.shutdown, socket.SHUT_RD if abrupt else socket.SHUT_RDWR)
        for c in conns:
            c.thread.join(5)
        with self._lock:
            procs = list(self._procs)
        for p in procs:
            _killpg(p.pid)
        for p in procs:
            _quietly(p.wait, 5)

    def stop(self) -> None:
        """Stop serving (FIN to the host); attached commands are killed. start() serves again."""
        self._halt(abrupt=False)

    def kill(self) -> None:
        """Vanish like an unplugged phone (RST to the host); attached commands are killed."""
        self._halt(abrupt=True)

    def restart(self) -> "EmulatedPhone":
        self.stop()
        return self.start()

    def running_pids(self) -> list[int]:
        """Every live process this phone started, detached ones (setsid/nohup) included."""
        pids, tag = [], f"ORCH_EMU_INSTANCE={self.instance}".encode()
        for d in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{d}/environ", "rb") as f:
                    if tag in f.read().split(b"\0"):
                        pids.append(int(d))
            except OSError:
                pass
        return pids

    def close(self) -> None:
        """kill(), kill every leftover process of this phone, remove what it created."""
        self.kill()
        for _ in range(5):  # a dying job may still fork: a few bounded rounds
            pids = self.running_pids()
            for pid in pids:
                _quietly(os.kill, pid, signal.SIGKILL)
            if not pids:
                break
            time.sleep(0.05)
        if self._sdcard_fuse is not None:
            self._sdcard_fuse.unmount()
            self._sdcard_fuse = None
        if self._sdcard_mounted:
            subprocess.run(["umount", "-l", self.sdcard_dir], check=False, capture_output=True,
                           timeout=10)
            self._sdcard_mounted = False
        shutil.rmtree(self.sdcard_dir, ignore_errors=True)
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> "EmulatedPhone":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()


class PowerGauge(threading.Thread):
    """A battery fuel gauge the test scripts: every `every_s` seconds it writes the files
    `profile(t)` gives (set_power's keywords; t = seconds since start()) into the phone's
    power_supply directory, until stop(). A real gauge updates every few seconds, so
    every_s=5 is one that updates slower than orch samples. `written`: (t, values) in order."""

    def __init__(self, phone: "EmulatedPhone", profile, every_s: float = 0.05) -> None:
        super().__init__(daemon=True, name="emu-power-gauge")
        self.phone, self.profile, self.every_s = phone, profile, every_s
        self.written: list[tuple[float, dict]] = []
        self._halt = threading.Event()
        self.phone.set_power(**profile(0.0))

    def run(self) -> None:
        t0 = time.monotonic()
        while not self._halt.wait(self.every_s):   # the gauge's own period, not a test wait
            t = time.monotonic() - t0
            values = self.profile(t)
            self.phone.set_power(**values)
            self.written.append((t, values))

    def stop(self) -> None:
        self._halt.set()
        self.join(10)


def _quietly(fn, *args) -> None:
    """Call fn(*args), ignoring the errors a torn-down stream, pipe or socket raises."""
    try:
        fn(*args)
    except (OSError, EOFError, ValueError, subprocess.TimeoutExpired):
        pass


def _odirect_refused(d: str) -> bool:
    p = os.path.join(d, ".odirect-probe")
    try:
        os.close(os.open(p, os.O_CREAT | os.O_WRONLY | os.O_DIRECT, 0o600))
        return False
    except OSError:
        return True
    finally:
        if os.path.exists(p):
            os.unlink(p)


def _remove_stale_sdcards() -> None:
    """Unmount and remove sdcard dirs of test processes that died without close()."""
    for name in os.listdir("/dev/shm"):
        parts = name.split("-")
        if name.startswith("orch-emu-sdcard-") and len(parts) > 4 and not os.path.exists(f"/proc/{parts[3]}"):
            subprocess.run(["umount", "-l", f"/dev/shm/{name}"], check=False, capture_output=True,
                           timeout=10)
            shutil.rmtree(f"/dev/shm/{name}", ignore_errors=True)


GETPROP = """#!{mksh}
# getprop shim (orch adb emulator): answers from {f}
if [ $# -eq 0 ]; then
  while IFS= read -r l; do print -r -- "[${{l%%=*}}]: [${{l#*=}}]"; done < '{f}'
  exit 0
fi
while IFS= read -r l; do
  [ "${{l%%=*}}" = "$1" ] && {{ print -r -- "${{l#*=}}"; exit 0; }}
done < '{f}'
print -r -- "$2"
"""
DUMPSYS = """#!{mksh}
# dumpsys shim (orch adb emulator): only `dumpsys battery`
case "$1" in
battery)
  read -r t < '{d}/temp'
  print "Current Battery Service state:"
  print "  AC powered: false\\n  USB powered: true\\n  Wireless powered: false"
  print "  status: 2\\n  health: 2\\n  present: true\\n  level: 80\\n  scale: 100"
  print "  voltage: 4012\\n  temperature: $t\\n  technology: Li-ion" ;;
*) print -u2 "Can't find service: $1"; exit 1 ;;
esac
"""
