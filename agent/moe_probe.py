#!/usr/bin/env python3
"""moe-probe: orch's built-in synthetic expert-streaming engine.
(One file of ~600 lines on purpose: it is pushed to a device alone and runs there with
nothing of orch beside it.)

Not a model but a real expert-streaming workload: a synthetic expert file (layers x experts x
expert size) is read expert by expert, per token and layer, through an LRU cache by mmap, pread
or O_DIRECT, with a small matrix-vector product per expert. It writes bmoe-cli's per-token CSV,
`# summary` trailer and stdout summary lines (docs/formats.md sections 1-3), so
the bmoe parsers read it unchanged. Stdlib only: it is pushed to devices that may only have
python3. Exit codes: 0 ok, 2 usage, 3 O_DIRECT refused by the file system, 143 SIGTERM.

Routing looks like real routing along the two axes the studies measure: --keep-frac, the share
of a layer's experts the next token keeps (token-to-token locality), and --skew, a per-layer
Zipf popularity of the experts (0 = uniform, the default). --route-trace PATH writes it as
bmoe-cli's `# route_trace v1` (docs/routes.md section 1).
"""
import argparse  # noqa: E401
import concurrent.futures
import errno
import math
import mmap
import os
import random
import re
import resource  # noqa: E401
import signal
import sys
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
        epilog="Exit status: 0 done, 2 usage error, 3 O_DIRECT refused by the file system, "
        "143 SIGTERM (rows written so far stay, no # summary trailer).")
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
    args = p.parse_args(argv)
    if min(args.layers, args.experts, args.top_k, args.io_threads, args.tokens, args.threads) < 1:
        p.error("--layers, --experts, --top-k, --io-threads, --threads and -n must be >= 1")
    if args.top_k > args.experts:
        p.error("--top-k cannot exceed --experts")
    if not 0 <= args.keep_frac <= 1 or args.expert_mb <= 0 or args.cache_mb < 0 \
            or args.compute_kb < 0 or not 0 <= args.skew <= 10:
        p.error("--keep-frac must be in [0, 1]; --expert-mb > 0; --cache-mb, --compute-kb >= 0; "
                "--skew in [0, 10]")
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
        return ["0,%d,%d,%d,%d,%d,%.6f,%d,%d\n" % (
            phase, step, layer, slot, e, w / total, e not in misses,
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
        self.prefill = None

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
        return generate(args, eng, name, load_s)
    finally:
        eng.close()


def generate(args, eng, name, load_s):
    L, k, n = args.layers, args.top_k, args.tokens
    if args.prompt_file:
        with open(args.prompt_file, encoding="utf-8", errors="replace") as f:
            prompt = f.read()
    else:
        prompt = args.prompt
    n_prompt = max(1, len(prompt.split()))
    csv = None
    if args.csv:
        os.makedirs(os.path.dirname(os.path.abspath(args.csv)), exist_ok=True)
        csv = open(args.csv, "w")
        csv.write("# bmoe_metrics v1\n"
                  "# model=%s arch=moe-probe n_layer=%d n_expert=%d n_expert_used=%d threads=%d"
                  " n_ctx=0\n# moe_stream=1 cache_mb=%g cache_auto=0 cache_ceil_mb=0 force_cache=0"
                  " io_threads=%d o_direct=%d overlap=0 prefetch=0 dense_weights=none io=%s"
                  " keep_frac=%g%s\nstep,steps,wall_ms,io_ms,compute_ms,read_bytes,cache_hit_pct,"
                  "stall_ms,mgmt_ms,majflt,cpu_ms\n"
                  % (name, L, args.experts, k, args.threads, args.cache_mb, args.io_threads,
                     args.io == "odirect", args.io, args.keep_frac,
                     " skew=%g" % args.skew if args.skew else ""))
        csv.flush()
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
        # Sums are taken over the values as printed, so that re-deriving the trailer from the
        # CSV rows gives the same numbers to the printed precision.
        tot = dict(wall=0.0, io=0.0, comp=0.0, mgmt=0.0, read=0, majflt=0, cpu=0.0)
        for step in range(1, n + 1):
            f0, c0 = rusage()
            t0 = time.perf_counter()
            sets = router.route()
            io, comp, mgmt, misses = eng.run_pass(sets)
            wall = (time.perf_counter() - t0) * 1e3
            f1, c1 = rusage()
            hit = 100.0 * eng.cache.hits / eng.cache.lookups if eng.cache.slots else -1.0
            row = (round(wall, 3), round(io, 3), round(comp, 3), misses * eng.size,
                   f1 - f0, round(c1 - c0, 3), round(mgmt, 3))
            for key, v in zip(("wall", "io", "comp", "read", "majflt", "cpu", "mgmt"), row):
                tot[key] += v
            if csv:
                csv.write("%d,%d,%.3f,%.3f,%.3f,%d,%.2f,%.3f,%.3f,%d,%.3f\n" % (
                    step, n, row[0], row[1], row[2], row[3], hit, row[1], row[6], row[4], row[5]))
                csv.flush()  # the agent tails the live file
            sys.stdout.write(word_for(sets) + (" " if step < n else "\n"))
            sys.stdout.flush()
            if trace:  # step = absolute position: the prompt's tokens come first
                trace.token(1, n_prompt + step - 1, sets, eng.missed)
        report(args, eng, csv, tot, n_prompt, load_s, prefill_s, hit)
    finally:
        if csv:
            csv.close()
        if trace:
            trace.close()
    return 0


def report(args, eng, csv, tot, n_prompt, load_s, prefill_s, hit):
    n = args.tokens
    s_tok = tot["wall"] / 1e3 / n
    io_tok, mgmt_tok = tot["io"] / 1e3 / n, tot["mgmt"] / 1e3 / n
    comp_tok = max(0.0, s_tok - io_tok - mgmt_tok)  # engine definition (no overlap)
    read_mib, io_s = tot["read"] / MIB, tot["io"] / 1e3
    prefill_tps = n_prompt / prefill_s if prefill_s > 0 else 0.0
    resident = len(eng.cache.d) * eng.size / MIB
    budget = eng.cache.slots * eng.size / MIB
    demand = args.top_k * eng.size / MIB
    if csv:
        csv.write("# summary tokens=%d s/tok=%.3f tok/s=%.3f read_MiB=%.1f io_s=%.2f "
                  "compute_s/tok=%.3f io_s/tok=%.3f cache_hit_pct=%.1f n_prompt=%d load_s=%.3f "
                  "prefill_s=%.3f prefill_tps=%.2f stall_s/tok=%.3f mgmt_s/tok=%.3f "
                  "cache_resident_MiB=%.1f cache_budget_MiB=%.1f cache_resizes=0 "
                  "majflt/tok=%.2f cpu_s/tok=%.4f token_demand_MiB=%.1f layer_demand_MiB=%.1f\n"
                  % (n, s_tok, n / (tot["wall"] / 1e3), read_mib, io_s, comp_tok, io_tok, hit,
                     n_prompt, load_s, prefill_s, prefill_tps, io_tok, mgmt_tok, resident,
                     budget, tot["majflt"] / n, tot["cpu"] / 1e3 / n, demand * args.layers,
                     demand))
        csv.flush()
    cpu_tok = tot["cpu"] / 1e3 / n
    out = ["",
           "generation: %d tokens, %.3f s/token (%.3f tok/s)" % (n, s_tok, n / (tot["wall"] / 1e3)),
           "compute: %.1f%% CPU occupancy (%.4f cpu-s/token over %d threads), %.2f major "
           "faults/token" % (100 * cpu_tok / (s_tok * args.threads), cpu_tok, args.threads,
                             tot["majflt"] / n),
           "prefill: %d tokens, %.3f s (%.1f tok/s) | model load %.3f s | TTFT %.3f s"
           % (n_prompt, prefill_s, prefill_tps, load_s, load_s + prefill_s),
           "moe-stream: read %.1f MiB (%.2f MiB/token), decode %.3f s/token (compute %.3f + "
           "cache mgmt %.3f + flash I/O %.3f s/token, %.0f MiB/s)"
           % (read_mib, read_mib / n, s_tok, comp_tok, mgmt_tok, io_tok,
              read_mib / io_s if io_s > 0 else 0.0)]
    if eng.cache.slots:
        out.append("moe-cache: %.1f%% hit, resident %.1f MiB" % (hit, resident))
    print("\n".join(out), flush=True)


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
