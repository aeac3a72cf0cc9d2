"""Parse the ceiling probes' output (probes/iobench.c, probes/membench.c) and derive the knee.

Both probes print one record per line: a tag, then space-separated key=value fields (a value
runs to the next ` key=`, so a reason with spaces survives). Anything else (a shell's noise,
an `error` record) is kept for the error message."""
from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field
from typing import Any

from orchestrator.errors import Failed

# share of the best rate that counts as "reached" for the knee (fewest lanes within 5%)
KNEE_SHARE = 0.95
_FIELD = re.compile(r"(\w+)=(.*?)(?= \w+=|$)")


class ProbeOutputError(Failed, ValueError):
    """A probe's output lacks what a result needs (it failed, or was cut off): `error: ...`,
    exit 1."""


def records(text: str) -> list[tuple[str, dict[str, str]]]:
    """(tag, fields) per line that has a tag; lines without `=` fields keep an empty dict."""
    out = []
    for line in text.splitlines():
        tag, _, rest = line.strip().partition(" ")
        if tag:
            out.append((tag, {k: v.strip() for k, v in _FIELD.findall(rest)}))
    return out


def _num(fields: dict[str, str], key: str) -> float:
    try:
        return float(fields[key])
    except (KeyError, ValueError):
        raise ProbeOutputError(f"no number {key}= in {fields}") from None


def _check_done(recs: list[tuple[str, dict[str, str]]], text: str, probe: str) -> None:
    errors = [f.get("msg", "") for tag, f in recs if tag == "error"]
    if errors:
        raise ProbeOutputError(f"{probe}: {'; '.join(errors)}")
    if not any(tag in ("done", "result") for tag, _ in recs):
        tail = " | ".join(text.strip().splitlines()[-5:])
        raise ProbeOutputError(f"{probe} ended without a result (cut off?): {tail[:400]}")


@dataclass
class IoResult:
    direct: bool
    reason: str
    seq: list[dict[str, float]]
    lanes: list[dict[str, float]]

    @property
    def seq_median(self) -> float | None:
        return statistics.median(s["mibps"] for s in self.seq) if self.seq else None

    @property
    def best(self) -> float | None:
        return max((c["mibps"] for c in self.lanes), default=None)


@dataclass
class MemResult:
    threads: int
    mib: int
    passes: list[float] = field(default_factory=list)

    @property
    def median(self) -> float | None:
        return statistics.median(self.passes) if self.passes else None

    @property
    def best(self) -> float | None:
        return max(self.passes, default=None)


def parse_iobench(text: str) -> IoResult:
    recs = records(text)
    _check_done(recs, text, "iobench")
    mode = next((f for tag, f in recs if tag == "mode"), None)
    if mode is None:
        raise ProbeOutputError("iobench: no `mode` line")
    seq = [{"offset_mib": _num(f, "offset_mib"), "mib": _num(f, "mib"),
            "seconds": _num(f, "seconds"), "mibps": _num(f, "mibps")}
           for tag, f in recs if tag == "seq"]
    lanes = [{"lanes": int(_num(f, "lanes")), "read_kib": int(_num(f, "read_kib")),
              "mib": _num(f, "mib"), "seconds": _num(f, "seconds"), "mibps": _num(f, "mibps")}
             for tag, f in recs if tag == "lanes"]
    if not seq:
        raise ProbeOutputError("iobench: no sequential sample")
    return IoResult(mode.get("direct") == "1", mode.get("reason", ""), seq, lanes)


def parse_membench(text: str) -> MemResult:
    recs = records(text)
    _check_done(recs, text, "membench")
    head = next((f for tag, f in recs if tag == "membench"), {})
    passes = [_num(f, "gibps") for tag, f in recs if tag == "pass"]
    if not passes:
        raise ProbeOutputError("membench: no pass")
    return MemResult(int(head.get("threads", 0) or 0), int(head.get("mib", 0) or 0), passes)


def knee(cells: list[dict[str, Any]], share: float = KNEE_SHARE) -> tuple[int | None, int | None]:
    """(lanes, read KiB) of the knee: at the read size whose best cell is the fastest, the
    fewest lanes reaching `share` of that best (more lanes stop helping there)."""
    if not cells:
        return None, None
    top = max(cells, key=lambda c: c["mibps"])
    size = top["read_kib"]
    at_size = sorted((c for c in cells if c["read_kib"] == size), key=lambda c: c["lanes"])
    for cell in at_size:
        if cell["mibps"] >= share * top["mibps"]:
            return int(cell["lanes"]), int(size)
    return int(top["lanes"]), int(size)  # pragma: no cover - the top cell itself qualifies
