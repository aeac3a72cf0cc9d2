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

    @property
    def ram_ratio(self) -> float | None:
        """File size over device RAM (both in bytes)."""
        if not self.size_bytes or not self.ram_kb:
            return None
        return self.size_bytes / (self.ram_kb * 1024)

    def line(self) -> str:
        """"18.5 GB, qwen3moe, 48 layers, 128 experts, top-8; 1.64× the device's 11.3 GB
        RAM": decimal GB for both sizes, as model files are quoted, so the ratio reads off."""
        parts = []
        if self.size_bytes:
            parts.append("%.1f GB" % (self.size_bytes / 1e9))
        if self.arch:
            parts.append(self.arch)
        if self.layers:
            parts.append(f"{self.layers} layers")
        if self.experts:
            parts.append(f"{self.experts} experts")
        if self.top_k:
            parts.append("top-" + "/".join(str(k) for k in self.top_k))
        text = ", ".join(parts)
        ratio = self.ram_ratio
        if ratio is not None and self.ram_kb:  # a ratio implies ram_kb; the test narrows it
            text += "; %.2f× the device's %.1f GB RAM" % (ratio, self.ram_kb * 1024 / 1e9)
        return text

    def as_dict(self) -> dict[str, Any]:
        """For csv/json: the facts plus the ratio, under keys that name their unit."""
        out = asdict(self)
        out["top_k"] = list(self.top_k) or None
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
                file: Path | None = None) -> ModelFacts:
    """The facts of model `name` from its runs (rows with `model_size` and `summary`), the
    device's facts and, when given, its GGUF file (see `model_file`)."""
    header: dict[str, Any] = {}
    if file is not None:
        try:
            header = gguf_header(file)
        except (OSError, ValueError, struct.error):
            header = {}        # unreadable or not GGUF: the preamble's facts still stand
    settings = [load_record(r.summary).settings for r in runs]

    def first(key: str) -> Any:
        return next((s[key] for s in settings if not is_missing(s.get(key))), None)

    sizes = [r.model_size for r in runs if getattr(r, "model_size", None)]
    size = file.stat().st_size if file is not None else (sizes[0] if sizes else None)
    used = sorted({int(s["n_expert_used"]) for s in settings
                   if isinstance(s.get("n_expert_used"), (int, float))})
    # the file's own top-k is the model's; without it, what the runs resolved (a config that
    # overrides it, e.g. --n-expert-used 6, makes several)
    top_k = (int(header["top_k"]),) if header.get("top_k") else tuple(used)
    ram = str((device_facts or {}).get("mem_total_kb", ""))
    return ModelFacts(
        name=name, file=str(file) if file else (str(first("model")) if first("model") else None),
        size_bytes=int(size) if size else None,
        arch=header.get("arch") or first("arch"),
        layers=_int(header.get("layers") or first("n_layer")),
        experts=_int(header.get("experts") or first("n_expert")),
        top_k=top_k, ram_kb=int(ram) if ram.isdigit() else None)


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) and value else None


def facts_for_group(store: Store, session: Any, model: str, device: str,
                    runs: Sequence[RunRow]) -> ModelFacts:
    """The facts that open a (model, device) group's section: `session` is the session row
    the runs belong to (its matrix names the model's file), `runs` the group's run rows."""
    dev = store.device_by_name(device)
    kind = dev.kind if dev is not None else None
    path = model_file(model, stored_matrix_data(session.matrix_text), session.matrix_path, kind)
    return model_facts(model, runs, dev.facts if dev is not None else None, path)
