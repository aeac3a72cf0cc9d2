#!/usr/bin/env python3
"""moe-probe: orch's built-in synthetic expert-streaming engine.
(One file of ~880 lines on purpose: it is pushed to a device alone and runs there with
nothing of orch beside it; the session mode below, bmoe-cli's second way of running, needs the
engine's cache and routing state, so it cannot live in a second file that is pushed apart.)

Not a model but a real expert-streaming workload: a synthetic expert file (layers x experts x
expert size) is read expert by expert, per token and layer, through an LRU cache by mmap, pread
or O_DIRECT, with a small matrix-vector product per expert. It writes bmoe-cli's per-token CSV,
`# summary` trailer and stdout summary lines (docs/formats.md sections 1-3), so
the bmoe parsers read it unchanged. Stdlib only: it is pushed to devices that may only have
python3. Exit codes: 0 ok, 1 a fatal session error, 2 usage, 3 O_DIRECT refused by
the file system, 143 SIGTERM.

Routing looks like real routing along the two axes the studies measure: --keep-frac, the share
of a layer's experts the next token keeps (token-to-token locality), and --skew, a per-layer
Zipf popularity of the experts (0 = uniform, the default). --route-trace PATH writes it as
bmoe-cli's `# route_trace v1` (docs/routes.md section 1).

--session speaks bmoe-cli's session protocol (docs/formats.md, "Session mode"): the model stays
loaded, JSON requests arrive on stdin (generate / cancel / close, EOF = close) and BMOE_READY,
BEGIN, LOAD, PROGRESS, DONE and ERROR lines go to stdout; the CSV spans every turn with a `turn`
column and a `# summary` trailer per turn. The expert cache stays warm across turns, and an idle
gap before a request evicts a share 1-exp(-idle/--idle-evict-tau) of it, so the next turn
re-warms. A request may carry a test-only `"simulate_idle_s"`, added to the idle time measured.
"""
import argparse  # noqa: E401
import concurrent.futures
import errno
import json
import math
import mmap
import os
import queue
import random
import re
import resource  # noqa: E401
import signal
import sys
import threading
import time
import zlib
from collections import OrderedDict
from operator import mul

MIB = 1 << 20
ALIGN = 4096   # O_DIRECT wants offset, length and buffer aligned to the logical block size
DIM = 64       # width of the hidden vector that every expert's matrix multiplies
# Byte 3 of a little-endian float32 holds the sign and the top exponent bits. Forcing them into
# 0x3C..0x3F (sign kept) makes every float finite with magnitude in [2^-7, 2): no NaN/inf.
EXP_TABLE = bytes(0x3C | (b & 0x83) for b in range(256))
SYLLABLES = ("ka", "lo", "mi", "ra", "to", "ne", "su", "vi",
             "an", "or", "el", "us", "pa", "di", "he", "zo")
DEFAULT_PROMPT = "Explain how a mixture of experts model streams its experts from flash"


class Terminated(Exception):
    """Raised from the SIGTERM handler so the run stops without writing a trailer."""


def default_cache_dir():
    if os.environ.get("ORCH_PROBE_CACHE"):
        return os.environ["ORCH_PROBE_CACHE"]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "orch", "moe-probe")


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    def _get_help_string(self, action):  # no "(default: None)" noise on flags and paths
        return action.help if action.default is None or action.default is False else \
            super()._get_help_string(action)


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="moe-probe", formatter_class=HelpFormatter,
        description="Synthetic MoE expert-streaming workload writing bmoe-cli format output "
        "(per-token CSV, # summary trailer, summary lines on stdout).",
        epilog="Exit status: 0 done, 1 a fatal session error (BMOE_ERROR fatal:true), 2 usage "
        "error, 3 O_DIRECT refused by the file system, 143 SIGTERM (rows written so far stay, "
        "no # summary trailer).")
    a = p.add_argument
    a("--layers", type=int, default=8, help="MoE layers in the expert file")
    a("--experts", type=int, default=32, help="experts per layer")
    a("--expert-mb", type=float, default=0.25, help="MiB per expert, rounded up to 4 KiB")
    a("--top-k", type=int, default=4, help="experts used per token and layer")
    a("--keep-frac", type=float, default=0.36, help="mean share of the previous token's "
      "experts kept on a layer; the rest are drawn fresh among the others")
    a("--skew", type=float, default=0.0, help="per-layer expert popularity: fresh experts are "
      "drawn with Zipf weights 1/rank^S over a seeded per-layer order of the experts; 0 = "
      "uniform")
    a("--route-trace", metavar="PATH", help="write the routing as a `# route_trace v1` file")
    a("--io", choices=("mmap", "pread", "odirect"), default="pread", help="how experts are "
      "read: mmap (page faults), pread, odirect (O_DIRECT, bypasses the page cache)")
    a("--odirect-fallback", action="store_true",
      help="if the file system refuses O_DIRECT, use pread instead of exiting 3")
    a("--cache-mb", type=float, default=0,
      help="LRU expert cache in MiB; hits cost no read; 0 = no cache")
    a("--io-threads", type=int, default=1, help="reader threads per layer")
    a("-n", dest="tokens", type=int, default=32, help="tokens to generate")
    a("--csv", help="write the bmoe per-token CSV here (rows flushed one by one)")
    a("-p", "--prompt", default=DEFAULT_PROMPT, help="prompt; one prefill pass per word")
    a("--prompt-file", help="read the prompt from this file (overrides -p)")
    a("--seed", type=int, default=0, help="routing seed")
    a("--cache-dir", default=None, help="where the expert file lives (default: "
      "$ORCH_PROBE_CACHE, else $XDG_CACHE_HOME/orch/moe-probe, else ~/.cache/orch/moe-probe)")
    a("--compute-kb", type=float, default=16, help="KiB of each expert used as a float32 "
      "matrix for the matrix-vector product: sets the compute cost")
    a("--threads", type=int, default=1,
      help="compute threads; only recorded, compute runs on one thread")
    a("--no-drop-cache", action="store_true",
      help="do not drop the expert file from the page cache before the first pass")
    a("--session", action="store_true", help="bmoe-cli's session mode: the model stays "
      "loaded, JSON requests on stdin, BMOE_* lines on stdout (docs/engines.md)")
    a("-c", "--ctx-size", dest="n_ctx", type=int, default=4096,
      help="session mode: context length; a request that would overflow it is rejected")
    a("--idle-evict-tau", type=float, default=5.0, help="session mode: after t idle seconds "
      "a share 1-exp(-t/TAU) of the cached experts is dropped (the OS reclaiming memory); "
      "0 = never")
    a("--fail-at-turn", type=int, default=0, metavar="N", help="session mode, for tests: turn "
      "N dies halfway with a fatal BMOE_ERROR and exit 1")
    args = p.parse_args(argv)
    if min(args.layers, args.experts, args.top_k, args.io_threads, args.tokens, args.threads,
           args.n_ctx) < 1:
        p.error("--layers, --experts, --top-k, --io-threads, --threads, -n and -c must be >= 1")
    if args.top_k > args.experts:
        p.error("--top-k cannot exceed --experts")
    if not 0 <= args.keep_frac <= 1 or args.expert_mb <= 0 or args.cache_mb < 0 \
            or args.compute_kb < 0 or not 0 <= args.skew <= 10 or args.idle_evict_tau < 0:
        p.error("--keep-frac must be in [0, 1]; --expert-mb > 0; --cache-mb, --compute-kb, "
                "--idle-evict-tau >= 0; --skew in [0, 10]")
    return args


def ensure_expert_file(cache_dir, layers, experts, size):
    """Path of the expert file, created if missing; (path, seconds spent creating or None)."""
    name = "experts-L%d-E%d-%dk.bin" % (layers, experts, size // 1024)
    path = os.path.join(cache_dir, name)
    try:
        if os.stat(path).st_size == layers * experts * size:
            return path, None
    except FileNotFoundError:
        pass
    t0 = time.perf_counter()
    os.makedirs(cache_dir, exist_ok=True)
    for fn in os.listdir(cache_dir):  # leftovers of creators that were SIGKILLed
        pid = fn.rpartition(".tmp.")[2]
        dead = pid.isdigit() and not pid_alive(int(pid))
        if fn.startswith("experts-") and ".tmp." in fn and dead:
            try:
                os.unlink(os.path.join(cache_dir, fn))
            except FileNotFoundError:  # another run cleaned it first
                pass
    tmp = "%s.tmp.%d" % (path, os.getpid())
    # The content depends on the geometry only, like the name, so any run may reuse the file.
    rng = random.Random("moe-probe L%d E%d S%d" % (layers, experts, size))
    try:
        with open(tmp, "wb") as f:
            for _ in range(layers * experts):
                buf = bytearray(rng.randbytes(size) if hasattr(rng, "randbytes")
                                else rng.getrandbits(size * 8).to_bytes(size, "little"))
                buf[3::4] = buf[3::4].translate(EXP_TABLE)
                f.write(buf)
            f.flush()
            os.fsync(f.fileno())  # clean pages can be dropped; no zero-filled file after a crash
        os.rename(tmp, path)      # atomic: a killed creation never leaves a file of the real name
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path, time.perf_counter() - t0


def pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def fs_type(path):
    """File system type of the mount holding path, from /proc/mounts ('unknown' if unreadable)."""
    path, best, kind = os.path.realpath(path), "", "unknown"
    try:
        with open("/proc/mounts") as f:
            for line in f:
                parts = line.split()
                if len(parts) < 3:
                    continue
                mnt = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), parts[1])
                inside = path == mnt or path.startswith(mnt.rstrip("/") + "/")
                if inside and len(mnt) >= len(best):  # later mounts shadow earlier ones
                    best, kind = mnt, parts[2]
    except OSError:
        pass
    return kind


class Reader:
    def __init__(self, path, mode, size):
        self.mode, self.size = mode, size
        flags = os.O_RDONLY | (os.O_DIRECT if mode == "odirect" else 0)
        self.fd = os.open(path, flags)
        self.mm = mmap.mmap(self.fd, 0, access=mmap.ACCESS_READ) if mode == "mmap" else None

    def read(self, off):
        """One expert's bytes. Runs in reader threads: pread/preadv release the GIL."""
        if self.mode == "mmap":
            return self.mm[off:off + self.size]  # the copy faults the pages in
        if self.mode == "pread":
            data = os.pread(self.fd, self.size, off)
        else:
            data = mmap.mmap(-1, self.size)  # anonymous maps are page-aligned, as O_DIRECT needs
            if os.preadv(self.fd, [data], off) != self.size:
                raise OSError(errno.EIO, "short O_DIRECT read at offset %d" % off)
        if len(data) != self.size:
            raise OSError(errno.EIO, "short read at offset %d" % off)
        return data

    def close(self):
        if self.mm is not None:
            self.mm.close()
        os.close(self.fd)


def open_reader(path, args, size):
    """Reader for args.io; None when O_DIRECT is refused and no fallback was asked for."""
    if args.io != "odirect":
        return Reader(path, args.io, size)
    reader = None
    try:
        if not hasattr(os, "O_DIRECT"):
            raise OSError(errno.EINVAL, "no O_DIRECT on this platform")
        reader = Reader(path, "odirect", size)
        reader.read(0)  # some file systems accept the flag at open and refuse the first read
        return reader
    except OSError as e:
        if e.errno != errno.EINVAL:
            raise
        if reader is not None:
            reader.close()
    d = os.path.dirname(path)
    head = "warning: O_DIRECT unsupported on %s (%s)" % (d, fs_type(d))
    if not args.odirect_fallback:
        print(head + "; use --odirect-fallback for pread or --cache-dir on another file system",
              file=sys.stderr)
        return None
    print(head + "; falling back to pread (--odirect-fallback)", file=sys.stderr)
    args.io = "pread"
    return Reader(path, "pread", size)


class LRU:
    """Fixed number of expert slots; slots == 0 disables the cache (every lookup misses)."""

    def __init__(self, slots):
        self.slots, self.d, self.hits, self.lookups = slots, OrderedDict(), 0, 0

    def get(self, key):
        self.lookups += 1
        v = self.d.get(key)
        if v is not None:
            self.d.move_to_end(key)
            self.hits += 1
        return v

    def put(self, key, value):
        self.d[key] = value
        while len(self.d) > self.slots:
            self.d.popitem(last=False)


class Router:
    """Seeded top-k routing: a tunable share of the previous token's experts kept (token-to-token
    locality), the rest drawn fresh, uniformly or by a per-layer popularity (skew)."""

    def __init__(self, seed, layers, experts, k, keep, skew=0.0, popularity_seed=0):
        self.rng, self.E, self.k, self.keep = random.Random(seed), experts, k, keep
        self.prev = [None] * layers
        self.popularity = None
        if skew > 0:
            # Its own generator, seeded by --seed alone: popularity is a property of the "model"
            # (the same hot experts whatever the prompt), and skew 0 routes exactly as before.
            prng = random.Random("moe-probe popularity %d" % popularity_seed)
            self.popularity = []
            for _ in range(layers):
                order = list(range(experts))
                prng.shuffle(order)
                weights = [0.0] * experts
                for rank, e in enumerate(order):
                    weights[e] = 1.0 / (rank + 1) ** skew
                self.popularity.append(weights)

    def draw(self, layer, candidates, n):
        """n distinct experts among candidates: uniform, or by popularity without replacement."""
        if self.popularity is None:
            return self.rng.sample(candidates, n)
        items = list(candidates)
        weights = [self.popularity[layer][e] for e in items]
        out = []
        for _ in range(n):
            x, acc, i = self.rng.random() * sum(weights), 0.0, 0
            for i, w in enumerate(weights):
                acc += w
                if x < acc:
                    break
            out.append(items.pop(i))
            weights.pop(i)
        return out

    def route(self):
        rng, k, sets = self.rng, self.k, []
        for layer, prev in enumerate(self.prev):
            if prev is None:
                pick = self.draw(layer, range(self.E), k)
            else:
                # Stochastic rounding: the mean share kept equals keep_frac even for small k.
                want = self.keep * k
                n_keep = int(want) + (rng.random() < want - int(want))
                kept = rng.sample(prev, n_keep)
                # Fresh experts avoid the whole previous set (so the share kept is exact) when
                # there are enough others; otherwise they only avoid the kept ones.
                avoid = set(prev) if self.E - k >= k - n_keep else set(kept)
                pick = kept + self.draw(layer, [e for e in range(self.E) if e not in avoid],
                                        k - n_keep)
            self.prev[layer] = pick = sorted(pick)
            sets.append(pick)
        return sets


class TraceWriter:
    """`# route_trace v1` (docs/routes.md section 1): prefill rows (layer, step, slot order,
    written when the prompt is done), then decode rows (step, layer, slot), flushed per token.
    Slots are in router rank order: by a softmax weight (summing to 1 per cell) drawn from its
    own generator, so tracing never changes the routing. Residency is the LRU's (0 miss, 1 hit);
    a miss is charged the expert's size. moe-probe reads its prompt token by token, so a
    prefill miss is charged every time, as it really is read."""

    def __init__(self, path, model, layers, experts, k, size, seed):
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        self.f = open(path, "w")  # noqa: SIM115 - written token by token, closed by close()
        self.size, self.rng = size, random.Random("weights %d" % seed)
        self.turn = 0   # session mode: the generate() the rows belong to
        self.prefill = [[] for _ in range(layers)]
        self.f.write("# route_trace v1\n# model=%s arch=moe-probe n_layer=%d n_expert=%d "
                     "n_expert_used=%d\n" % (model, layers, experts, k)
                     + "".join("# layer=%d expert_bytes=%d dense_bytes=0\n" % (l, size)
                               for l in range(layers))
                     + "turn,phase,step,layer,slot,expert,weight,residency,expert_bytes\n")
        self.f.flush()

    def _rows(self, phase, step, layer, experts, misses):
        logits = [math.exp(self.rng.gauss(0.0, 1.0)) for _ in experts]
        total = sum(logits)
        ranked = sorted(zip(logits, experts), key=lambda p: (-p[0], p[1]))
        return ["%d,%d,%d,%d,%d,%d,%.6f,%d,%d\n" % (
            self.turn, phase, step, layer, slot, e, w / total, e not in misses,
            self.size if e in misses else 0) for slot, (w, e) in enumerate(ranked)]

    def token(self, phase, step, sets, misses):
        rows = [self._rows(phase, step, l, ex, misses[l]) for l, ex in enumerate(sets)]
        if phase == 0:
            for layer, cell in enumerate(rows):
                self.prefill[layer].extend(cell)
        else:
            self.f.write("".join(r for cell in rows for r in cell))
            self.f.flush()

    def end_prefill(self):
        self.f.write("".join(r for cells in self.prefill for r in cells))
        self.f.flush()
        self.prefill = [[] for _ in self.prefill]   # a session's next turn prefills again

    def close(self):
        self.f.close()


def word_for(sets):
    """A pseudo-word derived from the token's routing: same routing, same word."""
    h = zlib.crc32(repr(sets).encode())
    return "".join(SYLLABLES[(h >> (2 + 4 * i)) & 15] for i in range(1 + h % 3))


def expert_matvec(buf, h, nfloats):
    """y = W h with W the first nfloats of the expert as a (nfloats/DIM) x DIM float32 matrix."""
    with memoryview(buf) as raw, raw[:nfloats * 4].cast("f") as w:
        return [sum(map(mul, w[r:r + DIM], h)) for r in range(0, nfloats - DIM + 1, DIM)]


class Engine:
    def __init__(self, args, reader, size):
        self.reader, self.size, self.E = reader, size, args.experts
        self.cache = LRU(int(args.cache_mb * MIB // size))
        self.pool = (concurrent.futures.ThreadPoolExecutor(args.io_threads)
                     if args.io_threads > 1 else None)
        self.nfloats = min(int(args.compute_kb * 1024), size) // (4 * DIM) * DIM
        rng = random.Random(args.seed)
        self.h = [rng.uniform(-1, 1) for _ in range(DIM)]

    def run_pass(self, sets):
        """One token through all layers: (io_ms, compute_ms, mgmt_ms, experts read)."""
        io = comp = mgmt = 0.0
        misses = 0
        self.missed = []  # per layer, the experts read (not in the cache): the trace's residency
        cache, clock = self.cache, time.perf_counter
        for layer, experts in enumerate(sets):
            t0 = clock()
            bufs = {e: cache.get((layer, e)) for e in experts} if cache.slots else {}
            need = [e for e in experts if bufs.get(e) is None]
            t1 = clock()
            offs = [(layer * self.E + e) * self.size for e in need]
            if self.pool is not None and len(offs) > 1:
                got = list(self.pool.map(self.reader.read, offs))
            else:
                got = [self.reader.read(o) for o in offs]
            t2 = clock()
            for e, buf in zip(need, got):
                bufs[e] = buf
                if cache.slots:
                    cache.put((layer, e), buf)
            t3 = clock()
            acc = [0.0] * DIM
            for e in experts:
                for i, v in enumerate(expert_matvec(bufs[e], self.h, self.nfloats)):
                    acc[i % DIM] += v
            h = [a + b for a, b in zip(self.h, acc)]
            norm = math.sqrt(sum(v * v for v in h)) or 1.0  # keep the state bounded
            self.h = [v / norm for v in h]
            t4 = clock()
            io += t2 - t1
            comp += t4 - t3
            if cache.slots:  # with no cache there is no bookkeeping to time
                mgmt += (t1 - t0) + (t3 - t2)
            misses += len(need)
            self.missed.append(set(need))
        return io * 1e3, comp * 1e3, mgmt * 1e3, misses

    def close(self):
        if self.pool is not None:
            self.pool.shutdown(wait=True)
        self.reader.close()


def rusage():
    ru = resource.getrusage(resource.RUSAGE_SELF)  # whole process: all threads
    return ru.ru_majflt, (ru.ru_utime + ru.ru_stime) * 1e3


def run(args):
    size = -(-int(round(args.expert_mb * MIB)) // ALIGN) * ALIGN
    cache_dir = args.cache_dir or default_cache_dir()
    path, created = ensure_expert_file(cache_dir, args.layers, args.experts, size)
    name = os.path.basename(path)
    print("moe-probe: expert file %s (%s)" % (path, "reused" if created is None else
                                             "created in %.3f s" % created), file=sys.stderr)
    # "Model load" excludes the one-off creation so the first cell of a matrix is comparable.
    t_load = time.perf_counter()
    reader = open_reader(path, args, size)
    if reader is None:
        return 3
    if not args.no_drop_cache and hasattr(os, "posix_fadvise"):
        fd = os.open(path, os.O_RDONLY)  # so the first reads really hit storage
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
    eng = Engine(args, reader, size)
    try:
        load_s = time.perf_counter() - t_load
        if args.session:
            return Session(args, eng, name, load_s).serve()
        return generate(args, eng, name, load_s)
    finally:
        eng.close()


def open_csv(args, name, session=False):
    """The per-token CSV with its preamble and header; a session's adds the `turn` column."""
    os.makedirs(os.path.dirname(os.path.abspath(args.csv)), exist_ok=True)
    csv = open(args.csv, "w")  # noqa: SIM115 - written token by token, closed by the caller
    csv.write("# bmoe_metrics v1\n"
              "# model=%s arch=moe-probe n_layer=%d n_expert=%d n_expert_used=%d threads=%d"
              " n_ctx=%d\n# moe_stream=1 cache_mb=%g cache_auto=0 cache_ceil_mb=0 force_cache=0"
              " io_threads=%d o_direct=%d overlap=0 prefetch=0 dense_weights=none io=%s"
              " keep_frac=%g%s\nstep,steps,wall_ms,io_ms,compute_ms,read_bytes,cache_hit_pct,"
              "stall_ms,mgmt_ms,majflt,cpu_ms%s\n"
              % (name, args.layers, args.experts, args.top_k, args.threads,
                 args.n_ctx if session else 0, args.cache_mb, args.io_threads,
                 args.io == "odirect", args.io, args.keep_frac,
                 " skew=%g" % args.skew if args.skew else "", ",turn" if session else ""))
    csv.flush()
    return csv


ROW_KEYS = ("wall", "io", "comp", "read", "majflt", "cpu", "mgmt")


def decode_step(eng, router):
    """One generated token: (routing, row, hit). row holds ROW_KEYS' values as printed, so
    that sums of the rows re-derive the trailer to its printed precision."""
    f0, c0 = rusage()
    t0 = time.perf_counter()
    sets = router.route()
    io, comp, mgmt, misses = eng.run_pass(sets)
    wall = (time.perf_counter() - t0) * 1e3
    f1, c1 = rusage()
    hit = 100.0 * eng.cache.hits / eng.cache.lookups if eng.cache.slots else -1.0
    row = (round(wall, 3), round(io, 3), round(comp, 3), misses * eng.size,
           f1 - f0, round(c1 - c0, 3), round(mgmt, 3))
    return sets, row, hit


def csv_row(step, n, row, hit, turn=None):
    return "%d,%d,%.3f,%.3f,%.3f,%d,%.2f,%.3f,%.3f,%d,%.3f%s\n" % (
        step, n, row[0], row[1], row[2], row[3], hit, row[1], row[6], row[4], row[5],
        "" if turn is None else ",%d" % turn)


def prompt_of(args):
    if args.prompt_file:
        with open(args.prompt_file, encoding="utf-8", errors="replace") as f:
            return f.read()
    return args.prompt


def generate(args, eng, name, load_s):
    L, k, n = args.layers, args.top_k, args.tokens
    prompt = prompt_of(args)
    n_prompt = max(1, len(prompt.split()))
    csv = open_csv(args, name) if args.csv else None
    trace = TraceWriter(args.route_trace, name, L, args.experts, k, eng.size, args.seed) \
        if args.route_trace else None
    try:
        # The prompt steers the routing, so different prompts generate different text.
        router = Router(args.seed * 1000003 + zlib.crc32(prompt.encode()), L, args.experts, k,
                        args.keep_frac, args.skew, args.seed)
        t0 = time.perf_counter()
        for position in range(n_prompt):
            sets = router.route()
            eng.run_pass(sets)
            if trace:
                trace.token(0, position, sets, eng.missed)
        prefill_s = time.perf_counter() - t0
        if trace:
            trace.end_prefill()
        eng.cache.hits = eng.cache.lookups = 0  # hit rate covers decode; the cache stays warm
        tot = dict.fromkeys(ROW_KEYS, 0)
        hit = -1.0
        for step in range(1, n + 1):
            sets, row, hit = decode_step(eng, router)
            for key, v in zip(ROW_KEYS, row):
                tot[key] += v
            if csv:
                csv.write(csv_row(step, n, row, hit))
                csv.flush()  # the agent tails the live file
            sys.stdout.write(word_for(sets) + (" " if step < n else "\n"))
            sys.stdout.flush()
            if trace:  # step = absolute position: the prompt's tokens come first
                trace.token(1, n_prompt + step - 1, sets, eng.missed)
        fig = figures(args, eng, tot, n, n_prompt, load_s, prefill_s, hit)
        if csv:
            csv.write(trailer_line(fig))
            csv.flush()
        print_summary(args, eng, fig)
    finally:
        if csv:
            csv.close()
        if trace:
            trace.close()
    return 0


def figures(args, eng, tot, n, n_prompt, load_s, prefill_s, hit):
    """A generation's summary figures, from its rows' sums (engine definitions, no overlap)."""
    wall_s = tot["wall"] / 1e3
    s_tok = wall_s / n if n else 0.0
    io_tok, mgmt_tok = (tot["io"] / 1e3 / n, tot["mgmt"] / 1e3 / n) if n else (0.0, 0.0)
    demand = args.top_k * eng.size / MIB
    return dict(
        n=n, s_tok=s_tok, tok_s=n / wall_s if wall_s > 0 else 0.0, io_tok=io_tok,
        mgmt_tok=mgmt_tok, comp_tok=max(0.0, s_tok - io_tok - mgmt_tok),
        read_mib=tot["read"] / MIB, io_s=tot["io"] / 1e3, hit=hit, n_prompt=n_prompt,
        load_s=load_s, prefill_s=prefill_s,
        prefill_tps=n_prompt / prefill_s if prefill_s > 0 else 0.0,
        resident=len(eng.cache.d) * eng.size / MIB, budget=eng.cache.slots * eng.size / MIB,
        majflt_tok=tot["majflt"] / n if n else 0.0, cpu_tok=tot["cpu"] / 1e3 / n if n else 0.0,
        token_demand=demand * args.layers, layer_demand=demand)


def trailer_line(f):
    return ("# summary tokens=%d s/tok=%.3f tok/s=%.3f read_MiB=%.1f io_s=%.2f "
            "compute_s/tok=%.3f io_s/tok=%.3f cache_hit_pct=%.1f n_prompt=%d load_s=%.3f "
            "prefill_s=%.3f prefill_tps=%.2f stall_s/tok=%.3f mgmt_s/tok=%.3f "
            "cache_resident_MiB=%.1f cache_budget_MiB=%.1f cache_resizes=0 "
            "majflt/tok=%.2f cpu_s/tok=%.4f token_demand_MiB=%.1f layer_demand_MiB=%.1f\n"
            % (f["n"], f["s_tok"], f["tok_s"], f["read_mib"], f["io_s"], f["comp_tok"],
               f["io_tok"], f["hit"], f["n_prompt"], f["load_s"], f["prefill_s"],
               f["prefill_tps"], f["io_tok"], f["mgmt_tok"], f["resident"], f["budget"],
               f["majflt_tok"], f["cpu_tok"], f["token_demand"], f["layer_demand"]))


def print_summary(args, eng, f):
    """The one-shot stdout summary lines (docs/formats.md section 3)."""
    n, s_tok = f["n"], f["s_tok"]
    read_mib, io_s = f["read_mib"], f["io_s"]
    out = ["",
           "generation: %d tokens, %.3f s/token (%.3f tok/s)" % (n, s_tok, f["tok_s"]),
           "compute: %.1f%% CPU occupancy (%.4f cpu-s/token over %d threads), %.2f major "
           "faults/token" % (100 * f["cpu_tok"] / (s_tok * args.threads), f["cpu_tok"],
                             args.threads, f["majflt_tok"]),
           "prefill: %d tokens, %.3f s (%.1f tok/s) | model load %.3f s | TTFT %.3f s"
           % (f["n_prompt"], f["prefill_s"], f["prefill_tps"], f["load_s"],
              f["load_s"] + f["prefill_s"]),
           "moe-stream: read %.1f MiB (%.2f MiB/token), decode %.3f s/token (compute %.3f + "
           "cache mgmt %.3f + flash I/O %.3f s/token, %.0f MiB/s)"
           % (read_mib, read_mib / n, s_tok, f["comp_tok"], f["mgmt_tok"], f["io_tok"],
              read_mib / io_s if io_s > 0 else 0.0)]
    if eng.cache.slots:
        out.append("moe-cache: %.1f%% hit, resident %.1f MiB" % (f["hit"], f["resident"]))
    print("\n".join(out), flush=True)


# ---- session mode (bmoe-cli --session; docs/engines.md, "moe-probe's session mode") ---------

NEW_CHAT_TOKENS = 6   # a new chat prefills a system preamble and role markers before the message
NEXT_TURN_TOKENS = 2  # a continued chat only the next turn's role markers
EOF_REQUEST = {"cmd": "eof"}


def emit(tag, fields):
    """One `BMOE_<TAG> {flat json}` line on stdout, flushed (the reader tails it live)."""
    sys.stdout.write("BMOE_%s %s\n" % (tag, json.dumps(fields, separators=(",", ":"))))
    sys.stdout.flush()


def read_requests(out):
    """The stdin reader thread: each line's JSON request (or the error that line is) into
    `out`, then EOF_REQUEST. Raw reads on fd 0: a daemon thread blocked inside sys.stdin's
    buffered reader would hold its lock through interpreter shutdown."""
    pending = b""
    while True:
        try:
            chunk = os.read(0, 65536)
        except OSError:
            chunk = b""
        lines = (pending + chunk).split(b"\n")
        pending = lines.pop() if chunk else b""
        for raw in lines:
            if not raw.strip():
                continue
            try:
                req = json.loads(raw.decode("utf-8"))
                if not isinstance(req, dict):
                    raise ValueError("not a JSON object")
            except ValueError as e:
                req = {"cmd": "invalid", "why": "bad request line (%s)" % e}
            out.put(req)
        if not chunk:
            out.put(EOF_REQUEST)
            return


class Session:
    """One loaded model serving generate requests until close or EOF. The expert cache stays
    warm across turns; an idle gap before a request drops a share 1-exp(-idle/tau) of the
    cached experts, least recently used first, and their page cache, as the OS reclaiming an
    idle app's memory would, so the next turn re-warms."""

    def __init__(self, args, eng, name, load_s):
        self.args, self.eng, self.name, self.load_s = args, eng, name, load_s
        self.requests = queue.Queue()
        self.pending = []          # requests that arrived during a generation, in order
        self.cancelled = False
        self.turn = 0
        self.n_past = 0
        self.idle_since = time.perf_counter()
        self.csv = open_csv(args, name, session=True) if args.csv else None
        self.trace = TraceWriter(args.route_trace, name, args.layers, args.experts, args.top_k,
                                 eng.size, args.seed) if args.route_trace else None
        self.router = Router(args.seed, args.layers, args.experts, args.top_k, args.keep_frac,
                             args.skew, args.seed)

    def serve(self):
        threading.Thread(target=read_requests, args=(self.requests,), daemon=True).start()
        emit("READY", {"load_s": round(self.load_s, 6), "arch": "moe-probe",
                       "n_ctx": self.args.n_ctx, "think_ctl": "template",
                       "n_expert_used": self.args.top_k})
        try:
            while True:
                req = self.pending.pop(0) if self.pending else self.wait_request()
                cmd = req.get("cmd")
                if cmd in ("close", "eof"):
                    return 0
                if cmd == "generate":
                    rc = self.generate(req)
                    if rc:
                        return rc
                elif cmd != "cancel":   # a cancel with nothing in flight does nothing
                    # id null: no generate() was asked for, so no turn failed
                    emit("ERROR", {"id": None, "fatal": False,
                                   "msg": req.get("why") or "unknown cmd %r" % cmd})
        finally:
            if self.csv:
                self.csv.close()
            if self.trace:
                self.trace.close()

    def wait_request(self):
        while True:   # a bounded wait, so SIGTERM's handler runs promptly
            try:
                return self.requests.get(timeout=0.5)
            except queue.Empty:
                pass

    def poll(self):
        """Between tokens: a cancel stops the generation in flight; anything else waits."""
        while True:
            try:
                req = self.requests.get_nowait()
            except queue.Empty:
                return
            if req.get("cmd") == "cancel":
                self.cancelled = True
            else:
                self.pending.append(req)

    def evict_idle(self, idle_s):
        """Drop the share of the cache an idle gap of idle_s lets the OS reclaim; the share
        dropped (0..1)."""
        cache, tau = self.eng.cache, self.args.idle_evict_tau
        held = len(cache.d)
        if tau <= 0 or idle_s <= 0 or not held:
            return 0.0
        drop = int(round(held * (1.0 - math.exp(-idle_s / tau))))
        fd = self.eng.reader.fd
        for _ in range(drop):
            (layer, e), _buf = cache.d.popitem(last=False)
            if hasattr(os, "posix_fadvise") and not self.args.no_drop_cache:
                off = (layer * self.eng.E + e) * self.eng.size
                os.posix_fadvise(fd, off, self.eng.size, os.POSIX_FADV_DONTNEED)
        return drop / held

    def generate(self, req):
        args, eng = self.args, self.eng
        self.turn += 1
        rid, prompt = req.get("id"), req.get("prompt")
        # the idle gap since the last turn (or the load); a test may add a simulated one
        simulated = req.get("simulate_idle_s")
        simulated = simulated if isinstance(simulated, (int, float)) and simulated > 0 else 0
        idle_s = time.perf_counter() - self.idle_since + simulated
        evicted = self.evict_idle(idle_s)
        shape = self.shape(req)
        if isinstance(shape, str):
            emit("ERROR", {"id": rid, "fatal": False, "msg": shape})
            self.idle_since = time.perf_counter()
            return 0
        base, n_prompt, n = shape
        self.cancelled = False
        emit("BEGIN", {"id": rid})
        prefill_s = self.prefill(prompt, base, n_prompt)
        eng.cache.hits = eng.cache.lookups = 0   # the turn's hit rate covers its decode
        tot, hit, words, done = dict.fromkeys(ROW_KEYS, 0), -1.0, [], 0
        t_decode = time.perf_counter()
        for step in range(1, n + 1):
            self.poll()
            if self.cancelled:
                break
            if self.turn == args.fail_at_turn and step > (n + 1) // 2:
                emit("ERROR", {"id": rid, "fatal": True, "msg": "simulated fatal error at "
                               "turn %d, token %d (--fail-at-turn)" % (self.turn, step)})
                return 1
            sets, row, hit = decode_step(eng, self.router)
            for key, v in zip(ROW_KEYS, row):
                tot[key] += v
            if self.csv:
                self.csv.write(csv_row(step, n, row, hit, self.turn))
                self.csv.flush()
            if self.trace:
                self.trace.token(1, base + n_prompt + step - 1, sets, eng.missed)
            words.append(word_for(sets))
            self.token_lines(step, n, row, hit, (" " if step > 1 else "") + words[-1])
            done = step
        loop_s = time.perf_counter() - t_decode - tot["wall"] / 1e3
        self.n_past = base + n_prompt + done
        f = figures(args, eng, tot, done, n_prompt, self.load_s, prefill_s, hit)
        if self.csv:
            self.csv.write(trailer_line(f))
            self.csv.flush()
        emit("DONE", self.done_fields(rid, f, loop_s, idle_s, evicted, " ".join(words)))
        self.idle_since = time.perf_counter()
        return 0

    def shape(self, req):
        """(context kept, tokens to prefill, tokens to predict), or why the request is
        rejected: an empty prompt, a bad n_predict, a context overflow."""
        prompt, n = req.get("prompt"), req.get("n_predict", self.args.tokens)
        if not isinstance(prompt, str) or not prompt.strip():
            return "empty prompt"
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            return "n_predict must be a positive integer, got %r" % (n,)
        new_chat = bool(req.get("clear_kv", True)) or self.n_past == 0
        n_prompt = len(prompt.split()) + (NEW_CHAT_TOKENS if new_chat else NEXT_TURN_TOKENS)
        base = 0 if new_chat else self.n_past
        if base + n_prompt + n > self.args.n_ctx:
            return "context overflow: %d in context + %d prompt + %d to predict > n_ctx %d" % (
                base, n_prompt, n, self.args.n_ctx)
        return base, n_prompt, n

    def prefill(self, prompt, base, n_prompt):
        """The new tokens' passes (after `base` reused ones); its seconds."""
        args, eng, trace = self.args, self.eng, self.trace
        # The prompt steers the routing; the router keeps its last token's experts (locality).
        self.router.rng = random.Random(args.seed * 1000003 + zlib.crc32(prompt.encode())
                                        + self.turn)
        if trace:
            trace.turn = self.turn
        t0 = time.perf_counter()
        for position in range(n_prompt):
            sets = self.router.route()
            eng.run_pass(sets)
            if trace:
                trace.token(0, base + position, sets, eng.missed)
        prefill_s = time.perf_counter() - t0
        if trace:
            trace.end_prefill()
        return prefill_s

    def token_lines(self, step, n, row, hit, delta):
        if row[3]:
            emit("LOAD", {"mb": round(row[3] / MIB, 3), "ms": row[1]})
        emit("PROGRESS", {
            "step": step, "steps": n, "wall_ms": row[0], "io_ms": row[1], "compute_ms": row[2],
            "mgmt_ms": row[6], "stall_ms": row[1], "read_mb": round(row[3] / MIB, 3),
            "cache_hit_pct": round(hit, 2), "majflt": row[4], "cpu_ms": row[5],
            "dense_resident_frac": -1.0, "delta_reasoning": "", "delta_text": delta})

    def done_fields(self, rid, f, loop_s, idle_s, evicted, text):
        n = f["n"]   # seconds to the microsecond: a synthetic token takes about a millisecond
        return {
            "id": rid, "cancelled": self.cancelled, "tokens": n, "tok_s": round(f["tok_s"], 3),
            "prefill_s": round(f["prefill_s"], 6), "prefill_tps": round(f["prefill_tps"], 2),
            "load_s": round(f["load_s"], 6), "cache_hit_pct": round(f["hit"], 2),
            "n_prompt": f["n_prompt"], "n_past": self.n_past,
            "compute_s_tok": round(f["comp_tok"], 6), "io_s_tok": round(f["io_tok"], 6),
            "cache_resident_mib": round(f["resident"], 1),
            "cache_budget_mib": round(f["budget"], 1), "read_mib": round(f["read_mib"], 4),
            "stall_s_tok": round(f["io_tok"], 6), "mgmt_s_tok": round(f["mgmt_tok"], 6),
            "majflt_tok": round(f["majflt_tok"], 2), "cpu_s_tok": round(f["cpu_tok"], 6),
            "token_demand_mib": round(f["token_demand"], 1), "mtp_drafted": 0,
            "mtp_accepted": 0, "mtp_decodes": n, "mtp_draft_s_tok": 0.0, "drafted_steps": 0,
            "loop_overhead_s_tok": round(max(0.0, loop_s) / n, 6) if n else 0.0,
            # moe-probe's own keys: the idle gap it saw and the share of its cache that gap
            # evicted (what makes this turn re-warm)
            "turn": self.turn, "idle_s": round(idle_s, 3), "evicted_pct": round(100 * evicted, 1),
            "reasoning": "", "text": text}


def on_sigterm(signum, frame):
    raise Terminated()


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        return run(args)
    except Terminated:
        # Rows already written stay; no trailer, as for any killed bmoe run.
        print("\nmoe-probe: terminated", file=sys.stderr)
        return 143


if __name__ == "__main__":
    sys.exit(main())
