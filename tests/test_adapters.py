"""Engine adapters llama-bench, llama-cli/llama-completion and generic: argv building and
parsing of recorded output (tests/fixtures/llama/, printed with llama.cpp's own formats; the
Celeron CSV's column names are assumed, see orchestrator/engines/generic.py), and that
the statistics read their records."""
from __future__ import annotations

import csv
import dataclasses
import statistics
from pathlib import Path

import pandas as pd
import pytest
from test_analysis_oracle import run_stats

from orchestrator.engines import CellSpec
from orchestrator.plugins import engine_names, get_adapter
from orchestrator.engines.llama_cli import parse_perf_line

FIX = Path(__file__).resolve().parent / "fixtures" / "llama"
TRICKY_PROMPT = 'He said "don\'t"\nthen left; $HOME `id` {csv} {prompt}'
CELERON_OPTIONS = {
    "argv": ["{binary}", "-m", "{model}", "-o", "{csv}", "-p", "{prompt}", "-n", "{tokens}",
             "{flags}"],
    "csv_columns": {"step": "token", "wall_ms": "tok_s", "io_ms": "pread_s",
                    "mgmt_ms": "madvise_s", "majflt": "majflt", "read_bytes": "pread_bytes"},
    "csv_scale": {"wall_ms": 1000, "io_ms": 1000, "mgmt_ms": 1000},
    "regex": {
        "load_s": r"load time =\s*([0-9.]+) ms",
        "prefill_tps": r"prompt eval time = .*\(\s*[0-9.]+ ms per token,\s*([0-9.]+) "
                       r"tokens per second",
    },
    "regex_scale": {"load_s": 0.001},
}


def cell(prompt: str = "The history of the Roman Empire begins with", flags=(), model="/m/q.gguf",
         tokens: int = 64) -> CellSpec:
    return CellSpec(binary="/data/bin/engine", model_path=model, prompt=prompt, tokens=tokens,
                    flags=list(flags), csv_path="/data/orch/jobs/j1/tokens.csv")


def feed(parser, tag: str, path_or_lines) -> list:
    lines = (path_or_lines.read_text().splitlines() if isinstance(path_or_lines, Path)
             else list(path_or_lines))
    rows = []
    for line in lines:
        rows.extend(parser.feed(tag, line))
    return rows


def frame(rows) -> pd.DataFrame:
    return pd.DataFrame([{k: v for k, v in dataclasses.asdict(r).items() if k != "extra"}
                         for r in rows])


def test_registry():
    assert {"llama-bench", "llama-cli", "llama-completion", "generic"} <= set(engine_names())
    assert get_adapter("llama-completion").name == "llama-completion"
    assert get_adapter("llama-cli").writes_csv is False
    with pytest.raises(KeyError):
        get_adapter("llama-server")


# ---- llama-bench -------------------------------------------------------------------------------

def test_llama_bench_argv():
    a = get_adapter("llama-bench")
    assert a.build_argv(cell(tokens=128)) == [
        "/data/bin/engine", "-m", "/m/q.gguf", "-n", "128", "-p", "0", "-o", "jsonl"]
    argv = a.build_argv(cell(tokens=128, flags=["-p", "512", "-r", "5", "-t", "2"]))
    assert argv == ["/data/bin/engine", "-m", "/m/q.gguf", "-n", "128", "-o", "jsonl",
                    "-p", "512", "-r", "5", "-t", "2"]
    assert argv.count("-p") == 1
    # the config's -n and -o jsonl are not doubled; another format cannot be parsed
    argv = a.build_argv(cell(flags=["--n-gen=32", "-o", "jsonl"]))
    assert "-n" not in argv and argv.count("-o") == 1
    with pytest.raises(ValueError, match="jsonl"):
        a.build_argv(cell(flags=["-o", "md"]))
    with pytest.raises(ValueError):
        a.build_argv(cell(model=None))


def test_llama_bench_parses_jsonl():
    p = get_adapter("llama-bench").new_parser(prompt="ignored")
    assert feed(p, "O", FIX / "llama-bench.jsonl") == []          # no per-token data
    assert feed(p, "E", ["load_backend: loaded CPU backend"]) == []
    r = p.record()
    assert [x["test"] for x in r.extra["results"]] == ["pp512", "tg128"]
    assert r.extra["results"][1]["samples_ns"][0] == 61793397377
    assert r.tokens == 128 and r.decode_tps == pytest.approx(2.063539)
    assert r.extra["decode_tps_stddev"] == pytest.approx(0.037462)
    assert r.prefill_tps == pytest.approx(14.270297)
    assert r.prefill_s == pytest.approx(35.887380361) and r.prompt_tokens == 512
    assert r.load_s is None and r.ttft_s is None
    assert r.extra["repetitions"] == [2.07142, 2.09394, 2.10068, 2.04004, 2.01162]
    spread = r.extra["repetition_spread"]
    assert spread["n"] == 5
    assert spread["mean"] == pytest.approx(2.063539, abs=1e-5)   # printed samples: 6 digits
    assert spread["stdev"] == pytest.approx(0.037462, abs=1e-5)
    assert r.engine_build == "3cb7ffb1a (10453)"
    assert r.settings["model_type"] == "qwen2 1B Q8_0"
    assert r.settings["n_threads"] == 2 and "avg_ts" not in r.settings
    assert r.complete is True and r.errors == [] and p.warnings() == []


def test_llama_bench_stats():
    p = get_adapter("llama-bench").new_parser()
    feed(p, "O", FIX / "llama-bench.jsonl")
    st = run_stats(frame([]), p.record())
    assert st["prefill_tps"] == pytest.approx(14.270297)
    assert st["complete"] is True
    assert st["streaming"] is False and st["n"] == 0
    assert st["ttft_s"] is None        # llama-bench measures no load time


def test_llama_bench_mean_in_stats():
    p = get_adapter("llama-bench").new_parser()
    feed(p, "O", FIX / "llama-bench.jsonl")
    assert run_stats(frame([]), p.record())["mean"] == pytest.approx(2.063539)


def test_llama_bench_killed_mid_run():
    pp, tg = (FIX / "llama-bench.jsonl").read_text().splitlines()
    p = get_adapter("llama-bench").new_parser()
    feed(p, "O", ["| model | size |", pp, tg[:300]])      # tg line cut by the kill
    r = p.record()
    assert r.complete is False and r.prefill_tps == pytest.approx(14.270297)
    assert r.decode_tps is None and r.tokens is None
    assert any("not JSON" in e for e in r.errors)
    assert any("no tg" in e for e in r.errors)
    assert r.extra["stdout_other"] == ["| model | size |"]
    empty = get_adapter("llama-bench").new_parser().record()
    assert empty.complete is False and empty.prefill_tps is None and empty.streaming is None


def test_llama_bench_several_tg_tests_warn():
    tg = (FIX / "llama-bench.jsonl").read_text().splitlines()[1]
    p = get_adapter("llama-bench").new_parser()
    feed(p, "O", [tg, tg.replace('"n_threads": 2', '"n_threads": 1')])
    assert any("2 tg tests" in w for w in p.warnings())
    assert p.record().settings["n_threads"] == 2        # the first is the one reported


# ---- llama-cli / llama-completion ---------------------------------------------------------------

@pytest.mark.parametrize("name", ["llama-cli", "llama-completion"])
def test_llama_cli_argv(name):
    a = get_adapter(name)
    argv = a.build_argv(cell(prompt=TRICKY_PROMPT, flags=["-no-cnv", "-t", "2"]))
    assert argv == ["/data/bin/engine", "-m", "/m/q.gguf", "-p", TRICKY_PROMPT, "-n", "64",
                    "--no-display-prompt", "-no-cnv", "-t", "2"]
    assert all(isinstance(x, str) for x in argv)
    argv = a.build_argv(cell(flags=["--display-prompt", "-st"]))
    assert "--no-display-prompt" not in argv and argv[-2:] == ["--display-prompt", "-st"]
    with pytest.raises(ValueError):
        a.build_argv(cell(model=None))


def completion_parser(stdout: str, stderr: str, prompt: str | None = None):
    p = get_adapter("llama-completion").new_parser(prompt=prompt)
    rows = feed(p, "E", FIX / stderr) + feed(p, "O", FIX / stdout)
    assert rows == []
    return p


def test_llama_completion_parses_perf_block():
    p = completion_parser("completion.stdout", "completion.stderr")
    r = p.record()
    assert r.tokens == 63
    assert r.decode_tps == pytest.approx(63 / 30.73171)
    assert round(r.decode_tps, 2) == 2.05                      # what llama.cpp printed
    assert r.extra["ms_per_token"] == 487.80
    assert r.prompt_tokens == 8 and r.prefill_tps == pytest.approx(8 / 0.57143)
    assert r.prefill_s == pytest.approx(0.57143)
    assert r.load_s == pytest.approx(2.41236)
    assert r.ttft_s == pytest.approx(2.41236 + 0.57143)
    assert r.extra["total_s"] == pytest.approx(31.40853)
    assert r.extra["timing_source"] == "common_perf_print"
    assert r.extra["perf"]["eval"]["tps"] == 2.05
    assert r.engine_build == "3cb7ffb1a (10453)"
    assert r.settings["n_threads"] == 2 and r.settings["n_cpus"] == 2
    assert r.settings["model"] == "/home/me/models/qwen2.5-0.5b-instruct-q8_0.gguf"
    assert r.text.startswith(" the founding of the city by Romulus")
    assert r.text.endswith("the first\nemperor.")
    assert r.complete is True and r.errors == [] and len(r.stderr_tail) == 50
    assert r.stderr_tail[-1].startswith("llama_memory_breakdown_print: |   - Host")
    assert p.warnings() == []


def test_llama_completion_stats():
    p = completion_parser("completion.stdout", "completion.stderr")
    st = run_stats(frame([]), p.record())
    assert st["prefill_tps"] == pytest.approx(8 / 0.57143)
    assert st["ttft_s"] == pytest.approx(2.41236 + 0.57143)
    assert st["complete"] is True


def test_llama_completion_mean_in_stats():
    p = completion_parser("completion.stdout", "completion.stderr")
    assert run_stats(frame([]), p.record())["mean"] == pytest.approx(63 / 30.73171)


def test_llama_crashed_run_is_incomplete_and_keeps_stderr_tail():
    p = completion_parser("crashed.stdout", "crashed.stderr")
    r = p.record()
    assert r.complete is False
    assert r.decode_tps is None and r.prefill_tps is None and r.streaming is None
    assert any("no llama.cpp timing lines" in e for e in r.errors)
    expected_tail = (FIX / "crashed.stderr").read_text().splitlines()[-50:]
    assert r.stderr_tail == expected_tail
    assert r.stderr_tail[-1].startswith("generate: n_ctx = 4096")
    assert r.text == " the founding of the city by Romulus in 753 BC, accor"
    st = run_stats(frame([]), r)
    assert st["complete"] is False and st["mean"] is None and st["prefill_tps"] is None


def test_llama_perf_line_variants():
    old = ("llama_print_timings:        eval time =    1234.50 ms /    31 runs   (   39.82 ms "
           "per token,    25.11 tokens per second)")
    kind, f = parse_perf_line(old)
    assert kind == "eval" and f["n"] == 31 and f["ms"] == 1234.5 and f["tps"] == 25.11
    mid = "llama_perf_context_print:        load time =     812.34 ms"
    assert parse_perf_line(mid) == ("load", {"ms": 812.34, "n": None, "ms_per_token": None,
                                             "tps": None, "source": "llama_perf_context_print"})
    # a log prefix/timestamp (--log-prefix --log-timestamps) before the logger name
    kind, f = parse_perf_line("0.05.123.456 I common_perf_print: prompt eval time =      "
                              "10.00 ms /     5 tokens (    2.00 ms per token,   500.00 "
                              "tokens per second)")
    assert kind == "prompt eval" and f["n"] == 5
    # -n 0: llama.cpp divides by zero and prints inf/nan
    kind, f = parse_perf_line("common_perf_print:        eval time =       0.00 ms /     1 "
                              "runs   (    0.00 ms per token,      inf tokens per second)")
    assert f["tps"] is None and f["ms"] == 0.0
    assert parse_perf_line("The eval time = 3 ms / 2 runs was great") is None
    assert parse_perf_line("common_perf_print: unaccounted time =  63.21 ms /   0.2 %") is None


def test_llama_cli_chat_timings_line_and_warnings():
    # the rewritten chat-only llama-cli: one stats line on stdout, in color on a terminal
    p = get_adapter("llama-cli").new_parser()
    feed(p, "E", ["main: chat template is available, enabling conversation mode "
                  "(disable it with -no-cnv)"])
    feed(p, "O", ["Rome was founded in 753 BC.", "",
                  "\x1b[33m[ Prompt: 14.0 t/s | Generation: 2.1 t/s ]\x1b[0m", "Exiting..."])
    r = p.record()
    assert r.extra["timing_source"] == "cli" and r.complete is True
    assert r.decode_tps == 2.1 and r.prefill_tps == 14.0
    assert r.tokens is None
    assert r.text == "Rome was founded in 753 BC."
    assert any("conversation mode" in w for w in p.warnings())


def test_llama_completion_sigint_is_not_complete():
    p = get_adapter("llama-completion").new_parser(prompt="Once")
    feed(p, "O", ["Once upon a time", "", "Interrupted by user"])
    feed(p, "E", (FIX / "completion.stderr").read_text().splitlines()[-10:])
    r = p.record()
    assert r.complete is False and r.tokens == 63
    assert r.text == " upon a time"                   # echoed prompt stripped
    assert any("SIGINT" in e for e in r.errors)


# ---- generic ------------------------------------------------------------------------------------

@pytest.mark.parametrize("options, needle", [
    ({"argv": ["{binary}"], "bogus": 1}, "engine_options.bogus"),
    ({"argv": []}, "engine_options.argv"),
    ({"argv": ["{binary}", "{foo}"]}, "{foo}"),
    ({"argv": ["{binary}", "--x={flags}"]}, "{flags} must be an element"),
    ({"argv": ["{binary}", "{csv}"], "csv_columns": {"wall": "t"}}, "'wall' is not a token field"),
    ({"argv": ["{binary}", "{csv}"], "csv_columns": {"wall_ms": "t"}, "csv_scale": {"io_ms": 2}},
     "csv_scale.io_ms"),
    ({"argv": ["{binary}"], "csv_columns": {"wall_ms": "t"}}, "argv has no {csv}"),
    ({"argv": ["{binary}", "{csv}"]}, "csv_columns"),
    ({"argv": ["{binary}"], "regex": {"load_s": "load [0-9.]+"}}, "'load_s': needs a group"),
    ({"argv": ["{binary}"], "regex": {"load_s": "(["}}, "'load_s': not a valid regex"),
    ({"argv": ["{binary}"], "regex_scale": {"x": 2}}, "regex_scale.x"),
    ({"argv": ["{binary}", "{csv}"], "csv_columns": {"wall_ms": "t"}, "csv_has_header": False},
     "csv_header"),
    ({"argv": ["{binary}", "{csv}"], "csv_columns": {"wall_ms": "t"}, "csv_delimiter": ";;"},
     "engine_options.csv_delimiter"),
    ({"argv": "{binary} -m {model}"}, "engine_options.argv"),
    (None, "engine_options.argv"),
])
def test_generic_options_are_validated(options, needle):
    with pytest.raises(ValueError) as exc:
        get_adapter("generic", options)
    assert needle in str(exc.value)


def test_generic_argv_placeholders():
    a = get_adapter("generic", CELERON_OPTIONS)
    assert a.writes_csv is True
    argv = a.build_argv(cell(prompt=TRICKY_PROMPT, flags=["-t", "2", "-q"], tokens=32))
    assert argv == ["/data/bin/engine", "-m", "/m/q.gguf", "-o", "/data/orch/jobs/j1/tokens.csv",
                    "-p", TRICKY_PROMPT, "-n", "32", "-t", "2", "-q"]
    # embedded placeholders; text put in is never rescanned
    b = get_adapter("generic", {"argv": ["{binary}", "--prompt={prompt}", "-n{tokens}", "{flags}"]})
    assert b.writes_csv is False
    assert b.build_argv(cell(prompt="a {model} b")) == [
        "/data/bin/engine", "--prompt=a {model} b", "-n64"]
    with pytest.raises(ValueError, match="model"):
        a.build_argv(cell(model=None))


def celeron_run():
    p = get_adapter("generic", CELERON_OPTIONS).new_parser(prompt="The history")
    rows = feed(p, "C", FIX / "celeron-expert-log.csv")
    feed(p, "E", FIX / "celeron-expert-log.stderr")
    return p, rows


def test_generic_parses_celeron_csv():
    p, rows = celeron_run()
    with open(FIX / "celeron-expert-log.csv", newline="") as f:
        raw = list(csv.DictReader(f))
    assert len(rows) == len(raw) == 32
    r0 = rows[0]
    assert r0.step == 1 and r0.wall_ms == pytest.approx(float(raw[0]["tok_s"]) * 1000)
    assert r0.io_ms == pytest.approx(float(raw[0]["pread_s"]) * 1000)
    assert r0.mgmt_ms == pytest.approx(float(raw[0]["madvise_s"]) * 1000)
    assert r0.majflt == float(raw[0]["majflt"]) and r0.read_bytes == 487587840
    assert r0.compute_ms is None and r0.extra == {"rss_mib": float(raw[0]["rss_mib"])}
    rec = p.record()
    tr = rec.extra["trailer"]
    wall = sum(float(r["tok_s"]) for r in raw)
    pread = sum(float(r["pread_s"]) for r in raw)
    madv = sum(float(r["madvise_s"]) for r in raw)
    assert tr["tokens"] == 32
    assert tr["tok/s"] == pytest.approx(32 / wall)
    assert tr["s/tok"] == pytest.approx(wall / 32)
    assert tr["io_s/tok"] == pytest.approx(pread / 32)
    assert tr["compute_s/tok"] == pytest.approx((wall - pread - madv) / 32)
    assert tr["read_MiB"] == pytest.approx(32 * 465.0)          # 487,587,840 B = 465.0 MiB/token
    assert tr["majflt/tok"] == pytest.approx(statistics.fmean(float(r["majflt"]) for r in raw))
    assert tr["load_s"] == pytest.approx(14.38312)
    assert tr["prefill_tps"] == 0.15
    assert (rec.tokens, rec.decode_tps, rec.load_s, rec.prefill_tps) == (
        32, tr["tok/s"], tr["load_s"], 0.15)
    assert rec.io_s_per_token == tr["io_s/tok"] and rec.majflt_per_token == tr["majflt/tok"]
    assert rec.read_mib == tr["read_MiB"] and rec.streaming is True
    assert rec.complete is True and rec.errors == []
    assert rec.extra["columns"][:2] == ["token", "tok_s"]


def test_generic_celeron_stats():
    p, rows = celeron_run()
    st = run_stats(frame(rows), p.record())
    wall_ms = [r.wall_ms for r in rows]
    assert st["n"] == 32
    assert st["mean"] == pytest.approx(32 / (sum(wall_ms) / 1000))
    assert st["median"] == pytest.approx(statistics.median(1000 / w for w in wall_ms))
    assert st["read_mib_per_token"] == pytest.approx(465.0)
    assert st["streaming"] is True
    assert st["io_s_per_token"] == pytest.approx(p.record().io_s_per_token)
    assert st["compute_s_per_token"] == pytest.approx(p.record().compute_s_per_token)
    assert st["prefill_tps"] == 0.15 and st["complete"] is True


def test_generic_headerless_csv_bad_rows_and_complete_regex():
    opts = {"argv": ["{binary}", "--csv", "{csv}"], "csv_has_header": False,
            "csv_header": ["n", "ms", "hit", "note"], "csv_delimiter": ";",
            "csv_columns": {"step": "n", "wall_ms": "ms", "cache_hit_pct": "hit"},
            "complete_regex": r"^done\b"}
    p = get_adapter("generic", opts).new_parser()
    rows = feed(p, "C", ["# a comment", "1;250.0;0.0;warm", "2;abc;10;x", "3;200;5", "9;\0;1;",
                         "", "4;0;12.5;", "5;nan;20;last"])
    assert [r.step for r in rows] == [1, 4, 5]
    assert rows[1].extra == {"note": None} and rows[2].wall_ms is None
    r = p.record()
    assert r.complete is False                           # no "done" line yet
    assert any("'abc'" in e for e in r.errors) and any("3 fields" in e for e in r.errors)
    assert any("line 5: '\\x00'" in e for e in r.errors)   # a NUL costs its row only
    assert r.cache_hit_pct == 20.0            # last row: cumulative
    assert r.decode_tps == pytest.approx(3 / 0.25)  # n = rows, as stats/statistics.py
    feed(p, "O", ["done in 1.2 s"])
    assert p.record().complete is True


def test_generic_missing_column_and_no_rows():
    opts = {"argv": ["{binary}", "{csv}"], "csv_columns": {"wall_ms": "tok_ms", "io_ms": "nope"},
            "regex": {"tok/s": r"([0-9.]+) tok/s"}}
    p = get_adapter("generic", opts).new_parser()
    assert p.record().complete is False
    feed(p, "C", ["tok_ms,other", "tok_ms,other", "100,x"])
    r = p.record()
    assert any("no column 'nope'" in e for e in r.errors)
    assert any("regex matched no line: tok/s" in e for e in r.errors)
    assert r.complete is True and r.tokens == 1
    feed(p, "O", ["speed 9.5 tok/s", "speed 10.5 tok/s"])
    assert p.record().decode_tps == 10.5          # engine's own number, last wins
    assert p.record().extra["values"] == {"tok/s": 10.5}
    assert p.record().extra["trailer"]["s/tok"] == pytest.approx(0.1)   # from the rows
