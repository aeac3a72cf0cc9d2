"""Adapter for llama.cpp's `llama-bench` run with `-o jsonl`.

llama-bench takes no prompt text and reports no per-token data: it runs each test (pp = prompt
processing of `-p N` synthetic tokens, tg = generation of `-n N` tokens) `-r R` times and
prints one JSON object per test on stdout, e.g. (one line, fields abridged)::

    {"build_commit": "8cf427ff", "build_number": 5163, "cpu_info": "...", "model_type":
     "qwen2 7B Q4_K - Medium", "n_threads": 8, ..., "n_prompt": 0, "n_gen": 128,
     "avg_ns": 1076767880, "stddev_ns": 9449585, "avg_ts": 118.881588, "stddev_ts": 1.041811,
     "samples_ns": [ 1075361300, ... ],"samples_ts": [ 119.03, ... ]}

(format: tools/llama-bench/llama-bench.cpp `jsonl_printer` and README "Output formats").
So feed() never returns token rows; the record carries the tg test as the decode (tokens,
tok/s) plus the per-repetition samples, and the pp test as the prefill.
"""
from __future__ import annotations

import json
import math
import re
from collections import deque
from typing import Any

from orchestrator.engines.base import CellSpec, EngineAdapter, RunParser, TokenRow
from orchestrator.record import RunRecord
from orchestrator.stats.statistics import spread

STDERR_TAIL = 50
MAX_RESULTS = 10_000          # a runaway grid (e.g. -t 1-256) must not fill memory
MAX_OTHER = 200               # non-JSON stdout lines kept (banners, a markdown table by mistake)
_NONE: list[TokenRow] = []
# Keys of a result object that are measurements, not settings of the run.
_TIMING_KEYS = {"test_time", "avg_ns", "stddev_ns", "avg_ts", "stddev_ts", "samples_ns",
                "samples_ts", "samples_cycles", "samples_ipc"}
_WARNING = re.compile(r"\b(error|failed|warning)\b", re.I)


def _has_flag(flags: list[str], *names: str) -> bool:
    """Whether the config's flags set one of `names` (`-p 512` or `--n-prompt=512`)."""
    return any(f in names or any(f.startswith(n + "=") for n in names if n.startswith("--"))
               for f in flags)


def _flag_value(flags: list[str], *names: str) -> str | None:
    for i, f in enumerate(flags):
        if f in names and i + 1 < len(flags):
            return flags[i + 1]
        for n in names:
            if n.startswith("--") and f.startswith(n + "="):
                return f.split("=", 1)[1]
    return None


def _num(v: Any) -> float | None:
    """A JSON number as float; None for a missing, non-numeric or non-finite value."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    v = float(v)
    return v if math.isfinite(v) else None


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def result_kind(result: dict[str, Any]) -> str:
    """'pp', 'tg' or 'pg' (llama-bench's own naming, see its markdown printer)."""
    n_prompt, n_gen = result.get("n_prompt") or 0, result.get("n_gen") or 0
    if n_prompt and not n_gen:
        return "pp"
    if n_gen and not n_prompt:
        return "tg"
    return "pg"


def result_label(result: dict[str, Any]) -> str:
    """'pp512', 'tg128', 'pp512+tg128', with ' @ dN' for a prefilled depth."""
    kind = result_kind(result)
    name = {"pp": f"pp{result.get('n_prompt')}", "tg": f"tg{result.get('n_gen')}"}.get(
        kind, f"pp{result.get('n_prompt')}+tg{result.get('n_gen')}")
    if result.get("n_depth"):
        name += f" @ d{result['n_depth']}"
    return name


class LlamaBenchRunParser(RunParser):
    def __init__(self) -> None:
        self.results: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self._stderr: deque[str] = deque(maxlen=STDERR_TAIL)
        self._other: deque[str] = deque(maxlen=MAX_OTHER)
        self._warnings: list[str] = []

    def feed(self, tag: str, text: str) -> list[TokenRow]:
        if tag == "O":
            self._stdout(text)
        elif tag == "E":
            self._stderr.append(text)
            if _WARNING.search(text) and len(self._warnings) < 20:
                self._warnings.append(text.strip())
        return _NONE

    def _stdout(self, text: str) -> None:
        line = text.strip()
        if not line.startswith("{"):
            if line:
                self._other.append(text)
            return
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            # a line cut by a crash or a full disk: keep the rest of the run
            if len(self.errors) < 50:
                self.errors.append(f"stdout line not JSON ({exc.msg}): {line[:80]}")
            return
        if not isinstance(obj, dict) or "avg_ts" not in obj:
            self._other.append(text)
            return
        if len(self.results) < MAX_RESULTS:
            self.results.append(obj)

    def _first(self, kind: str) -> dict[str, Any] | None:
        return next((r for r in self.results if result_kind(r) == kind), None)

    def record(self) -> RunRecord:
        """The first tg test is the decode, the first pp test the prefill. extra: `results`
        (every result object, labelled `test`), `repetitions` (the tg test's samples_ts),
        `repetition_spread` (their mean, sample stdev, min, max, n), `decode_tps_stddev`
        (stddev_ts) and `stdout_other` (non-JSON stdout lines)."""
        tg, pp = self._first("tg"), self._first("pp")
        fields: dict[str, Any] = {}
        reps: list[float] = []
        extra: dict[str, Any] = {"results": [dict(r, test=result_label(r)) for r in self.results]}
        if tg is not None:
            reps = [x for x in (_num(v) for v in tg.get("samples_ts") or []) if x is not None]
            fields.update(tokens=_int(tg.get("n_gen")), decode_tps=_num(tg.get("avg_ts")))
            extra["decode_tps_stddev"] = _num(tg.get("stddev_ts"))
        if pp is not None:
            avg_ns = _num(pp.get("avg_ns"))
            # llama-bench loads the model once, outside the timed region: no load_s, so
            # orch's TTFT (load_s + prefill_s) stays empty rather than pretending.
            fields.update(prompt_tokens=_int(pp.get("n_prompt")), prefill_tps=_num(pp.get("avg_ts")),
                          prefill_s=avg_ns / 1e9 if avg_ns is not None else None)
        extra.update(repetitions=reps, repetition_spread=spread(reps),
                     stdout_other=list(self._other))
        first = tg or pp or (self.results[0] if self.results else None)
        settings = {k: v for k, v in (first or {}).items() if k not in _TIMING_KEYS}
        build = None
        if first is not None and first.get("build_commit") is not None:
            build = f"{first['build_commit']} ({first.get('build_number')})"
        errors = list(self.errors)
        if not self.results:
            errors.append("no llama-bench result line on stdout (crashed, or not run with "
                          "-o jsonl)")
        elif tg is None:
            errors.append("no tg (generation) result: run killed before it, or -n 0")
        return RunRecord(
            # the tg test is the one orch's tables report; without it there is no mean
            complete=tg is not None, errors=errors, settings=settings, engine_build=build,
            stderr_tail=list(self._stderr), streaming=False if tg or pp else None,
            extra=extra, **fields)

    def warnings(self) -> list[str]:
        out = list(self._warnings)
        n_tg = sum(1 for r in self.results if result_kind(r) == "tg")
        if n_tg > 1:
            out.append(f"{n_tg} tg tests in one run (list-valued flags?): orch's tables report "
                       f"the first; all are in the record's extra.results")
        return out


class LlamaBenchAdapter(EngineAdapter):
    name = "llama-bench"
    writes_csv = False

    def build_argv(self, cell: CellSpec) -> list[str]:
        if not cell.model_path:
            raise ValueError("llama-bench needs a model path (-m)")
        flags = list(cell.flags)
        fmt = _flag_value(flags, "-o", "--output")
        if fmt is not None and fmt != "jsonl":
            raise ValueError(f"llama-bench flags set -o {fmt}; orch reads only -o jsonl")
        argv = [cell.binary, "-m", cell.model_path]
        # The config's own -n / -p win (e.g. a grid over -p); otherwise the matrix's token
        # count is the tg test and no pp test runs (llama-bench's default would be -p 512).
        if not _has_flag(flags, "-n", "--n-gen"):
            argv += ["-n", str(cell.tokens)]
        if not _has_flag(flags, "-p", "--n-prompt"):
            argv += ["-p", "0"]
        if fmt is None:
            argv += ["-o", "jsonl"]
        return [*argv, *flags]

    def new_parser(self, prompt: str | None = None) -> RunParser:
        # llama-bench uses synthetic prompt tokens: the matrix prompt text plays no part
        return LlamaBenchRunParser()
