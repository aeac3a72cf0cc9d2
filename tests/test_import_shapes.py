"""`orch import` of every shape a study records (issue 35): summary logs with `--- cell`
headers and a preamble, two turns in one section, turn records in UTF-16 / UTF-8 with a BOM and
CRLF, a `.mem` series, a sample CSV with a trailing comma and M/G sizes, a design's `files:`
rule, and three runs of one setting measured on other days or at other lengths. Each test
builds its folder in tmp_path and checks what orch believes each file is."""
from __future__ import annotations

import codecs
import json
import sqlite3
from pathlib import Path

import pytest
from cli_helpers import orch

from orchestrator.cli.documents import report_text
from orchestrator.db.runs import Runs
from orchestrator.db.store import Store
from orchestrator.ingest.series import sample_csv

CELLS = """model: /data/local/tmp/Qwen3-30B-A3B-Q4_K_M.gguf
prompt: "What is 17 times 23?"
tokens: 24

--- cell A - GPU: --gpu-require --gpu-expert-slots 24
generation: 24 tokens, 0.400 s/token (2.500 tok/s)
prefill: 20 tokens, 2.000 s (10.0 tok/s) | model load 5.000 s | TTFT 7.000 s
moe-stream: read 2400.0 MiB (100.00 MiB/token), decode 0.400 s/token (compute 0.300 + flash I/O 0.100 s/token, 250 MiB/s)
compute: 350.0% CPU occupancy (1.400 cpu-s/token over 8 threads), 0.02 major faults/token
gpu-slots: 24 slots, 1834 hits (62.1%), 812.4 MiB uploaded
--- cell B - CPU: --threads 8
generation: 24 tokens, 0.500 s/token (2.000 tok/s)
prefill: 20 tokens, 2.500 s (8.0 tok/s) | model load 5.000 s | TTFT 7.500 s
"""

TWO_TURNS = """==================== chat ====================
Hello there.
generation: 24 tokens, 0.500 s/token (2.000 tok/s)
prefill: 20 tokens, 2.500 s (8.0 tok/s) | model load 5.000 s | TTFT 7.500 s
moe-stream: read 2400.0 MiB (100.00 MiB/token), decode 0.500 s/token (compute 0.300 + flash I/O 0.200 s/token, 200 MiB/s)
And again.
generation: 30 tokens, 0.250 s/token (4.000 tok/s)
prefill: 5 tokens, 0.500 s (10.0 tok/s)
moe-stream: read 1500.0 MiB (50.00 MiB/token), decode 0.250 s/token (compute 0.200 + flash I/O 0.050 s/token, 200 MiB/s)
"""

PROTOCOL = [
    'BMOE_READY {"load_s":12.5,"arch":"qwen3moe","n_ctx":4096,"think_ctl":"template","n_expert_used":8}',
    'BMOE_BEGIN {"id":1}',
    'BMOE_PROGRESS {"step":1,"steps":10,"wall_ms":400.0}',
    'BMOE_DONE {"id":1,"cancelled":false,"tokens":10,"tok_s":2.5,"prefill_s":3.0,'
    '"prefill_tps":6.67,"n_prompt":20,"n_past":30,"read_mib":100.0,"majflt_tok":0.02,"text":"hi"}',
    'BMOE_BEGIN {"id":2}',
    'BMOE_DONE {"id":2,"cancelled":false,"tokens":5,"tok_s":5.0,"prefill_s":1.0,'
    '"prefill_tps":4.0,"n_prompt":4,"n_past":39,"read_mib":20.0,"text":"again"}',
]

MEM = """t=0 VmSwap: 0 kB VmRSS: 3500000 kB
t=10 VmSwap: 100 kB VmRSS: 3400000 kB
-- idle 240s from turn 1 done --
t=250 VmSwap: 900000 kB VmRSS: 1200000 kB
"""

SAMPLES = """t,thermal,batt,cur0,cur6,engine_pcpu,engine_rss_kb,memavail_kb,swapfree_kb,
0,41.2,33.0,1200,2400,97.5,3.5M,4.5G,1.2G,
1,41.5,33.1,1200,2400,98.0,3.6M,4.4G,1.1G,
"""


@pytest.fixture
def db(tmp_path: Path) -> str:
    return str(tmp_path / "orch.db")


def imported(db: str, folder: Path, *options: str) -> tuple[str, dict]:
    code, out = orch("import", str(folder), "--db", db, *options)
    assert code == 0, out
    return out, {r.config: r for r in Runs(Store.open(db)).current()}


def samples(db: str, run_id: int) -> list[dict]:
    """The run's stored sample rows, in order."""
    con = sqlite3.connect(db)
    try:
        rows = con.execute("select t_ms, rss_kb, mem_avail_kb, turn, extra from sample "
                           "where run_id = ? order by seq", (run_id,)).fetchall()
    finally:
        con.close()
    return [{"t_ms": r[0], "rss_kb": r[1], "mem_avail_kb": r[2], "turn": r[3],
             "extra": json.loads(r[4]) if r[4] else None} for r in rows]


def test_cell_summary_log_with_a_preamble_is_one_run_per_cell(db, tmp_path):
    folder = tmp_path / "cells"
    folder.mkdir()
    (folder / "cells.txt").write_text(CELLS)          # a .txt: recognised by content
    out, runs = imported(db, folder)
    assert set(runs) == {"A-GPU", "B-CPU"}
    a = runs["A-GPU"]
    assert a.flags == "--gpu-require --gpu-expert-slots 24"
    assert runs["B-CPU"].flags == "--threads 8"
    assert a.model == "Qwen3-30B-A3B-Q4_K_M"           # the preamble's model:
    assert a.source_file == "cells.txt [A-GPU]"
    record = a.record
    assert record.tokens == 24 and record.read_mib == 2400.0
    assert record.majflt_per_token == 0.02 and record.cpu_s_per_token == 1.4
    figures = record.extra["figures"]
    assert figures["read_mib_per_token"] == 100.0 and figures["decode_s_per_token"] == 0.4
    assert figures["cpu_occupancy_pct"] == 350.0
    assert figures["gpu_slots"] == {"slots": 24, "hits": 1834, "hits_pct": 62.1,
                                    "uploaded_mib": 812.4}
    assert a.stored_figures.n == 24                           # not "0 tokens"
    assert a.stored_figures.read_mib_per_token == pytest.approx(100.0)
    code, listing = orch("runs", "--db", db)
    assert code == 0 and "│ 24 " in listing
    # file order is the run order (no times): A (GPU) before B (CPU)
    assert a.order_index < runs["B-CPU"].order_index


def test_dollar_command_sections_take_the_commands_flags(db, tmp_path):
    folder = tmp_path / "cmds"
    folder.mkdir()
    body = "\n".join(CELLS.splitlines()[5:10])
    (folder / "console.log").write_text(
        f"$ ./bmoe-cli -m /m/gemma.gguf -p hi -n 24 --overlap --csv /sd/gemma_ov.csv\n{body}\n"
        f"$ ./bmoe-cli -m /m/gemma.gguf -p hi -n 24 --io-threads 2\n{body}\n")
    _, runs = imported(db, folder)
    assert set(runs) == {"gemma_ov", "io-threads_2"}
    assert runs["gemma_ov"].flags == "--overlap"
    assert runs["io-threads_2"].model == "gemma"


def test_two_turns_in_one_section_are_two_turns_not_the_last(db, tmp_path):
    folder = tmp_path / "twoturn"
    folder.mkdir()
    (folder / "chat.out").write_text(TWO_TURNS)
    _, runs = imported(db, folder)
    record = runs["chat"].record
    assert [t.tokens for t in record.turns] == [24, 30]
    assert [t.prompt_tokens for t in record.turns] == [20, 5]
    assert record.tokens == 54 and record.read_mib == 3900.0
    assert record.decode_tps == pytest.approx(54 / (24 * 0.5 + 30 * 0.25))
    assert record.prefill_s == 2.5            # the first turn's


@pytest.mark.parametrize("bom,codec,name", [
    (codecs.BOM_UTF16_LE, "utf-16-le", "UTF-16-LE with BOM, CRLF"),
    (codecs.BOM_UTF8, "utf-8", "UTF-8 with BOM, CRLF"),
    (codecs.BOM_UTF32_LE, "utf-32-le", "UTF-32-LE with BOM, CRLF"),
])
def test_turn_records_in_any_bom_encoding_are_one_session_run(db, tmp_path, bom, codec, name):
    folder = tmp_path / "session"
    folder.mkdir()
    (folder / "s1.txt").write_bytes(bom + "\r\n".join(PROTOCOL + [""]).encode(codec))
    out, runs = imported(db, folder)
    assert list(runs) == ["s1"], out
    run = runs["s1"]
    turns = run.record.turns
    assert [t.turn for t in turns] == [1, 2]
    assert [t.tokens for t in turns] == [10, 5]
    assert [t.prompt_tokens for t in turns] == [20, 4]
    assert [t.context_tokens for t in turns] == [30, 39]
    assert turns[0].load_s == 12.5 and turns[1].load_s is None
    assert turns[0].ttft_s == pytest.approx(15.5)
    # the engine's own keys stay as it wrote them; the run's figure is per token by name
    assert turns[0].extra["majflt_tok"] == 0.02
    assert run.record.majflt_per_token == pytest.approx(0.02)
    assert run.record.extra["import"]["encoding"] == name
    assert run.record.tokens == 15 and run.stored_figures.n == 15


def test_two_processes_in_one_file_are_two_session_runs(db, tmp_path):
    folder = tmp_path / "two"
    folder.mkdir()
    (folder / "turns.log").write_text("\n".join(PROTOCOL + PROTOCOL[:4]) + "\n")
    imported(db, folder)
    runs = Runs(Store.open(db)).current()
    assert {r.source_file: len(r.record.turns) for r in runs} == {
        "turns.log [session 1]": 2, "turns.log [session 2]": 1}
    # one file, one setting, lengths within a factor 2: repeats of one session config
    assert {r.config for r in runs} == {"turns/session"}


def test_mem_series_is_the_sessions_samples_with_the_idle_turn(db, tmp_path):
    folder = tmp_path / "idle"
    folder.mkdir()
    (folder / "s1.txt").write_text("\n".join(PROTOCOL) + "\n")
    (folder / "s1.mem").write_text(MEM)
    out, runs = imported(db, folder)
    assert "skipped" in out and list(runs) == ["s1"]
    rows = samples(db, runs["s1"].id)
    assert [r["t_ms"] for r in rows] == [0, 10000, 250000]
    assert [r["rss_kb"] for r in rows] == [3500000, 3400000, 1200000]
    assert [r["turn"] for r in rows][2] == 1
    assert rows[2]["extra"] == {"swap_kb": 900000, "idle_s": 240.0}
    assert runs["s1"].record.extra["import"]["samples_from"] == ["s1.mem"]


def test_sample_csv_with_trailing_comma_and_size_suffixes():
    rows = sample_csv(SAMPLES)
    first = rows[0]
    assert first["t_ms"] == 0 and first["rss_kb"] == 3584           # 3.5M, not shifted
    assert first["mem_avail_kb"] == 4718592                        # 4.5G in kB
    assert first["extra"]["thermal"] == 41.2 and first["extra"]["batt"] == 33
    assert first["extra"]["engine_pcpu"] == 97.5
    assert first["extra"]["swapfree_kb"] == pytest.approx(1.2 * 1024 ** 2)
    assert rows[1]["t_ms"] == 1000


def test_sample_csv_beside_the_only_run_is_its_samples_and_a_stray_one_is_skipped(db, tmp_path):
    folder = tmp_path / "app"
    folder.mkdir()
    (folder / "cells.txt").write_text(CELLS)
    (folder / "A-GPU.csv").write_text(SAMPLES)                      # named after a run
    (folder / "phone.csv").write_text(SAMPLES)                      # two runs: whose?
    out, runs = imported(db, folder)
    assert [r["rss_kb"] for r in samples(db, runs["A-GPU"].id)] == [3584, 3686]
    assert "phone.csv" in out and "device series of no run" in out


def test_design_files_rule_reads_a_file_no_recognition_would(db, tmp_path):
    folder = tmp_path / "ruled"
    folder.mkdir()
    (folder / "s1.txt").write_text("\n".join(PROTOCOL) + "\n")
    (folder / "phone.dat").write_text("sec;rss\n0;100\n5;200\n")
    (folder / "notes.dat").write_text("nothing here\n")
    design = tmp_path / "d.yaml"
    design.write_text("files:\n  phone.dat:\n    kind: samples\n    time: sec\n"
                      "    delimiter: ';'\n    columns: {rss: rss_kb}\n    units: {rss: MB}\n")
    out, runs = imported(db, folder, "--design", str(design))
    assert [r["rss_kb"] for r in samples(db, runs["s1"].id)] == [102400, 204800]
    assert "notes.dat" in out and "unknown kind" in out


def _pinned_like(folder: Path) -> None:
    """Three runs of one setting: 1581 tokens on the 20th, 67 and 1354 tokens on the 21st."""
    folder.mkdir()
    for stem, n in (("bmoe-20260720-212009", 1581), ("bmoe-20260721-090406", 67),
                    ("bmoe-20260721-103724", 1354), ("bmoe-20260721-090539", 67)):
        rows = "\n".join(f"{i},{n},100.0" for i in range(1, n + 1))
        weights = "ahwb" if stem.endswith("090539") else "anon"
        (folder / f"{stem}.csv").write_text(
            f"# model=m.gguf\n# dense_weights={weights}\nstep,steps,wall_ms\n{rows}\n"
            f"# summary tokens={n} tok/s=10.0\n")


def test_same_settings_on_other_days_or_lengths_are_not_pooled(db, tmp_path):
    folder = tmp_path / "pinned"
    _pinned_like(folder)
    _, runs = imported(db, folder)
    assert set(runs) == {"dense_weights=anon-2026-07-20-1581tok", "dense_weights=anon-67tok",
                         "dense_weights=anon-1354tok", "dense_weights=ahwb"}
    code, out = orch("table", "--db", db, "-t", "ab")
    assert code == 0 and "n=3" not in out


def test_a_design_that_pools_them_gets_a_confound_warning(db, tmp_path):
    folder = tmp_path / "pinned"
    _pinned_like(folder)
    design = tmp_path / "d.yaml"
    design.write_text("configs:\n  anon:\n    files: ['*212009.csv', '*090406.csv', "
                      "'*103724.csv']\n  ahwb:\n    files: ['*090539.csv']\n")
    _, runs = imported(db, folder, "--design", str(design))
    assert {r.config for r in runs.values()} == {"anon", "ahwb"}
    code, out = orch("table", "--db", db)
    assert code == 0, out
    assert "not all set up alike (tokens generated 1581 vs 67 vs 1354; day 2026-07-20 vs " \
        "2026-07-21)" in out


def test_date_only_measured_prints_no_time_of_day(db, tmp_path):
    folder = tmp_path / "undated"
    folder.mkdir()
    (folder / "cells.txt").write_text(CELLS)
    design = tmp_path / "d.yaml"
    design.write_text("measured: 2026-07-12\n")
    _, runs = imported(db, folder, "--design", str(design))
    assert {r.time_source for r in runs.values()} == {"design date"}
    code, out = orch("runs", "--db", db)
    assert code == 0 and "2026-07-12 (design's date)" in out and "00:00" not in out
    store = Store.open(db)
    text = report_text(store, Runs(store).current(), plots=False)
    assert "measured 2026-07-12 (the design file's date" in text and "order from the file order" in text
    assert "00:00:00" not in text


def test_yaml_bool_words_in_a_design_say_to_quote_them(db, tmp_path):
    folder = tmp_path / "f"
    folder.mkdir()
    (folder / "cells.txt").write_text(CELLS)
    design = tmp_path / "d.yaml"
    design.write_text("configs:\n  off:\n    files: ['*']\n")
    code, out = orch("import", str(folder), "--db", db, "--design", str(design))
    assert code == 2 and "quote it ('off')" in out
