"""A model's facts for the head of its section: file size, architecture, layers, experts,
top-k, and how the file compares with the device's RAM (the point of streaming a MoE model).

Sources, first found wins per fact: the GGUF header of a model file orch can read on this
machine (a matrix's `{local: FILE}`, or a plain path on a `local` device), then the engine's
resolved settings (the bmoe CSV preamble: `model= arch= n_layer= n_expert= n_expert_used=`,
docs/formats.md §1), then the run row (`model_size`, written when orch pushed or checked the
file). The device's RAM is its `mem_total_kb` fact.
"""
from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, BinaryIO

from orchestrator.config.design import GIB, session_design
from orchestrator.config.stored_matrix import stored_matrix_data
from orchestrator.db.rows import RunRow
from orchestrator.db.store import Store
from orchestrator.record import load_record
from orchestrator.stats.values import is_missing

# GGUF value types (ggml/docs/gguf.md): fixed-size scalars as struct formats
_SCALAR = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q",
           12: "d"}
_STRING, _ARRAY = 8, 9


@dataclass(frozen=True)
class ModelFacts:
    name: str
    file: str | None = None
    size_bytes: int | None = None
    arch: str | None = None
    layers: int | None = None
    experts: int | None = None
    top_k: tuple[int, ...] = ()        # experts used per token (several: configs differ)
    ram_kb: int | None = None          # the device's MemTotal
    quant: str | None = None           # the quantisation a design file names (Q4_K_M)
    size_gib: float | None = None      # the size as a design file gave it (GiB, as written)
    ram_gib: float | None = None       # the device's RAM as a design file gave it (GiB)
    label: str | None = None           # the design's `models.NAME.label` / a matrix `labels:`
    sources: tuple[str, ...] = ()      # where the facts came from (GGUF header, design file, ...)

    @property
    def ram_ratio(self) -> float | None:
        """File size over device RAM (both in bytes; a design's GiB figures as given)."""
        ram = self.ram_gib * GIB if self.ram_gib else \
            self.ram_kb * 1024 if self.ram_kb else None
        size = self.size_gib * GIB if self.size_gib else self.size_bytes
        if not size or not ram:
            return None
        return size / ram

    def size_text(self) -> str | None:
        """The size with the precision it was given: a design's GiB as written (17.23 GiB),
        else the file's bytes in decimal GB to 0.1 (how model files are quoted) and in GiB,
        the unit of the device's RAM beside it."""
        if self.size_gib:
            return f"{self.size_gib:g} GiB"
        if not self.size_bytes:
            return None
        if self.size_bytes < 1e8:       # a test model: its size in the unit it has
            return "%.1f MB" % (self.size_bytes / 1e6) if self.size_bytes >= 1e5 \
                else f"{self.size_bytes:,} bytes"
        return "%.1f GB (%.1f GiB)" % (self.size_bytes / 1e9, self.size_bytes / GIB)

    def ram_text(self) -> str | None:
        """The device's RAM as the header prints it: a design's GiB as written, else MemTotal
        in GiB to 0.1."""
        if self.ram_gib:
            return f"{self.ram_gib:g} GiB"
        return "%.1f GiB" % (self.ram_kb / 1048576) if self.ram_kb else None

    def line(self) -> str:
        """"qwen3moe, 48 layers, 128 experts, top-8, Q4_K_M, 17.23 GiB; ≈1.51× device RAM
        (11.4 GiB)": each size with the precision it was given, the RAM as the header shows it,
        the ratio to three significant digits (a small model is 0.0043×, never 0.00×)."""
        parts = []
        if self.arch:
            parts.append(self.arch)
        if self.layers:
            parts.append(f"{self.layers} layers")
        if self.experts:
            parts.append(f"{self.experts} experts")
        if self.top_k:
            parts.append("top-" + "/".join(str(k) for k in self.top_k))
        if self.quant:
            parts.append(self.quant)
        if (size := self.size_text()) is not None:
            parts.append(size)
        text = ", ".join(parts)
        ratio = self.ram_ratio
        if ratio is not None:
            shown = f"≈{ratio:.3g}×" if ratio >= 0.01 else "under 0.01×"   # never 0.00×
            text += f"; {shown} device RAM ({self.ram_text()})"
        return text

    def as_dict(self) -> dict[str, Any]:
        """For csv/json: the facts plus the ratio, under keys that name their unit."""
        out = asdict(self)
        out["top_k"] = list(self.top_k) or None
        out["sources"] = list(self.sources) or None
        out["ram_ratio"] = self.ram_ratio
        return out


# ---- GGUF header ---------------------------------------------------------------------------

def gguf_header(path: str | Path) -> dict[str, Any]:
    """The facts a GGUF file's key-value header holds: arch, layers, experts, top_k.
    With the `gguf` package (orch's `llama` extra) when it is installed, else read here."""
    try:
        import gguf
    except ImportError:
        kv = _read_kv(path)
    else:
        reader = gguf.GGUFReader(str(path))
        kv = {key: field.contents() for key, field in reader.fields.items()
              if key.startswith("general.architecture") or key.endswith(_WANTED)}
    return _facts_from_kv(kv)


_WANTED = (".block_count", ".expert_count", ".expert_used_count")


def _facts_from_kv(kv: Mapping[str, Any]) -> dict[str, Any]:
    arch = kv.get("general.architecture")
    if not arch:
        return {}
    return {"arch": str(arch), "layers": kv.get(f"{arch}.block_count"),
            "experts": kv.get(f"{arch}.expert_count"),
            "top_k": kv.get(f"{arch}.expert_used_count")}


def _read_kv(path: str | Path) -> dict[str, Any]:
    """The GGUF (v2/v3) key-value header up to the keys `_facts_from_kv` needs: scalars and
    strings kept, arrays (the tokenizer's vocabulary) skipped. Stops as soon as it has them."""
    with open(path, "rb") as f:
        magic, version = f.read(4), _unpack(f, "I")
        if magic != b"GGUF" or version < 2:
            raise ValueError(f"{path}: not a GGUF v2/v3 file")
        _unpack(f, "Q")                               # tensor count
        kv: dict[str, Any] = {}
        for _ in range(_unpack(f, "Q")):
            key = _string(f)
            value = _value(f, _unpack(f, "I"))
            if value is not None:
                kv[key] = value
            arch = kv.get("general.architecture")
            if arch and all(f"{arch}{k}" in kv for k in _WANTED):
                break
    return kv


def _unpack(f: BinaryIO, fmt: str) -> Any:
    size = struct.calcsize("<" + fmt)
    data = f.read(size)
    if len(data) != size:
        raise ValueError("GGUF header ends early")
    return struct.unpack("<" + fmt, data)[0]


def _string(f: BinaryIO) -> str:
    return f.read(_unpack(f, "Q")).decode("utf-8", errors="replace")


def _value(f: BinaryIO, vtype: int) -> Any:
    if vtype in _SCALAR:
        return _unpack(f, _SCALAR[vtype])
    if vtype == _STRING:
        return _string(f)
    if vtype == _ARRAY:                               # skipped: no fact is an array
        itype, count = _unpack(f, "I"), _unpack(f, "Q")
        if itype in _SCALAR:
            f.seek(count * struct.calcsize("<" + _SCALAR[itype]), 1)
        else:
            for _ in range(count):
                _value(f, itype)
        return None
    raise ValueError(f"unknown GGUF value type {vtype}")


# ---- one model's facts ---------------------------------------------------------------------

def model_file(name: str, matrix: dict[str, Any], matrix_path: str | None,
               device_kind: str | None) -> Path | None:
    """The model's file on this machine, when the matrix (its YAML data) names one orch can
    read: `{local: FILE}` (relative to the matrix file), or a plain path on a `local` device."""
    entry = (matrix.get("models") or {}).get(name)
    if isinstance(entry, dict) and entry.get("local"):
        path = Path(str(entry["local"])).expanduser()
        if not path.is_absolute() and matrix_path:
            path = Path(matrix_path).parent / path
    elif isinstance(entry, str) and device_kind == "local":
        path = Path(entry).expanduser()
    else:
        return None
    return path if path.is_file() else None


def model_facts(name: str, runs: Sequence[RunRow], device_facts: Mapping[str, Any] | None = None,
                file: Path | None = None, given: Any = None,
                label: str | None = None) -> ModelFacts:
    """The facts of model `name` from its runs (rows with `model_size` and `summary`), the
    device's facts and, when given, its GGUF file (see `model_file`) and its design file entry
    (`given`, a config/design.py ModelInfo: `facts:` and the size as written). First found
    wins per fact: the file's header, the design, the engine's resolved settings."""
    header: dict[str, Any] = {}
    if file is not None:
        try:
            header = gguf_header(file)
        except (OSError, ValueError, struct.error):
            header = {}        # unreadable or not GGUF: the preamble's facts still stand
    settings = [load_record(r.summary).settings for r in runs]
    design = dict(given.facts) if given is not None else {}

    def first(key: str) -> Any:
        return next((s[key] for s in settings if not is_missing(s.get(key))), None)

    sizes = [r.model_size for r in runs if getattr(r, "model_size", None)]
    size = file.stat().st_size if file is not None else (sizes[0] if sizes else None)
    used = sorted({int(s["n_expert_used"]) for s in settings
                   if isinstance(s.get("n_expert_used"), (int, float))})
    # the file's own top-k is the model's (a design's too); without it, what the runs resolved
    # (a config that overrides it, e.g. --n-expert-used 6, makes several)
    own_k = header.get("top_k") or _int(design.get("top_k"))
    top_k = (int(own_k),) if own_k else tuple(used)
    device = device_facts or {}
    ram = str(device.get("mem_total_kb", ""))
    ram_gib = device.get("ram_gib") if device.get("source") == "design file" else None
    sources = [("GGUF header", bool(header)), ("design file", bool(design) or (
        given is not None and (given.size_gib or given.size_bytes))),
        ("engine settings", any(settings))]
    return ModelFacts(
        name=name, file=str(file) if file else (str(first("model")) if first("model") else None),
        size_bytes=int(size) if size else None,
        arch=header.get("arch") or design.get("arch") or first("arch"),
        layers=_int(header.get("layers") or design.get("layers") or first("n_layer")),
        experts=_int(header.get("experts") or design.get("experts") or first("n_expert")),
        top_k=top_k, ram_kb=int(ram) if ram.isdigit() else None,
        quant=str(design["quant"]) if design.get("quant") else None,
        size_gib=given.size_gib if given is not None and file is None else None,
        ram_gib=float(ram_gib) if isinstance(ram_gib, (int, float)) else None,
        label=label or (given.label if given is not None else None),
        sources=tuple(s for s, used_it in sources if used_it))


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) and value else None


def facts_for_group(store: Store, session: Any, model: str, device: str,
                    runs: Sequence[RunRow]) -> ModelFacts:
    """The facts that open a (model, device) group's section: `session` is the session row
    the runs belong to (its matrix names the model's file, its design file the model's
    facts and label; a matrix may label the model in `labels:`), `runs` the group's rows."""
    dev = store.device_by_name(device)
    kind = dev.kind if dev is not None else None
    matrix = stored_matrix_data(session.matrix_text)
    path = model_file(model, matrix, session.matrix_path, kind)
    design = session_design(session)
    given = design.models.get(model) if design is not None else None
    labels = matrix.get("labels")
    label = labels.get(model) if isinstance(labels, dict) else None
    # the session's own snapshot of the device (a design's facts as it gave them), else the
    # device row's newest probe
    facts = session.device_facts or (dev.facts if dev is not None else None)
    return model_facts(model, runs, facts, path, given,
                       str(label) if label is not None else None)
