"""Adapter for llama.cpp's text generators: `llama-completion` and `llama-cli`.

Neither writes per-token data, so feed() returns no token rows; the record is built from the
closing timing block that llama.cpp logs on stderr after generation::

    common_perf_print:        load time =     812.34 ms
    common_perf_print: prompt eval time =     401.22 ms /     8 tokens (   50.15 ms per token, ...
        ...    19.94 tokens per second)
    common_perf_print:        eval time =    3650.61 ms /    63 runs   (   57.95 ms per token, ...
        ...    17.26 tokens per second)
    common_perf_print:       total time =    4075.90 ms /    71 tokens

(long lines wrapped here). The prefix depends on the build: `common_perf_print:`
(common/sampling.cpp, current llama-completion), `llama_perf_context_print:`
(src/llama-context.cpp, builds of late 2024 to 2025), `llama_print_timings:` (older). The
rewritten chat-only `llama-cli` (tools/cli) prints only
`[ Prompt: 19.9 t/s | Generation: 17.3 t/s ]` on stdout; that is read too, as a fallback
with one decimal and no token counts.

"eval" counts decode calls after the prompt: the first generated token comes out of the prompt
eval, so `tokens` = eval runs = generated tokens - 1, and tok/s = runs / eval time, exactly the
number llama.cpp prints (computed from the ms, which carry more digits than the printed rate).

Conversation mode is decided by the config's flags, never added here: llama-completion and the
older llama-cli switch to conversation mode when the model has a chat template (pass `-no-cnv`
for plain completion); the rewritten llama-cli is always conversational and ignores `-no-cnv`
(llama.cpp issue #27214): pass `-st` (single turn) so it exits after the answer.
"""
from __future__ import annotations

import math
import re
from collections import deque
from typing import Any

from orchestrator.engines.base import CellSpec, EngineAdapter, RunParser, TokenRow
from orchestrator.record import RunRecord, ttft

STDERR_TAIL = 50
MAX_STDOUT_LINES = 100_000    # as bmoe: a runaway engine must not fill the controller's memory
_NONE: list[TokenRow] = []
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_NUM = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:inf|nan)"
# Only a logger prefix naming perf/timings counts: generated prose cannot start a line with
# e.g. "llama_perf_context_print:" by accident, and a log prefix/timestamp before it is allowed.
_PERF = re.compile(
    rf"\b(?P<fn>\w*(?:perf|timings)\w*):\s+(?P<kind>load|prompt eval|eval|total|sample|sampling)"
    rf" time\s*=\s*(?P<ms>{_NUM}) ms(?:\s*/\s*(?P<n>\d+) (?:tokens|runs))?"
    rf"(?:\s*\(\s*(?P<mspt>{_NUM}) ms per token,\s*(?P<tps>{_NUM}) tokens per second\))?")
_CLI_TIMINGS = re.compile(rf"\[ Prompt: (?P<pp>{_NUM}) t/s \| Generation: (?P<tg>{_NUM}) t/s")
_BUILD = re.compile(r"\bbuild: (?P<number>\d+) \((?P<commit>[0-9a-fA-F]+|unknown)\)"
                    r"(?: with (?P<compiler>.+?) for (?P<target>\S+))?")
# `--version` (every llama.cpp tool): "version: 6000 (3cb7ffb1a)" or, in llama-cpp-python's
# vendored builds, "version: 0.5.0-dev (build 1, commit 0c1e570)"
_VERSION = re.compile(r"version: (?P<version>\S+) \((?:build (?P<number>\d+), commit "
                      r"(?P<commit>[0-9a-fA-F]+)|(?P<commit2>[0-9a-fA-F]+))\)")
_SYSINFO = re.compile(r"system_info: n_threads = (\d+)(?: \(n_threads_batch = (\d+)\))? / (\d+)")
_MODEL = re.compile(r"llama_model_loader: loaded meta data with \d+ key-value pairs and "
                    r"(\d+) tensors from (.+?) \(version")
_CNV_ON = re.compile(r"enabling conversation mode")
_INTERRUPTED = re.compile(r"^Interrupted by user\s*$")
_END_OF_TEXT = " [end of text]"
_STDOUT_NOISE = re.compile(r"^(?:Exiting\.\.\.|EOF by user|Interrupted by user)\s*$")


def _f(s: str | None) -> float | None:
    if s is None:
        return None
    try:
        v = float(s)
    except ValueError:
        return None
    return v if math.isfinite(v) else None


def _rate(n: int | None, ms: float | None) -> float | None:
    return n / (ms / 1000.0) if n and ms else None


def parse_perf_line(line: str) -> tuple[str, dict[str, Any]] | None:
    """(kind, fields) for one llama.cpp timing line, else None. kind: load, prompt eval,
    eval, total, sample, sampling."""
    m = _PERF.search(_ANSI.sub("", line))
    if m is None:
        return None
    n = m.group("n")
    return m.group("kind"), {"ms": _f(m.group("ms")), "n": int(n) if n is not None else None,
                             "ms_per_token": _f(m.group("mspt")), "tps": _f(m.group("tps")),
                             "source": m.group("fn")}


class LlamaCliRunParser(RunParser):
    def __init__(self, prompt: str | None = None) -> None:
        self.prompt = prompt
        self.perf: dict[str, dict[str, Any]] = {}
        self.cli_timings: dict[str, float | None] | None = None
        self.settings: dict[str, Any] = {}
        self.engine_build: str | None = None
        self.interrupted = False
        self._stdout: deque[str] = deque(maxlen=MAX_STDOUT_LINES)
        self._stderr: deque[str] = deque(maxlen=STDERR_TAIL)
        self._warnings: list[str] = []

    def feed(self, tag: str, text: str) -> list[TokenRow]:
        if tag not in ("O", "E"):
            return _NONE
        # llama.cpp logs to stderr, but a wrapper script may merge the streams: timing lines
        # are recognised on either; stdout minus them is the generated text.
        if self._meta(tag, text):
            return _NONE
        if tag == "O":
            self._stdout.append(text)
        else:
            self._stderr.append(text)
        return _NONE

    def _meta(self, tag: str, text: str) -> bool:
        """Record a timing/metadata line; True when it is a timing line (kept out of text)."""
        hit = parse_perf_line(text) if "time" in text else None
        if hit is not None:
            kind, fields = hit
            # a later block wins: in a multi-turn conversation the last turn closes the run
            self.perf[kind] = fields
            self._stderr.append(text)
            return True
        clean = _ANSI.sub("", text)
        m = _CLI_TIMINGS.search(clean)
        if m is not None:
            self.cli_timings = {"prompt_tps": _f(m.group("pp")), "gen_tps": _f(m.group("tg"))}
            return True
        if _INTERRUPTED.match(clean):   # LOG() without a level: stdout
            self.interrupted = True
        elif tag == "E":
            # build/system/model lines are LOG_INF, i.e. stderr: looking for them on stdout
            # could only pick up generated text
            self._stderr_meta(clean)
        return False

    def _stderr_meta(self, clean: str) -> None:
        if self.engine_build is None and (m := _BUILD.search(clean)) is not None:
            self.engine_build = f"{m.group('commit')} ({m.group('number')})"
            if m.group("target"):
                self.settings.update(compiler=m.group("compiler"), target=m.group("target"))
        elif (m := _SYSINFO.search(clean)) is not None:
            self.settings.update(n_threads=int(m.group(1)), n_cpus=int(m.group(3)))
            if m.group(2):
                self.settings["n_threads_batch"] = int(m.group(2))
        elif (m := _MODEL.search(clean)) is not None:
            self.settings.update(model=m.group(2), n_tensors=int(m.group(1)))
        elif _CNV_ON.search(clean) and len(self._warnings) < 20:
            self._warnings.append("conversation mode was enabled (model has a chat template): "
                                  "the prompt went through the template; pass -no-cnv for "
                                  "plain completion, or -st with the chat-only llama-cli")

    def _text(self) -> str | None:
        lines = [l for l in self._stdout if not _STDOUT_NOISE.match(_ANSI.sub("", l))]
        text = "\n".join(lines).rstrip()
        if text.endswith(_END_OF_TEXT.strip()):
            text = text[: -len(_END_OF_TEXT.strip())].rstrip()
        # only echoed with --display-prompt (orch passes --no-display-prompt by default)
        if self.prompt and text.startswith(self.prompt):
            text = text[len(self.prompt):].lstrip("\n")
        return text or None

    def record(self) -> RunRecord:
        """extra: `total_s`, `ms_per_token` (as printed), `perf` (every timing line parsed)
        and `timing_source` (the logger that printed them, or "cli")."""
        ev, pe, load = self.perf.get("eval"), self.perf.get("prompt eval"), self.perf.get("load")
        total = self.perf.get("total")
        fields: dict[str, Any] = {}
        extra: dict[str, Any] = {"perf": dict(self.perf)}
        source = None
        if ev is not None:
            source = ev["source"]
            fields.update(tokens=ev["n"], decode_tps=_rate(ev["n"], ev["ms"]) or ev["tps"])
            extra["ms_per_token"] = ev["ms_per_token"]
        elif self.cli_timings is not None:
            source = "cli"
            fields["decode_tps"] = self.cli_timings["gen_tps"]
        if pe is not None:
            fields.update(prompt_tokens=pe["n"], prefill_tps=_rate(pe["n"], pe["ms"]) or pe["tps"],
                          prefill_s=pe["ms"] / 1000.0 if pe["ms"] is not None else None)
        elif self.cli_timings is not None:
            fields["prefill_tps"] = self.cli_timings["prompt_tps"]
        if load is not None and load["ms"] is not None:
            fields["load_s"] = load["ms"] / 1000.0
        if total is not None and total["ms"] is not None:
            extra["total_s"] = total["ms"] / 1000.0
        extra["timing_source"] = source
        complete = source is not None and not self.interrupted
        errors: list[str] = []
        if source is None:
            errors.append("no llama.cpp timing lines (eval time / [ Prompt: ... ]): run crashed "
                          "or was killed before the end; see stderr_tail")
        elif self.interrupted:
            errors.append("interrupted by SIGINT: timings cover a partial generation")
        return RunRecord(
            complete=complete, errors=errors, settings=dict(self.settings),
            engine_build=self.engine_build, text=self._text(), stderr_tail=list(self._stderr),
            # weights are mmap-ed, never streamed: a run with timings did not stream
            streaming=False if fields or "total_s" in extra else None,
            ttft_s=ttft(fields.get("load_s"), fields.get("prefill_s")), extra=extra, **fields)

    def warnings(self) -> list[str]:
        return list(self._warnings)


def _has_any(flags: list[str], *names: str) -> bool:
    return any(f in names for f in flags)


class LlamaCliAdapter(EngineAdapter):
    """`llama-cli` and `llama-completion` take the same generation flags."""

    name = "llama-cli"
    writes_csv = False

    def __init__(self, name: str = "llama-cli") -> None:
        self.name = name

    def build_argv(self, cell: CellSpec) -> list[str]:
        if not cell.model_path:
            raise ValueError(f"{self.name} needs a model path (-m)")
        # The prompt is one argv element whatever it holds (quotes, newlines): the agent passes
        # argv without a shell. --no-display-prompt keeps stdout to the generated text; both
        # llama-completion and llama-cli accept it. The config's flags come last, so a flag
        # repeated there (-n, --display-prompt, -c ...) wins: llama.cpp keeps the last value.
        argv = [cell.binary, "-m", cell.model_path, "-p", cell.prompt, "-n", str(cell.tokens)]
        if not _has_any(cell.flags, "--display-prompt", "--no-display-prompt"):
            argv.append("--no-display-prompt")
        return [*argv, *cell.flags]

    def new_parser(self, prompt: str | None = None) -> RunParser:
        return LlamaCliRunParser(prompt=prompt)

    def version_argv(self, binary: str) -> list[str] | None:
        # some builds log no `build:` line during a run (llama-cpp-python's vendored one)
        return [binary, "--version"]

    def parse_version(self, output: str) -> str | None:
        m = _VERSION.search(output)
        if m is None:
            return None
        if m.group("commit"):    # as the run's own `build: N (commit)` line is recorded
            return f"{m.group('commit')} ({m.group('number')}, {m.group('version')})"
        return f"{m.group('commit2')} ({m.group('version')})"
