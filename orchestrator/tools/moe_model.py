"""Random-weight qwen3moe GGUF models that llama.cpp loads and runs.

No model hub is reachable from this project's machines, so the llama.cpp engines are measured
on models orch writes itself with the `gguf` package (the `llama` extra): a real qwen3moe graph
(attention with q/k norms, a router, top-k experts with gate/up/down) with seeded random
weights. The output is gibberish, but it is deterministic, the compute per token scales with
the experts used, and greedy decoding changes text when the routing changes.

Vocabulary: GPT-2 style byte-level BPE over all 256 bytes (so any prompt tokenizes), with the
output rows of everything but printable ASCII (0x20-0x7e) set to zero. A zero logit is never
the greedy choice against 95 random ones, so generated text is always printable ASCII: with
random weights llama.cpp would otherwise hold back incomplete UTF-8 sequences forever. The end
of text token has a zero row too, so generation runs to -n.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import numpy as np


@dataclass(frozen=True)
class MoeShape:
    layers: int
    experts: int
    experts_used: int     # the default top-k (qwen3moe.expert_used_count)
    embd: int
    heads: int
    kv_heads: int
    expert_ff: int
    context: int = 4096
    f16: bool = True


SIZES: dict[str, MoeShape] = {
    # ~7 MB, loads in milliseconds: for tests.
    "tiny": MoeShape(layers=4, experts=8, experts_used=2, embd=128, heads=4, kv_heads=2,
                     expert_ff=256),
    # ~416 MB, a few ms per token on 2 cores: for measuring top-k, threads, mmap.
    "medium": MoeShape(layers=8, experts=16, experts_used=4, embd=512, heads=8, kv_heads=4,
                       expert_ff=1024),
}

PRINTABLE = range(0x20, 0x7F)


MODEL_DIR = "~/.cache/orch/models"


def default_model_path(size: str) -> Path:
    """Where `orch models make-moe --size SIZE` writes by default: ~/.cache/orch/models/
    qwen3moe-SIZE.gguf, the path matrices/llama-local.yaml names (llama-token expands `~`)."""
    return Path(os.path.expanduser(MODEL_DIR)) / f"qwen3moe-{size}.gguf"


def _byte_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map (byte-level BPE tokens)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def vocabulary() -> tuple[list[str], list[int], list[str], int]:
    """(tokens, token types, merges, eos id). Tokens 0..255 are the bytes, in byte order."""
    import gguf

    b2u = _byte_to_unicode()
    tokens = [b2u[b] for b in range(256)]
    types = [int(gguf.TokenType.NORMAL)] * 256
    # One merge (space + 't'), because llama.cpp wants the merges key for a gpt2 vocabulary.
    merges = [f"{b2u[0x20]} t"]
    tokens.append(b2u[0x20] + "t")
    types.append(int(gguf.TokenType.NORMAL))
    tokens.append("<|endoftext|>")
    types.append(int(gguf.TokenType.CONTROL))
    return tokens, types, merges, len(tokens) - 1


def _tensors(shape: MoeShape, n_vocab: int, seed: int) -> Iterator[tuple[str, tuple[int, ...], bool]]:
    """(name, numpy shape, is_matrix) of every tensor; numpy shapes are ggml's ne reversed."""
    e, hd = shape.embd, shape.embd // shape.heads
    yield "token_embd.weight", (n_vocab, e), True
    yield "output_norm.weight", (e,), False
    yield "output.weight", (n_vocab, e), True
    for i in range(shape.layers):
        p = f"blk.{i}."
        yield p + "attn_norm.weight", (e,), False
        yield p + "attn_q.weight", (shape.heads * hd, e), True
        yield p + "attn_k.weight", (shape.kv_heads * hd, e), True
        yield p + "attn_v.weight", (shape.kv_heads * hd, e), True
        yield p + "attn_output.weight", (e, shape.heads * hd), True
        yield p + "attn_q_norm.weight", (hd,), False
        yield p + "attn_k_norm.weight", (hd,), False
        yield p + "ffn_norm.weight", (e,), False
        yield p + "ffn_gate_inp.weight", (shape.experts, e), True
        yield p + "ffn_gate_exps.weight", (shape.experts, shape.expert_ff, e), True
        yield p + "ffn_up_exps.weight", (shape.experts, shape.expert_ff, e), True
        yield p + "ffn_down_exps.weight", (shape.experts, e, shape.expert_ff), True


def _values(name: str, np_shape: tuple[int, ...], matrix: bool, shape: MoeShape,
            seed: int) -> np.ndarray:
    """The tensor's data: norms are ones; matrices N(0, 1/fan_in), seeded by name."""
    if not matrix:
        return np.ones(np_shape, dtype=np.float32)
    rng = np.random.default_rng([seed, *name.encode()])
    fan_in = np_shape[-1]
    scale = 1.0 / np.sqrt(fan_in)
    if name.endswith("ffn_gate_inp.weight"):
        scale *= 4.0  # a decisive router: top-k picks differ clearly from token to token
    data = rng.standard_normal(np_shape, dtype=np.float32) * np.float32(scale)
    if name == "output.weight":
        keep = np.zeros(np_shape[0], dtype=bool)
        keep[list(PRINTABLE)] = True
        data[~keep] = 0.0
        data *= np.float32(8.0)  # sharp logits: greedy text does not hinge on rounding
    # The router stays f32 (as converted Qwen3 models keep it); the rest is f16 when asked.
    if shape.f16 and not name.endswith("ffn_gate_inp.weight"):
        return data.astype(np.float16)
    return data


def make_moe(size: str | MoeShape, out: str | Path, seed: int = 0,
             log: Callable[[str], None] | None = None) -> Path:
    """Write a random-weight qwen3moe GGUF to `out` (atomically); returns the path."""
    import gguf

    shape = SIZES[size] if isinstance(size, str) else size
    if shape.embd % shape.heads or shape.heads % shape.kv_heads:
        raise ValueError("embd must divide by heads, and heads by kv_heads")
    if not 1 <= shape.experts_used <= shape.experts:
        raise ValueError("experts_used must be in 1..experts")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp.{os.getpid()}")
    t0 = time.monotonic()
    tokens, types, merges, eos = vocabulary()
    name = f"orch random qwen3moe {size if isinstance(size, str) else 'custom'} seed {seed}"
    w = gguf.GGUFWriter(str(tmp), "qwen3moe")
    try:
        w.add_name(name)
        w.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if shape.f16 else gguf.LlamaFileType.ALL_F32)
        w.add_context_length(shape.context)
        w.add_embedding_length(shape.embd)
        w.add_block_count(shape.layers)
        w.add_feed_forward_length(shape.expert_ff * shape.experts_used)
        w.add_expert_feed_forward_length(shape.expert_ff)
        w.add_head_count(shape.heads)
        w.add_head_count_kv(shape.kv_heads)
        w.add_key_length(shape.embd // shape.heads)
        w.add_value_length(shape.embd // shape.heads)
        w.add_rope_freq_base(1_000_000.0)
        w.add_layer_norm_rms_eps(1e-6)
        w.add_expert_count(shape.experts)
        w.add_expert_used_count(shape.experts_used)
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre("qwen2")
        w.add_token_list(tokens)
        w.add_token_types(types)
        w.add_token_merges(merges)
        w.add_eos_token_id(eos)
        w.add_bos_token_id(eos)
        w.add_pad_token_id(eos)
        w.add_add_bos_token(False)
        specs = list(_tensors(shape, len(tokens), seed))
        for tname, np_shape, matrix in specs:
            f16 = shape.f16 and matrix and not tname.endswith("ffn_gate_inp.weight")
            dtype = np.float16 if f16 else np.float32
            nbytes = int(np.prod(np_shape)) * np.dtype(dtype).itemsize
            w.add_tensor_info(tname, np_shape, np.dtype(dtype), nbytes)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_ti_data_to_file()
        for tname, np_shape, matrix in specs:
            w.write_tensor_data(_values(tname, np_shape, matrix, shape, seed))
        w.close()
        os.replace(tmp, out)
    except BaseException:
        w.close()
        tmp.unlink(missing_ok=True)
        raise
    if log:
        log(f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB, {shape.layers} layers x "
            f"{shape.experts} experts, top-{shape.experts_used}, embd {shape.embd}) in "
            f"{time.monotonic() - t0:.1f} s")
    return out
