#!/usr/bin/env python3
"""llama-token: llama.cpp measured token by token, in bmoe-cli's formats.
(One file of ~600 lines on purpose: it is pushed to a device alone and runs there with
nothing of orch beside it.)

Loads a GGUF through the llama-cpp-python bindings, decodes greedily one token per
llama_decode, and writes bmoe-cli's per-token CSV, `# summary` trailer and stdout summary lines
(docs/formats.md sections 1-3), so llama.cpp runs get the same per-token
tables, plots and pressure samples as bmoe runs. The generated text goes to stdout as it is
produced; llama.cpp's own log goes to stderr (warnings and errors only, unless --verbose).

Steps: the prompt's tokens but the last are the prefill (one batched decode); step 1 decodes
the last prompt token and picks the first generated token, step i decodes token i-1 and picks
token i. So -n N gives N single-token decodes, N rows and N generated tokens. wall_ms is the
decode plus the greedy pick; llama.cpp reads mmapped weights inside its compute, so io_ms is 0
and compute_ms = wall_ms; read_bytes is what the process read from storage during the step
(/proc/self/io read_bytes: page faults on the mapped model included; empty where unreadable).

The bindings' native library: $LLAMA_CPP_LIB_PATH, else orch's llama.cpp build cache for the
bindings' version ($ORCH_LLAMA_CACHE/<version>/lib, else ~/.cache/orch/llama.cpp/<version>/lib)
when it exists, else the one the bindings were built with.
--route-trace PATH writes the routing llama.cpp computed as `# route_trace v1` (docs/routes.md;
class RouteCapture). Nothing is hooked without it.
Exit codes: 0 done, 2 usage, 4 bindings missing, 5 model or context load failed,
6 llama_decode failed, 143 SIGTERM (rows written so far stay, no # summary trailer).
"""
import argparse  # noqa: E401
import ctypes
import math
import os
import re
import resource
import signal
import struct
import sys
import time

ENGINE = "llama-token"
LOG_WARN = 3      # ggml_log_level: DEBUG 1? INFO 2, WARN 3, ERROR 4, CONT 5 (continues a line)
LOG_CONT = 5
DEFAULT_PROMPT = "Explain how a mixture of experts model routes each token"


class Terminated(Exception):
    """Raised from the SIGTERM handler so the run stops without writing a trailer."""


class Failure(Exception):
    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog=ENGINE, description="llama.cpp greedy decoding measured per token, writing bmoe-cli "
        "format output (per-token CSV, # summary trailer, summary lines on stdout).",
        epilog="Exit status: 0 done, 2 usage, 4 llama-cpp-python missing, 5 model load failed, "
        "6 decode failed, 143 SIGTERM.")
    a = p.add_argument
    a("-m", "--model", required=True, help="GGUF model file ('~' is expanded)")
    a("-p", "--prompt", default=DEFAULT_PROMPT, help="prompt text")
    a("--prompt-file", help="read the prompt from this file (overrides -p)")
    a("-n", dest="tokens", type=int, default=32, help="tokens to generate")
    a("--csv", help="write the bmoe per-token CSV here (rows flushed one by one)")
    a("-t", "--threads", type=int, default=max(1, os.cpu_count() or 1),
      help="threads for decode and prefill")
    a("--top-k-experts", type=int, metavar="K",
      help="experts used per token: overrides <arch>.expert_used_count at load")
    a("--no-mmap", action="store_true", help="read the model into memory instead of mmap")
    a("-c", "--ctx-size", type=int, default=0, help="context size (0: prompt + n + 8)")
    a("-b", "--batch-size", type=int, default=512, help="prefill batch size")
    a("--verbose", action="store_true", help="all of llama.cpp's log on stderr")
    a("--route-trace", metavar="PATH", help="write the experts llama.cpp routed each token to "
      "(its ffn_moe_topk tensors) as a `# route_trace v1` file")
    args = p.parse_args(argv)
    if args.tokens < 1 or args.threads < 1 or args.batch_size < 1:
        p.error("-n, --threads and --batch-size must be >= 1")
    if args.top_k_experts is not None and args.top_k_experts < 1:
        p.error("--top-k-experts must be >= 1")
    return args


def bindings_version():
    try:
        from importlib.metadata import PackageNotFoundError, version
    except ImportError:  # pragma: no cover
        return None
    try:
        return version("llama-cpp-python")
    except PackageNotFoundError:
        return None


def default_lib_dir(version):
    root = os.environ.get("ORCH_LLAMA_CACHE")
    if not root:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        root = os.path.join(base, "orch", "llama.cpp")
    return os.path.join(os.path.expanduser(root), version, "lib")


def import_bindings():
    """The llama_cpp module, pointed at orch's build when LLAMA_CPP_LIB_PATH is not set."""
    version = bindings_version()
    if version is None:
        raise Failure(4, "llama-token: the llama-cpp-python bindings are not installed for %s "
                      "(orch engines build llama.cpp installs them)" % sys.executable)
    if not os.environ.get("LLAMA_CPP_LIB_PATH"):
        lib = default_lib_dir(version)
        if os.path.isfile(os.path.join(lib, "libllama.so")):
            os.environ["LLAMA_CPP_LIB_PATH"] = lib
    try:
        import llama_cpp
    except (ImportError, OSError, RuntimeError, FileNotFoundError) as exc:
        raise Failure(4, "llama-token: cannot load llama-cpp-python %s (LLAMA_CPP_LIB_PATH=%s): "
                      "%s" % (version, os.environ.get("LLAMA_CPP_LIB_PATH", ""), exc))
    return llama_cpp, version


class ProcIO:
    """read_bytes of /proc/self/io (storage reads of the whole process), or None."""

    def __init__(self):
        try:
            self.fd = os.open("/proc/self/io", os.O_RDONLY)
            self.read()
        except OSError:
            self.fd = None

    def read(self):
        if self.fd is None:
            return None
        for line in os.pread(self.fd, 4096, 0).decode().splitlines():
            if line.startswith("read_bytes:"):
                return int(line.split()[1])
        return None

    def close(self):
        if self.fd is not None:
            os.close(self.fd)


def rusage():
    ru = resource.getrusage(resource.RUSAGE_SELF)  # all threads of the process
    return ru.ru_majflt, (ru.ru_utime + ru.ru_stime) * 1e3


def install_log(lib, verbose):
    """llama.cpp's log to stderr, below WARN only with --verbose. Returns the callback (keep it
    referenced: ctypes does not)."""
    state = {"show": True}

    @lib.llama_log_callback
    def cb(level, text, _user):
        if level != LOG_CONT:
            state["show"] = verbose or level >= LOG_WARN
        if state["show"] and text:
            try:
                sys.stderr.write(text.decode("utf-8", errors="replace"))
                sys.stderr.flush()
            except (OSError, ValueError):
                pass

    lib.llama_log_set(cb, ctypes.c_void_p())
    return cb


def meta(lib, model, key):
    buf = ctypes.create_string_buffer(256)
    n = lib.llama_model_meta_val_str(model, key.encode(), buf, len(buf))
    return buf.value.decode("utf-8", errors="replace") if n >= 0 else None


def load(lib, args):
    """(model, model params, kv overrides (kept alive), load start time)."""
    path = os.path.expanduser(args.model)
    if not os.path.isfile(path):
        raise Failure(5, "llama-token: no such model file: %s" % path)
    mparams = lib.llama_model_default_params()
    names = [f[0] for f in mparams._fields_]
    if "use_mmap" in names:
        mparams.use_mmap = not args.no_mmap
    else:
        mparams.load_mode = lib.LLAMA_LOAD_MODE_NONE if args.no_mmap else lib.LLAMA_LOAD_MODE_MMAP
    overrides = None
    arch = None
    if args.top_k_experts is not None:
        arch = gguf_arch(path)
        overrides = (lib.llama_model_kv_override * 2)()
        overrides[0].key = ("%s.expert_used_count" % arch).encode()
        overrides[0].tag = lib.LLAMA_KV_OVERRIDE_TYPE_INT
        overrides[0].value.val_i64 = args.top_k_experts
        overrides[1].key = b""  # terminator
        mparams.kv_overrides = overrides
    t0 = time.perf_counter()
    model = lib.llama_model_load_from_file(path.encode(), mparams)
    if not model:
        raise Failure(5, "llama-token: llama.cpp could not load %s (see its log above)" % path)
    return model, mparams, overrides, t0


def gguf_header(path, tensors=False):
    """(general.architecture, [(tensor name, ne, ggml type)] if `tensors`) from the GGUF
    header, read with the stdlib: the override key needs the arch, the route trace the sizes."""
    with open(path, "rb") as f:
        head = f.read(24)
        if head[:4] != b"GGUF":
            raise Failure(5, "llama-token: %s is not a GGUF file" % path)
        n_tensors, n_kv = struct.unpack("<QQ", head[8:24])
        sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

        def u(fmt):
            return struct.unpack(fmt, f.read(struct.calcsize(fmt)))[0]

        def rstr():
            return f.read(u("<Q"))

        def skip(t):
            if t == 8:
                rstr()
            elif t == 9:
                et, cnt = u("<I"), u("<Q")
                if et == 8:
                    for _ in range(cnt):
                        rstr()
                else:
                    f.seek(sizes[et] * cnt, 1)
            else:
                f.seek(sizes[t], 1)
        arch = None
        for _ in range(min(n_kv, 100000)):
            key, t = rstr(), u("<I")
            if key == b"general.architecture" and t == 8:
                arch = rstr().decode()
                if not tensors:
                    break
            else:
                skip(t)
        infos = []
        for _ in range(min(n_tensors, 1000000) if tensors else 0):
            name = rstr().decode("utf-8", "replace")
            ne = [u("<Q") for _ in range(u("<I"))]
            infos.append((name, ne, u("<I")))
            u("<Q")  # the data offset
    if arch is None:
        raise Failure(5, "llama-token: %s has no general.architecture" % path)
    return arch, infos


def gguf_arch(path):
    return gguf_header(path)[0]


class RouteCapture:
    """Real routing from llama.cpp's graph evaluation callback (cb_eval, the method of the
    Celeron study's harness): the `ffn_moe_topk-<layer>` tensors (int32 expert ids, [k, n_tokens],
    router rank order) and the routing weights, `ffn_moe_weights_norm-<layer>` where the arch
    normalises them (qwen3moe does), else `_softmax`, else the raw `ffn_moe_weights`. Written as
    `# route_trace v1`: prefill rows (phase 0, layer-step-slot order) once the prompt is in,
    then decode rows (phase 1) per token. step = absolute token position. The last layer of a
    prefill batch holds only its output token (llama.cpp drops the others there).

    llama.cpp has no expert cache: residency is always 0 (a miss) and expert_bytes the layer's
    expert size (gate+up+down of one expert, from the GGUF's tensor table and ggml's row sizes),
    in a prefill batch charged at an expert's first occurrence only. What the mmapped weights
    really cost in reads is the CSV's read_bytes, not this column.
    """

    WEIGHTS = ("ffn_moe_weights_norm", "ffn_moe_weights_softmax", "ffn_moe_weights")
    WANT = frozenset(n.encode() for n in ("ffn_moe_topk",) + WEIGHTS)

    def __init__(self, lib, path, model_path, arch, n_layer, n_expert, k):
        import numpy as np
        self.np, self.k, self.error, self.pending, self.prefill = np, k, None, {}, {}
        ggml = ggml_library()
        for fn, res, args in (("ggml_get_name", ctypes.c_char_p, [ctypes.c_void_p]),
                              ("ggml_nbytes", ctypes.c_size_t, [ctypes.c_void_p]),
                              ("ggml_nelements", ctypes.c_int64, [ctypes.c_void_p]),
                              ("ggml_row_size", ctypes.c_size_t, [ctypes.c_int, ctypes.c_int64]),
                              ("ggml_backend_tensor_get", None,
                               [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t])):
            getattr(ggml, fn).restype, getattr(ggml, fn).argtypes = res, args
        self.ggml = ggml
        try:
            self.sizes = self.layer_sizes(model_path, n_layer)
        except (Failure, OSError, struct.error, UnicodeError) as exc:
            print("llama-token: route trace: expert sizes unknown (%s): expert_bytes=0" % exc,
                  file=sys.stderr, flush=True)
            self.sizes = [[0, 0] for _ in range(n_layer)]
        self.callback = lib.ggml_backend_sched_eval_callback(self.on_eval)
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        self.f = open(path, "w")  # noqa: SIM115 - written token by token, closed by close()
        self.f.write("# route_trace v1\n# model=%s arch=%s n_layer=%d n_expert=%d n_expert_used=%d"
                     "\n" % (model_path, arch, n_layer, n_expert, k)
                     + "".join("# layer=%d expert_bytes=%d dense_bytes=%d\n" % (l, *self.sizes[l])
                               for l in range(n_layer))
                     + "turn,phase,step,layer,slot,expert,weight,residency,expert_bytes\n")
        self.f.flush()

    def layer_sizes(self, model_path, n_layer):
        """layer -> (bytes of one expert, the layer's other bytes), from the GGUF header."""
        sizes = [[0, 0] for _ in range(n_layer)]
        for name, ne, kind in gguf_header(model_path, tensors=True)[1]:
            m = re.match(r"blk\.(\d+)\.(.*)$", name)
            if not m or int(m.group(1)) >= n_layer or not ne:
                continue
            rows = 1
            for n in ne[1:]:
                rows *= n
            size = self.ggml.ggml_row_size(kind, ne[0]) * rows
            if "_exps." in m.group(2) and len(ne) == 3:  # [in, out, n_expert]: one expert's slice
                sizes[int(m.group(1))][0] += size // ne[2]
            else:
                sizes[int(m.group(1))][1] += size
        return sizes

    def on_eval(self, tensor, ask, _user):
        """ask: whether the scheduler should stop after this node for us (only our tensors,
        so the rest of the graph runs in one piece); then: copy its data. Never raises, and
        returns True in data mode (False would abort the graph)."""
        try:
            base, _, layer = (self.ggml.ggml_get_name(tensor) or b"").rpartition(b"-")
            wanted = base in self.WANT and layer.isdigit()  # not "...-3 (reshaped)" views
            if ask:
                return wanted
            if wanted:
                self.record(tensor, base.decode(), int(layer))
        except Exception as exc:  # noqa: BLE001 - reported once the decode returns
            self.error = self.error or exc
        return True

    def record(self, tensor, name, layer):
        np = self.np
        words = (ctypes.c_int64 * 10).from_address(tensor)  # type(+pad), buffer, ne[4], nb[4]
        ne, nb = list(words[2:6]), list(words[6:10])
        nbytes = self.ggml.ggml_nbytes(tensor)
        raw = ctypes.create_string_buffer(nbytes)
        self.ggml.ggml_backend_tensor_get(tensor, raw, 0, nbytes)  # the tensor may be off-host
        dtype = np.int32 if name == "ffn_moe_topk" else np.float32
        values = np.ndarray(ne[::-1], dtype, buffer=raw.raw, strides=nb[::-1]).reshape(-1, self.k)
        if values.size != self.ggml.ggml_nelements(tensor):
            raise ValueError("%s-%d: unexpected layout" % (name, layer))
        self.pending.setdefault(layer, {}).setdefault(name, []).append(values.copy())

    def batch_done(self, phase, first, n):
        """The decode of positions first..first+n-1 returned: its cells become rows."""
        if self.error is not None:
            raise Failure(6, "llama-token: route capture failed: %s" % self.error)
        pending, self.pending, rows = self.pending, {}, []
        for layer in sorted(pending):
            got = pending[layer]
            if "ffn_moe_topk" not in got:
                continue
            ids = self.np.concatenate(got["ffn_moe_topk"])
            name = next((w for w in self.WEIGHTS if w in got), None)
            weights = self.np.concatenate(got[name]) if name else None
            size, charged, out = self.sizes[layer][0], set(), []
            for j, cell in enumerate(ids):
                step = first + n - len(ids) + j  # fewer tokens than the batch: its last ones
                for slot, expert in enumerate(cell.tolist()):
                    w = float(weights[j][slot]) if weights is not None else math.nan
                    paid = size if phase == 1 or expert not in charged else 0
                    charged.add(expert)
                    out.append("0,%d,%d,%d,%d,%d,%s,0,%d\n" % (
                        phase, step, layer, slot, expert, "nan" if math.isnan(w) else "%.6f" % w, paid))
            if phase == 0:
                self.prefill.setdefault(layer, []).extend(out)
            else:
                rows += out
        if phase == 1:
            self.f.write("".join(rows))
            self.f.flush()

    def end_prefill(self):
        self.f.write("".join(r for layer in sorted(self.prefill) for r in self.prefill[layer]))
        self.f.flush()
        self.prefill = {}

    def close(self):
        self.f.close()


def ggml_library():
    """ggml's base library, the one the bindings' libllama loaded (next to it)."""
    raw = sys.modules["llama_cpp.llama_cpp"]._lib
    folder = os.path.dirname(getattr(raw, "_name", "") or "")
    for name in ("libggml-base.so", "libggml-base.dylib", "ggml-base.dll"):
        if os.path.isfile(os.path.join(folder, name)):
            return ctypes.CDLL(os.path.join(folder, name))
    return raw  # dlsym on libllama also finds the symbols of the libraries it depends on


def run(args, lib, version):
    if args.prompt_file:
        with open(args.prompt_file, encoding="utf-8", errors="replace") as f:
            prompt = f.read()
    else:
        prompt = args.prompt
    cb = install_log(lib, args.verbose)  # noqa: F841  (kept alive for the run)
    lib.llama_backend_init()
    model, mparams, overrides, t_load = load(lib, args)
    ctx = None
    csv = None
    capture = None
    proc_io = ProcIO()
    try:
        vocab = lib.llama_model_get_vocab(model)
        n_vocab = lib.llama_vocab_n_tokens(vocab)
        ptoks = (lib.llama_token * (len(prompt.encode()) + 16))()
        n_prompt = lib.llama_tokenize(vocab, prompt.encode(), len(prompt.encode()), ptoks,
                                      len(ptoks), True, False)
        if n_prompt < 0:
            raise Failure(5, "llama-token: prompt tokenization failed (%d)" % n_prompt)
        if n_prompt == 0:
            raise Failure(2, "llama-token: the prompt has no tokens")
        cparams = lib.llama_context_default_params()
        cparams.n_ctx = args.ctx_size or (n_prompt + args.tokens + 8)
        cparams.n_batch = min(args.batch_size, max(1, n_prompt))
        cparams.n_ubatch = cparams.n_batch
        cparams.n_threads = args.threads
        cparams.n_threads_batch = args.threads
        cparams.no_perf = False
        arch = meta(lib, model, "general.architecture") or "?"
        settings = {
            "n_layer": meta(lib, model, arch + ".block_count"),
            "n_expert": meta(lib, model, arch + ".expert_count") or 0,
            "n_expert_used": args.top_k_experts or meta(lib, model, arch + ".expert_used_count") or 0,
        }
        if args.route_trace:
            capture = RouteCapture(lib, args.route_trace, os.path.expanduser(args.model), arch,
                                   int(settings["n_layer"] or 0), int(settings["n_expert"]),
                                   int(settings["n_expert_used"]))
            cparams.cb_eval = capture.callback
            cparams.cb_eval_user_data = None
        ctx = lib.llama_init_from_model(model, cparams)
        if not ctx:
            raise Failure(5, "llama-token: llama.cpp could not create a context (see its log)")
        load_s = time.perf_counter() - t_load
        print("llama-token: loaded %s (%s, %s layers, %s experts, top-%s) in %.3f s; threads=%d "
              "mmap=%s; prompt %d tokens, generating %d" % (
                  args.model, arch, settings["n_layer"], settings["n_expert"],
                  settings["n_expert_used"], load_s, args.threads,
                  "off" if args.no_mmap else "on", n_prompt, args.tokens),
              file=sys.stderr, flush=True)
        if args.csv:
            os.makedirs(os.path.dirname(os.path.abspath(args.csv)), exist_ok=True)
            csv = open(args.csv, "w")
            csv.write("# bmoe_metrics v1\n"
                      "# model=%s arch=%s n_layer=%s n_expert=%s n_expert_used=%s threads=%d "
                      "n_ctx=%d\n# engine=%s llama_cpp_python=%s moe_stream=0 mmap=%d "
                      "n_vocab=%d\nstep,steps,wall_ms,io_ms,compute_ms,read_bytes,cache_hit_pct,"
                      "stall_ms,mgmt_ms,majflt,cpu_ms,token\n"
                      % (os.path.basename(args.model), arch, settings["n_layer"],
                         settings["n_expert"], settings["n_expert_used"], args.threads,
                         cparams.n_ctx, ENGINE, version, 0 if args.no_mmap else 1, n_vocab))
            csv.flush()
        return generate(args, lib, ctx, vocab, n_vocab, ptoks, n_prompt, load_s, csv, proc_io,
                        capture)
    finally:
        if csv:
            csv.close()
        if capture:
            capture.close()
        proc_io.close()
        if ctx:
            lib.llama_free(ctx)
        lib.llama_model_free(model)
        del overrides


def argmax(logits, n):
    best, best_v = 0, logits[0]
    for i in range(1, n):
        v = logits[i]
        if v > best_v:
            best, best_v = i, v
    return best


def generate(args, lib, ctx, vocab, n_vocab, ptoks, n_prompt, load_s, csv, proc_io, capture):
    n = args.tokens
    clock = time.perf_counter
    # prefill: all prompt tokens but the last, in batches
    t0 = clock()
    n_pre = n_prompt - 1
    done = 0
    while done < n_pre:
        k = min(args.batch_size, n_pre - done)
        chunk = (lib.llama_token * k)(*ptoks[done:done + k])
        rc = lib.llama_decode(ctx, lib.llama_batch_get_one(chunk, k))
        if rc != 0:
            raise Failure(6, "llama-token: llama_decode failed on the prompt (%d)" % rc)
        if capture:
            lib.llama_synchronize(ctx)
            capture.batch_done(0, done, k)
        done += k
    lib.llama_synchronize(ctx)
    prefill_s = clock() - t0
    if capture:
        capture.end_prefill()
    try:
        import numpy as np
    except ImportError:  # pragma: no cover - the bindings depend on numpy
        np = None
    piece = ctypes.create_string_buffer(256)
    one = (lib.llama_token * 1)()
    token = ptoks[n_prompt - 1]
    pending = b""
    tot = dict(wall=0.0, read=0, majflt=0, cpu=0.0, first=0.0)
    read_known = proc_io.read() is not None
    out = sys.stdout
    for step in range(1, n + 1):
        f0, c0 = rusage()
        r0 = proc_io.read()
        t0 = clock()
        one[0] = token
        rc = lib.llama_decode(ctx, lib.llama_batch_get_one(one, 1))
        if rc != 0:
            raise Failure(6, "llama-token: llama_decode failed at step %d (%d)" % (step, rc))
        logits = lib.llama_get_logits_ith(ctx, -1)
        if np is not None:
            token = int(np.ctypeslib.as_array(logits, shape=(n_vocab,)).argmax())
        else:
            token = argmax(logits, n_vocab)
        wall = (clock() - t0) * 1e3
        r1 = proc_io.read()
        f1, c1 = rusage()
        rb = (r1 - r0) if (r0 is not None and r1 is not None) else None
        row = (round(wall, 3), f1 - f0, round(c1 - c0, 3))
        tot["wall"] += row[0]
        if step == 1:
            tot["first"] = row[0]
        tot["majflt"] += row[1]
        tot["cpu"] += row[2]
        tot["read"] += rb or 0
        if csv:
            csv.write("%d,%d,%.3f,0.000,%.3f,%s,-1.00,0.000,0.000,%d,%.3f,%d\n" % (
                step, n, row[0], row[0], "" if rb is None else rb, row[1], row[2], token))
            csv.flush()  # the agent tails the live file
        if capture:  # the token just decoded sits at position n_pre + step - 1
            capture.batch_done(1, n_pre + step - 1, 1)
        m = lib.llama_token_to_piece(vocab, token, piece, len(piece), 0, False)
        if m > 0:
            pending += piece.raw[:m]
            text, pending = split_utf8(pending)
            if text:
                out.write(text)
                out.flush()
    if pending:
        out.write(pending.decode("utf-8", errors="replace"))
    lib.llama_synchronize(ctx)
    perf = lib.llama_perf_context(ctx)
    report(args, csv, tot, n_prompt, n_pre, load_s, prefill_s, perf, read_known)
    return 0


def split_utf8(data):
    """(decoded complete characters, trailing bytes of an incomplete one)."""
    for cut in range(len(data), max(len(data) - 4, -1), -1):
        try:
            return data[:cut].decode("utf-8"), data[cut:]
        except UnicodeDecodeError:
            continue
    return data.decode("utf-8", errors="replace"), b""


def report(args, csv, tot, n_prompt, n_pre, load_s, prefill_s, perf, read_known):
    n = args.tokens
    s_tok = tot["wall"] / 1e3 / n
    tps = n / (tot["wall"] / 1e3) if tot["wall"] > 0 else 0.0
    read_mib = tot["read"] / 1048576
    prefill_tps = n_pre / prefill_s if prefill_s > 0 and n_pre else 0.0
    cpu_tok = tot["cpu"] / 1e3 / n
    llama_tps = 1e3 * perf.n_eval / perf.t_eval_ms if perf.t_eval_ms > 0 else 0.0
    if csv:
        csv.write("# summary tokens=%d s/tok=%.4f tok/s=%.3f read_MiB=%s io_s=0.00 "
                  "compute_s/tok=%.4f io_s/tok=0.000 cache_hit_pct=-1.0 n_prompt=%d load_s=%.3f "
                  "prefill_s=%.3f prefill_tps=%.2f stall_s/tok=0.000 mgmt_s/tok=0.000 "
                  "majflt/tok=%.2f cpu_s/tok=%.4f llama_n_eval=%d llama_eval_ms=%.3f "
                  "llama_tok/s=%.3f llama_n_p_eval=%d llama_p_eval_ms=%.3f\n"
                  % (n, s_tok, tps, "%.1f" % read_mib if read_known else "-1", s_tok, n_prompt,
                     load_s, prefill_s, prefill_tps, tot["majflt"] / n, cpu_tok, perf.n_eval,
                     perf.t_eval_ms, llama_tps, perf.n_p_eval, perf.t_p_eval_ms))
        csv.flush()
    lines = ["",
             "generation: %d tokens, %.4f s/token (%.3f tok/s)" % (n, s_tok, tps),
             "compute: %.1f%% CPU occupancy (%.4f cpu-s/token over %d threads), %.2f major "
             "faults/token" % (100 * cpu_tok / (s_tok * args.threads) if s_tok > 0 else 0.0,
                               cpu_tok, args.threads, tot["majflt"] / n),
             "prefill: %d tokens, %.3f s (%.1f tok/s) | model load %.3f s | TTFT %.3f s"
             % (n_pre, prefill_s, prefill_tps, load_s, load_s + prefill_s + tot["first"] / 1e3)]
    print("\n".join(lines), flush=True)
    print("llama-token: llama.cpp perf: eval %d tokens in %.3f ms (%.3f tok/s), prompt eval %d "
          "tokens in %.3f ms" % (perf.n_eval, perf.t_eval_ms, llama_tps, perf.n_p_eval,
                                 perf.t_p_eval_ms), file=sys.stderr, flush=True)


def on_sigterm(signum, frame):
    raise Terminated()


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        lib, version = import_bindings()
        return run(args, lib, version)
    except Failure as exc:
        print(str(exc), file=sys.stderr, flush=True)
        return exc.code
    except Terminated:
        print("\nllama-token: terminated", file=sys.stderr, flush=True)
        return 143


if __name__ == "__main__":
    sys.exit(main())
