"""bmoe-cli's `# route_trace v1` files (docs/routes.md §1): which experts each MoE layer routed
each token to, one row per routed expert.

The preamble (model, n_layer, n_expert, n_expert_used, one `# layer=` line per layer) is read
line by line; the rows, up to tens of thousands, go through pandas' C reader. Columns are read
by name, so a writer that appends `dropped` (or reorders) is read the same way.
"""
from __future__ import annotations

import io
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from orchestrator.db.storable import named_int_range

MAGIC = "# route_trace v1"
COLUMNS = ("turn", "phase", "step", "layer", "slot", "expert", "weight", "residency",
           "expert_bytes")
INT_COLUMNS = tuple(c for c in COLUMNS if c != "weight")
PREAMBLE_INTS = ("n_layer", "n_expert", "n_expert_used")


@dataclass
class RouteTrace:
    preamble: dict[str, Any]                      # model, arch, n_layer, n_expert, n_expert_used
    layer_bytes: dict[int, tuple[int, int]]       # layer -> (one expert's bytes, dense bytes)
    rows: pd.DataFrame                            # COLUMNS (+ dropped), file order

    @property
    def top_k(self) -> int:
        return int(self.preamble["n_expert_used"])

    @property
    def n_expert(self) -> int:
        return int(self.preamble["n_expert"])

    def moe_layers(self) -> list[int]:
        """Layers with streamed experts (expert_bytes > 0), ascending."""
        return sorted(l for l, (expert, _) in self.layer_bytes.items() if expert > 0)

    def meta(self) -> dict[str, Any]:
        """The preamble and layer sizes as JSON-able data (stored with the run)."""
        return {"preamble": self.preamble,
                "layer_bytes": {str(l): list(v) for l, v in sorted(self.layer_bytes.items())}}

    @classmethod
    def from_stored(cls, meta: dict[str, Any], rows: pd.DataFrame) -> RouteTrace:
        layers = {int(l): (int(v[0]), int(v[1])) for l, v in meta["layer_bytes"].items()}
        return cls(dict(meta["preamble"]), layers, rows)


def _kv(body: str, lineno: int) -> dict[str, str]:
    pairs = {}
    for item in body.split():
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"line {lineno}: expected key=value, got {item!r}")
        pairs[key] = value
    return pairs


def _int(value: str | None, what: str, lineno: int) -> int:
    try:
        return int(value)  # type: ignore[arg-type]  # None raises TypeError, reported below
    except (TypeError, ValueError):
        raise ValueError(f"line {lineno}: {what} must be an integer, got {value!r}") from None


def parse_route_trace(text: str) -> RouteTrace:
    """A trace's text -> RouteTrace; a malformed file raises ValueError("line N: ...")."""
    lines = text.lstrip("\ufeff").splitlines()
    if not lines or lines[0].strip() != MAGIC:
        raise ValueError(f"line 1: expected {MAGIC!r}")
    preamble: dict[str, Any] = {}
    layer_bytes: dict[int, tuple[int, int]] = {}
    header_at = None
    for index, raw in enumerate(lines[1:], start=2):
        line = raw.strip()
        if not line:
            continue
        if not line.startswith("#"):
            header_at = index
            break
        pairs = _kv(line[1:], index)
        if "layer" in pairs:
            layer = _int(pairs["layer"], "layer", index)
            if layer in layer_bytes:
                raise ValueError(f"line {index}: layer {layer} given twice")
            layer_bytes[layer] = (_int(pairs.get("expert_bytes"), "expert_bytes", index),
                                  _int(pairs.get("dense_bytes"), "dense_bytes", index))
        else:
            preamble.update(pairs)
    if header_at is None:
        raise ValueError(f"line {len(lines)}: no header row")
    for key in PREAMBLE_INTS:
        preamble[key] = _int(preamble.get(key), key, 2)
    if not layer_bytes:
        raise ValueError("line 3: no '# layer=' lines")
    header = [c.strip() for c in lines[header_at - 1].split(",")]
    missing = [c for c in COLUMNS if c not in header]
    if missing:
        raise ValueError(f"line {header_at}: header lacks {', '.join(missing)}")
    body = "\n".join(lines[header_at - 1:])
    try:
        rows = pd.read_csv(io.StringIO(body), comment="#", skip_blank_lines=True)
    except (pd.errors.ParserError, ValueError) as exc:
        # pandas counts lines from the header: say the file's line
        found = re.search(r"line (\d+)", str(exc))
        at = header_at - 1 + int(found.group(1)) if found else header_at
        raise ValueError(f"line {at}: {str(exc).strip()}") from None
    _check_rows(rows, header_at, lines)
    want = [c for c in COLUMNS] + [c for c in rows.columns if c not in COLUMNS]
    rows = rows[want]
    rows[list(INT_COLUMNS)] = rows[list(INT_COLUMNS)].astype("int64")
    rows["weight"] = rows["weight"].astype("float64")
    return _validated(RouteTrace(preamble, layer_bytes, rows), header_at, lines)


def _data_line(position: int, header_at: int, lines: list[str]) -> int:
    """File line number of the position-th data row (after the header; comments skipped)."""
    seen = -1
    for number in range(header_at + 1, len(lines) + 1):
        line = lines[number - 1].strip()
        if line and not line.startswith("#"):
            seen += 1
            if seen == position:
                return number
    return len(lines)


def _check_rows(rows: pd.DataFrame, header_at: int, lines: list[str]) -> None:
    for column in COLUMNS:
        values = pd.to_numeric(rows[column], errors="coerce")
        # weight may be nan (not exposed); pandas reads that as missing, text stays text
        bad = values.isna() if column != "weight" else values.isna() & rows[column].notna()
        if column != "weight":
            bad |= values.notna() & (values != values.round())
        if bad.any():
            at = int(bad.to_numpy().nonzero()[0][0])
            raise ValueError(f"line {_data_line(at, header_at, lines)}: {column} "
                             f"{rows[column].iloc[at]!r} is not a number")
        # what the store's column holds on every backend (db/storable.py): a trace with a
        # value beyond it is refused like any impossible one, before the store sees it
        bounds = named_int_range("route", column)
        if bounds is None:
            bad = values.notna() & ~np.isfinite(values.astype("float64"))
        else:
            bad = (values < bounds[0]) | (values > bounds[1])
        if bad.any():
            at = int(bad.to_numpy().nonzero()[0][0])
            raise ValueError(f"line {_data_line(at, header_at, lines)}: {column} "
                             f"{rows[column].iloc[at]} is beyond what the store holds")
        rows[column] = values


def _validated(trace: RouteTrace, header_at: int, lines: list[str]) -> RouteTrace:
    """Values the format cannot hold: ids out of range, phases other than 0/1, layers without a
    `# layer=` line, a cell with a number of rows other than k."""
    rows, k = trace.rows, trace.top_k
    checks = (
        (~rows["phase"].isin((0, 1)), "phase must be 0 (prefill) or 1 (decode)"),
        ((rows["expert"] < 0) | (rows["expert"] >= trace.n_expert),
         f"expert out of range 0..{trace.n_expert - 1}"),
        ((rows["slot"] < 0) | (rows["slot"] >= k), f"slot out of range 0..{k - 1}"),
        (~rows["layer"].isin(list(trace.layer_bytes)), "layer has no '# layer=' line"),
        (~rows["residency"].isin((0, 1, 2)), "residency must be 0, 1 or 2"),
        (rows["expert_bytes"] < 0, "expert_bytes is negative"),
    )
    for bad, message in checks:
        if bad.any():
            at = int(bad.to_numpy().nonzero()[0][0])
            raise ValueError(f"line {_data_line(at, header_at, lines)}: {message}")
    sizes = rows.groupby(["turn", "phase", "step", "layer"], sort=False)["slot"].transform("size")
    bad = sizes != k
    if bad.any():
        at = int(bad.to_numpy().nonzero()[0][0])
        raise ValueError(f"line {_data_line(at, header_at, lines)}: a (turn, phase, step, layer) "
                         f"cell has {int(sizes.iloc[at])} rows, expected k={k}")
    return trace


def read_route_trace(path: str | Path) -> RouteTrace:
    return parse_route_trace(Path(path).read_bytes().decode("utf-8", errors="replace"))
