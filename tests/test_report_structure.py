"""The published document's structure and truthfulness (issue 36, Build 1, 2 and 10): the
author's title and summary, Environment, Method, Results per model headed by its label with
its facts and size ÷ RAM, Reproduce; facts that say where they came from with the precision
they were given, no time of day where only a date is known, the text comparison on generated
text only; provenance that lists every file that gave a run something and the KEY=VALUE state
lines (`freq_cap=`) of its logs. On the real fixtures, imported with the committed design."""
from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from cli_helpers import orch_ok as orch

from orchestrator.config.matrix import Matrix
from orchestrator.db.store import Store
from orchestrator.ingest.state import state_lines
from orchestrator.report.document.ab import departs
from orchestrator.results.model_facts import ModelFacts
from orchestrator.stats.divergence import generated_text

FIX = Path(__file__).parent / "fixtures"
STUDY = FIX / "bigmoe" / "2026-07-21-pinned-dense-ab"
DESIGN = FIX / "designs" / "2026-07-21-pinned-dense-ab.yaml"
QWEN = "Qwen_Qwen3.6-35B-A3B-Q4_K_M"
TITLE = "Pinned dense weights on the OnePlus 15R"
ENVIRONMENT = {"Decoding": "greedy", "Prompt": "the long essay prompt of findings.md"}


def _design(tmp_path: Path, **extra: Any) -> Path:
    """The committed design with the document's keys added (title, environment, a size)."""
    data = yaml.safe_load(DESIGN.read_text(encoding="utf-8"))
    data.update(title=TITLE, environment=ENVIRONMENT)
    data["models"][QWEN]["size_gib"] = 20.5
    data.update(extra)
    path = tmp_path / "design.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def _section(text: str, heading: str) -> str:
    start = text.index(f"## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end >= 0 else None]


@pytest.fixture(scope="module")
def pinned(tmp_path_factory: pytest.TempPathFactory) -> str:
    tmp = tmp_path_factory.mktemp("pinned")
    db = str(tmp / "s.db")
    orch("import", str(STUDY), "--design", str(_design(tmp)), "--db", db)
    return orch("report", "--db", db, "--no-plots")


# ---- Build 2: the write-up's structure ---------------------------------------------------

def test_title_summary_and_sections_in_the_write_ups_order(pinned: str) -> None:
    assert pinned.startswith(f"# {TITLE}\n\nPinned dense weights (--dense-weights ahwb)")
    order = [pinned.index(f"\n## {h}\n") for h in
             ("Environment", "Method", "Results", "Reproduce", "Provenance")]
    assert order == sorted(order)


def test_environment_has_device_facts_notes_build_and_the_designs_rows_in_order(
        pinned: str) -> None:
    env = _section(pinned, "Environment")
    assert ("- **Device:** OnePlus 15R (Snapdragon 8 Elite, 8 cores, 11.4 GiB RAM, UFS 4.0, "
            "Android 16; given by the design file)") in env
    assert "- **Device notes:** Runs in-app (not over adb)." in env
    assert "- **Engine build:** bmoe" in env
    rows = re.findall(r"^- \*\*([^*]+):\*\*", env, re.M)
    # orch's rows first, then the design's in the author's order
    assert rows == ["Device", "Device notes", "Engine build", "Compute threads", *ENVIRONMENT]
    # the engine's resolved threads (the preamble's threads=) are said with their source
    assert "- **Compute threads:** 4 (engine setting `threads=4`)" in env


def test_method_names_tokens_trim_repeats_order_cooldown_and_the_columns(pinned: str) -> None:
    method = _section(pinned, "Method")
    for label in ("Tokens", "Trim", "Repeats", "Order", "Cooldown"):
        assert f"- **{label}:** " in method
    assert "67 to 1,581 generated per run" in method
    assert "**Columns.** mean = aggregate decode throughput" in method


def test_results_per_model_headed_by_its_label_with_facts_and_size_over_ram(
        pinned: str) -> None:
    assert "### Qwen3.6-35B-A3B Q4_K_M on OnePlus 15R" in pinned
    assert "### gpt-oss-120b Q4_K_M on OnePlus 15R" in pinned
    # the design's facts and size as given (GiB), the ratio against the RAM as given
    assert (f"Model: `{QWEN}` (given by the design file, from the engine's settings): "
            "qwen35moe, 40 layers, 256 experts, top-8, Q4_K_M, 20.5 GiB; "
            "≈1.8× device RAM (11.4 GiB)") in pinned


def test_reproduce_of_an_import_gives_the_command_and_the_flags_per_config(pinned: str) -> None:
    reproduce = _section(pinned, "Reproduce")
    assert "orch import 2026-07-21-pinned-dense-ab --design " in reproduce
    assert re.search(r"\| Qwen_Qwen3\.6-35B-A3B-Q4_K_M \| ahwb-long \| [^|]+ \| "
                     r"`--dense-weights ahwb` \| 8 \|", reproduce)
    assert "`--dense-weights anon --cache-mb 1000 --force-cache`" in reproduce


def test_reproduce_of_a_live_session_is_the_orch_run_command(tmp_path: Path) -> None:
    db = str(tmp_path / "orch.db")
    store = Store.open(db)
    device = store.upsert_device("pixel", "adb")
    matrix = {"name": "ab", "engine": "bmoe", "title": "Cache sizes on the Pixel",
              "models": {"q": {"local": str(tmp_path / "models" / "q.gguf")}},
              "labels": {"q": "Qwen3 30B-A3B"}, "configs": {"c": "--cache-mb 2000"}}
    sid = store.create_session(kind="run", name="ab", matrix_name="ab",
                               matrix_path=str(tmp_path / "m" / "ab.yaml"),
                               matrix_text=yaml.safe_dump(matrix), matrix_sha256="ab" * 32,
                               command=f"orch run {tmp_path}/m/ab.yaml -d pixel "
                                       f"-i {tmp_path}/devices.yaml")
    rid = store.create_run(uid="r1", session_id=sid, device_id=device, cell_key="q|c|0",
                           model="q", config="c", flags="--cache-mb 2000", repeat_index=0,
                           order_index=0, status="ok", engine="bmoe", superseded=False)
    from orchestrator.db import schema
    with store.engine.begin() as conn:
        conn.execute(schema.token.insert(), [{"run_id": rid, "seq": k, "step": k + 1,
                                              "wall_ms": 250.0} for k in range(8)])
    text = orch("report", "--db", db, "--no-plots")
    assert text.startswith("# Cache sizes on the Pixel\n")        # the matrix's title
    assert "### Qwen3 30B-A3B on pixel" in text                   # the matrix's model label
    reproduce = _section(text, "Reproduce")
    assert "orch run ab.yaml --device pixel --inventory devices.yaml" in reproduce
    assert "the matrix text as run (sha256 abababababababab…) is under Provenance" in reproduce
    # the model file: no Python dict, no absolute path under the default share mode
    provenance = _section(text, "Provenance")
    assert "{'local'" not in text and str(tmp_path) not in text
    assert "`q.gguf`" in provenance


# ---- Build 1: nothing untrue -------------------------------------------------------------

def test_design_facts_say_given_and_keep_their_precision(pinned: str) -> None:
    provenance = _section(pinned, "Provenance")
    assert "facts the agent collected" not in pinned and "facts collected" not in pinned
    assert re.search(r"\| OnePlus 15R \| [^\n]*\| 11\.4 GiB \|[^\n]*\| given by the design "
                     r"file \|", provenance)
    assert " kB)" not in provenance                       # no kB computed from 11.4 GiB
    assert "| 20.5 GiB (given by the design file) |" in provenance
    assert "bytes)" not in provenance


def test_a_date_only_design_prints_no_time_of_day(tmp_path: Path) -> None:
    design = tmp_path / "d.yaml"
    design.write_text("measured: 2026-07-12\n"
                      "device: {name: OnePlus 15R, ram_gib: 11.4}\n", encoding="utf-8")
    db = str(tmp_path / "s.db")
    orch("import", str(FIX / "bigmoe" / "2026-07-12-pr23"), "--design", str(design),
         "--db", db)
    text = orch("report", "--db", db, "--no-plots")
    when = next(line for line in text.splitlines() if line.startswith("- **When:**"))
    assert "measured 2026-07-12 (the design file's date" in when
    assert "00:00" not in when
    runs = _section(text, "Provenance").split("**Runs**")[1]
    rows = [line for line in runs.splitlines() if line.startswith("| ") and "2026-07-12" in line]
    assert len(rows) == 10
    # neither the start nor the end carries a time of day the files do not hold
    assert not any(re.search(r"2026-07-12 \d\d:\d\d", row) for row in rows)


@pytest.mark.unit
def test_model_size_and_ram_ratio_units_and_no_zero() -> None:
    tiny = ModelFacts("t", size_bytes=2_496, ram_kb=24_641_536)
    assert tiny.line() == "2,496 bytes; under 0.01× device RAM (23.5 GiB)"
    given = ModelFacts("q", size_gib=17.23, size_bytes=18_500_571_628, ram_gib=11.4)
    assert given.line() == "17.23 GiB; ≈1.51× device RAM (11.4 GiB)"


@pytest.mark.unit
def test_text_departs_compares_the_generated_text_only() -> None:
    log = (FIX / "bigmoe" / "2026-07-15-route-trace" / "gemma.log").read_text(
        encoding="utf-8-sig")
    text = log[:log.index("generation:")]
    other = text.replace("reserve took 11.27 ms", "reserve took 3.72 ms")
    assert text != other
    generated = generated_text(text)
    assert generated is not None and generated.startswith("In a Mixture-of-Experts (MoE)")
    assert "llama_" not in generated and "bmoe:" not in generated
    assert departs(text, other, False) == "identical"
    assert departs(text, other.replace("Gating Network", "Gate Network"), False).startswith(
        "char ")
    # text and log lines alternating: not separable, so no claim
    assert departs("a b c\nllama_x: y\nmore text in here\nllama_y: z\nend",
                   "a b c", False) == "—"


@pytest.mark.unit
def test_matrix_title_and_model_label_are_keys() -> None:
    m = Matrix.model_validate({"name": "x", "engine": "bmoe", "title": "T",
                               "models": {"q": "/m/q.gguf"}, "configs": {"c": "-t 4"},
                               "labels": {"q": "Qwen", "c": "four threads"}})
    assert m.title == "T" and m.label("c") == "four threads"


# ---- Build 10: provenance complete -------------------------------------------------------

@pytest.mark.unit
def test_state_lines_keep_freq_cap_and_leave_pressure_to_the_sidecar() -> None:
    assert state_lines(["generation: 1 tokens", "freq_cap=2265600", "peak_rss_kb=1",
                        "governor=schedutil", "freq_cap=1"]) == \
        {"freq_cap": 2265600, "governor": "schedutil"}


def test_provenance_lists_driver_logs_and_the_state_lines(tmp_path: Path) -> None:
    folder = tmp_path / "2026-07-17"
    shutil.copytree(FIX / "bigmoe" / "2026-07-17", folder)
    # a driver that set a frequency cap prints it, in its log's section and in a run's stdout
    log = folder / "driver-k2.log"
    log.write_text(log.read_text(encoding="utf-8").replace(
        "ENTRY STATE: batt=420 dC, memavail=6837980 kB, freq=1555200",
        "ENTRY STATE: batt=420 dC, memavail=6837980 kB, freq=1555200, freq_cap=2265600"),
        encoding="utf-8")
    with open(folder / "qwen_k6.out", "a", encoding="utf-8") as out:
        out.write("freq_cap=1958400\n")
    db = str(tmp_path / "s.db")
    orch("import", str(folder), "--db", db)
    orch("import", str(FIX / "bigmoe" / "2026-07-20-cache-replay"), "--db", db)
    text = orch("report", "1", "--db", db, "--no-plots")
    files = text[text.index("**Imported files**"):text.index("**Runs**")]
    assert "`driver-k2.log [gpt_c2000_l8_k2]` (entry state and run order)" in files
    assert "`qwen_k6.out`" in files and "`qwen_k6.metrics`" in files
    runs = text[text.index("**Runs**"):]
    assert "freq_cap=2265600" in runs and "freq_cap=1958400" in runs
    replay = orch("report", "2", "--db", db, "--no-plots")
    files = replay[replay.index("**Imported files**"):replay.index("**Runs**")]
    # the driver logs that gave runs their text and summary are listed with that role
    assert "`driver2.log [lanes8_k2]` (the run's summary lines and text)" in files
    assert "`qwen-ab-run1.log [lru_a]` (the run's summary lines and text)" in files
