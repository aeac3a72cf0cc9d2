"""Design files (config/design.py): the worked example of 2026-07-21-pinned-dense-ab, errors as
one `file:line:` line each, the pure matching rules, the A/B baseline per model they feed
(results/ab.py), and the notes, labels and device facts a report and `orch table` show.

Over 400 lines on purpose: the design file's every rule on its one worked example.
"""
from __future__ import annotations

import datetime as dt
import re
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
from cli_helpers import orch_ok as orch

from orchestrator.config.design import (
    Design,
    design_from_stored,
    load_design,
    parse_measured,
    session_design,
)
from orchestrator.db import schema
from orchestrator.db.store import Store
from orchestrator.errors import ConfigError
from orchestrator.results import ab
from orchestrator.stats.figures import RunFigures


def figures_of(stats: dict) -> dict:
    """Each run's figures from a dict of its values (Runs.figures' shape)."""
    return {rid: RunFigures.of(values) for rid, values in stats.items()}

FIXTURES = Path(__file__).parent / "fixtures"
STUDY = FIXTURES / "bigmoe" / "2026-07-21-pinned-dense-ab"
EXAMPLE = FIXTURES / "designs" / "2026-07-21-pinned-dense-ab.yaml"
QWEN, GPTOSS = "Qwen_Qwen3.6-35B-A3B-Q4_K_M", "gpt-oss-120b-Q4_K_M"


def write(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "study.yaml"
    path.write_text(textwrap.dedent(body), encoding="utf-8")
    return path


def preamble(csv: Path) -> dict[str, str]:
    """The `key=value` settings of a bmoe CSV's `#` preamble lines."""
    settings: dict[str, str] = {}
    for line in csv.read_text(encoding="utf-8").splitlines()[:3]:
        settings.update(p.split("=", 1) for p in line.lstrip("# ").split() if "=" in p)
    return settings


# ---- the worked example --------------------------------------------------------------------

def test_the_worked_example_loads_and_names_every_file_as_its_preamble_says():
    design = load_design(EXAMPLE)
    files = sorted(p.name for p in STUDY.glob("*.csv"))
    assert len(files) == 9
    for name in files:
        settings = preamble(STUDY / name)
        model = settings["model"].removesuffix(".gguf")
        config, position = design.config_of(name, model)
        info = design.configs[config]
        # the design agrees with the file: its model, and the dense_weights it ran with
        assert info.model == model
        assert f"--dense-weights {settings['dense_weights']}" in info.flags
        assert position == 0 and info.listed_order()
        assert config.startswith(settings["dense_weights"])
    # one config per file: no file is claimed twice, no config is left without its file
    assert sorted(design.config_of(f)[0] for f in files) == sorted(design.configs)
    assert design.config_of("bmoe-20260720-212009.csv") == ("anon-crossday", 0)
    assert design.baseline_for(QWEN) == "anon-long"
    assert design.baseline_for(GPTOSS) == "anon-short-c2000"
    assert design.baseline_for("other") is None
    assert "Not usable as a comparison" in design.config_note("anon-crossday")
    assert "ahwb ran first" in design.config_note("ahwb-long")
    assert "run order" in design.session_note().lower()
    assert design.measured_at() is None


def test_the_example_device_facts_use_the_keys_the_report_reads():
    facts = load_design(EXAMPLE).device.facts()
    assert facts == {"cpu_model": "Snapdragon 8 Elite", "cores": 8,
                     "mem_total_kb": round(11.4 * 1048576), "storage": "UFS 4.0",
                     "os": "Android 16", "notes": "Runs in-app (not over adb).",
                     "ram_gib": 11.4,      # as given: the report prints 11.4 GiB, not the kB
                     "source": "design file"}


def test_stored_round_trips_and_bad_stored_data_reads_as_none():
    design = load_design(EXAMPLE)
    stored = design.stored()
    assert "measured" not in stored and stored["device"]["name"] == "OnePlus 15R"
    assert design_from_stored(stored) == design
    assert design_from_stored(None) is None and design_from_stored({}) is None
    assert design_from_stored({"unknown": 1}) is None
    assert session_design(SimpleNamespace(import_options={"design": stored})) == design
    assert session_design(SimpleNamespace(import_options=None)) is None
    assert session_design(None) is None


# ---- measured ------------------------------------------------------------------------------

def test_parse_measured_forms():
    assert parse_measured("2026-07-21") == dt.datetime(2026, 7, 21)
    assert parse_measured("2026-07-21T10:15") == dt.datetime(2026, 7, 21, 10, 15)
    assert parse_measured("2026-07-21T10:15:43") == dt.datetime(2026, 7, 21, 10, 15, 43)
    for bad in ("21/07/2026", "2026-07-21 10:15", "2026-07-21T10:15Z", "2026-02-30", ""):
        with pytest.raises(ValueError, match="YYYY-MM-DD"):
            parse_measured(bad)


@pytest.mark.parametrize("value, want", [
    ("2026-07-21", dt.datetime(2026, 7, 21)),                    # YAML: a date
    ("2026-07-21T10:15:00", dt.datetime(2026, 7, 21, 10, 15)),   # YAML: a datetime
    ("'2026-07-21T10:15'", dt.datetime(2026, 7, 21, 10, 15)),    # a string
])
def test_measured_however_yaml_reads_it(tmp_path, value, want):
    design = load_design(write(tmp_path, f"measured: {value}\n"))
    assert design.measured_at() == want and isinstance(design.stored()["measured"], str)


# ---- errors: one line each, with the line --------------------------------------------------

BAD = {
    "unknown key": ("""\
        label: x
        configs:
          a:
            files: [a.csv]
            lable: A
        """, 5, "configs.a.lable: is not a known key"),
    "bad measured": ("""\
        label: x
        measured: yesterday
        """, 2, "measured: 'yesterday': expected YYYY-MM-DD"),
    "impossible date": ("""\
        label: x

        measured: 2026-13-01
        """, 3, "measured: '2026-13-01' is not a real date"),
    "time zone": ("""\
        measured: 2026-07-21T10:15:00+02:00
        """, 1, "measured: give the local time as written, without a time zone"),
    "baseline naming no config": ("""\
        configs:
          anon: {files: [a.csv]}
          ahwb: {files: [b.csv]}
        baseline: anoon
        """, 4, "baseline: 'anoon' is not one of the configs (anon, ahwb)"),
    "per-model baseline naming no config": ("""\
        configs:
          anon: {files: [a.csv]}
        baseline:
          m: anon
          n: ahwb
        """, 5, "baseline.n: 'ahwb' is not one of the configs (anon)"),
    "duplicate key": ("""\
        configs:
          anon: {files: [a.csv]}
          anon: {files: [b.csv]}
        """, 3, "configs.anon: duplicate key (first at line 2)"),
    "YAML syntax": ("""\
        configs:
          anon: {files: [a.csv]
        label: x
        """, 3, "YAML syntax:"),
    "empty glob list": ("""\
        configs:
          anon:
            files: []
        """, 3, "configs.anon.files: needs at least 1 entry"),
    "config without files": ("""\
        configs:
          anon:
            label: A
        """, 2, "configs.anon.files: is required"),
    "empty pattern": ("""\
        configs:
          anon:
            files:
              - a.csv
              - ''
        """, 5, "configs.anon.files.1: an empty pattern matches no file"),
    "two sizes": ("""\
        models:
          m:
            size_bytes: 100
            size_gib: 1.5
        """, 4, "models.m.size_gib: give size_bytes or size_gib, not both"),
    "note on no config": ("""\
        configs:
          anon: {files: [a.csv]}
        notes:
          configs:
            anon: fine
            ahwb: about nothing
        """, 6, "notes.configs.ahwb: 'ahwb' is not one of the configs (anon)"),
    "device without name": ("""\
        device:
          soc: X
        """, 1, "device.name: is required"),
    "unbalanced flags": ("""\
        configs:
          anon:
            files: [a.csv]
            flags: --x 'open
        """, 4, "configs.anon.flags: cannot be split into flags"),
    "config of another model as baseline": ("""\
        models: {m: {}, n: {}}
        configs:
          anon: {files: [a.csv], model: n}
        baseline: {m: anon}
        """, 4, "baseline.m: 'anon' is a config of model 'n' only"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_a_bad_design_is_one_line_with_its_line_number(tmp_path, case):
    body, line, message = BAD[case]
    path = write(tmp_path, body)
    with pytest.raises(ConfigError) as caught:
        load_design(path)
    text = str(caught.value)
    assert "\n" not in text, text
    assert text.startswith(f"{path}:{line}: "), text
    assert message in text, text


def test_not_a_mapping_and_a_missing_file(tmp_path):
    with pytest.raises(ConfigError, match=r"study\.yaml:1: expected a mapping"):
        load_design(write(tmp_path, "- a\n"))
    with pytest.raises(ConfigError, match="no such file"):
        load_design(tmp_path / "none.yaml")


# ---- matching ------------------------------------------------------------------------------

MATCHING = Design.model_validate({
    "models": {"qwen": {"files": ["qwen_*.csv"]}, "gemma": {"files": ["sub/gemma*.csv"]}},
    "configs": {
        "base": {"files": ["*_base.csv", "sub/*_base.csv"]},
        "qwen-ov": {"files": ["*_ov.csv"], "model": "qwen"},
        "gemma-ov": {"files": ["*_ov.csv"], "model": "gemma"},
        "listed": {"files": ["run3.csv", "run1.csv", "run2.csv"]},
    },
    "order": ["run3.csv", "run*.csv", "*"],
})


def test_config_of_takes_the_first_config_and_pattern_that_match():
    assert MATCHING.config_of("qwen_base.csv") == ("base", 0)
    assert MATCHING.config_of("sub/gemma_base.csv") == ("base", 0)   # fnmatch: * crosses /
    assert MATCHING.config_of("run1.csv") == ("listed", 1)
    assert MATCHING.config_of("nothing.txt") is None
    # a bare file name matches the whole relative path only, not a file deeper down
    assert MATCHING.config_of("deeper/run1.csv") is None
    # case matters on every OS
    assert MATCHING.config_of("RUN1.csv") is None


def test_a_model_restriction_splits_a_shared_glob():
    assert MATCHING.config_of("qwen_ov.csv", "qwen") == ("qwen-ov", 0)
    assert MATCHING.config_of("gemma_ov.csv", "gemma") == ("gemma-ov", 0)
    assert MATCHING.config_of("x_ov.csv", None) == ("qwen-ov", 0)   # no model: written order


def test_model_of_order_key_and_listed_order():
    assert MATCHING.model_of("qwen_ov.csv") == "qwen"
    assert MATCHING.model_of("sub/gemma_ov.csv") == "gemma"
    assert MATCHING.model_of("gemma_ov.csv") is None
    assert MATCHING.order_key("run3.csv") == 0
    assert MATCHING.order_key("run1.csv") == 1
    assert MATCHING.order_key("other.csv") == 2
    assert MATCHING.configs["listed"].listed_order()
    assert not MATCHING.configs["base"].listed_order()


def test_a_single_baseline_applies_to_every_model():
    design = Design.model_validate({"configs": {"a": {"files": ["a*"]}}, "baseline": "a"})
    assert design.baseline_for("anything") == "a"
    assert Design().baseline_for("m") is None


def test_model_size_either_way():
    design = Design.model_validate({"models": {"a": {"size_gib": 2}, "b": {"size_bytes": 7}}})
    assert design.models["a"].size() == 2 << 30 and design.models["b"].size() == 7


# ---- the A/B baseline per model --------------------------------------------------------------

def runs_of(spec: list[tuple[str, str, float]]) -> tuple[list[SimpleNamespace], dict[int, dict]]:
    """Run rows (one session, ok) and their stats from (model, config, tok/s) in run order."""
    rows, stats = [], {}
    for i, (model, config, tps) in enumerate(spec, 1):
        rows.append(SimpleNamespace(id=i, session_id=1, model=model, device="d", config=config,
                                    status="ok", repeat_index=0, order_index=i))
        stats[i] = {"mean": tps, "cache_hit_pct": None, "read_mib_per_token": None}
    return rows, stats


def baselines(spec, design=None, override=None) -> dict[str, str]:
    rows, stats = runs_of(spec)
    groups = ab.ab_groups(rows, figures_of(stats), {1: None}, override, designs={1: design})
    return {g.model: g.baseline for g in groups}


SPEC = [("m", "ahwb", 3.0), ("m", "anon", 2.6), ("n", "x", 1.0), ("n", "y", 1.1)]


def test_the_design_names_each_models_baseline():
    design = Design.model_validate({"baseline": {"m": "anon", "n": "y"}})
    assert baselines(SPEC, design) == {"m": "anon", "n": "y"}
    # a model the design says nothing about: the next rules
    design = Design.model_validate({"baseline": {"m": "anon"}})
    assert baselines(SPEC, design) == {"m": "anon", "n": "x"}
    # --baseline wins where that config ran
    assert baselines(SPEC, design, override="ahwb") == {"m": "ahwb", "n": "x"}


def test_a_design_baseline_that_did_not_run_says_so():
    rows, stats = runs_of(SPEC[:2])
    (group,) = ab.ab_groups(rows, figures_of(stats), {1: None},
                            designs={1: Design.model_validate({"baseline": "gone"})})
    assert group.baseline == "gone" and not group.rows and "did not run" in group.note


def test_a_config_named_base_or_baseline_is_the_baseline_of_an_import():
    assert baselines([("m", "qwen_sg", 1.0), ("m", "qwen_base_ov", 1.0)]) == {"m": "qwen_base_ov"}
    assert baselines([("m", "k8", 1.0), ("m", "Baseline-k8", 1.0)]) == {"m": "Baseline-k8"}
    # only a whole word: database, basement, based are no baselines
    assert baselines([("m", "database", 1.0), ("m", "basement", 1.0)]) == {"m": "database"}
    assert ab.named_baseline(["a_based", "x-base", "base"]) == "x-base"


def test_without_a_design_or_a_name_the_first_config_run_is_the_baseline():
    assert baselines(SPEC) == {"m": "ahwb", "n": "x"}
    assert baselines(SPEC, Design()) == {"m": "ahwb", "n": "x"}


# ---- the report and `orch table` show the notes, labels and device facts -------------------

def design_session(db: str) -> int:
    """An import-like session of the example design's short pairs: the runs named and flagged
    as the importer names them, the design stored, constant per-token times."""
    design = load_design(EXAMPLE)
    store = Store.open(db)
    device = store.upsert_device(design.device.name, "import")
    sid = store.create_session(kind="import", name="pinned-dense", label=design.label,
                               import_options={"design": design.stored()},
                               device_facts=design.device.facts())
    runs = [(QWEN, "anon-short", 2.98), (QWEN, "ahwb-short", 2.95),
            (GPTOSS, "ahwb-short-c2000", 0.97), (GPTOSS, "anon-short-c2000", 0.83),
            (QWEN, "anon-crossday", 1.86)]
    for i, (model, config, tps) in enumerate(runs):
        rid = store.create_run(uid=f"r{i}", session_id=sid, device_id=device,
                               cell_key=f"{model}|{config}|0", model=model, config=config,
                               flags=design.configs[config].flags, repeat_index=0,
                               order_index=i, status="ok", engine="bmoe", superseded=False)
        with store.engine.begin() as conn:
            conn.execute(schema.token.insert(), [
                {"run_id": rid, "seq": k, "step": k + 1, "wall_ms": 1000.0 / tps}
                for k in range(8)])
    return sid


def test_report_prints_the_designs_notes_labels_and_device(tmp_path):
    db = str(tmp_path / "orch.db")
    design_session(db)
    text = orch("report", "--db", db, "--no-plots")
    results = text.index("## Results")
    # the session note under the description, before the results
    assert text.index("Pinned dense weights") < text.index("Verdict of the study") < results
    # the legend before the first group's tables: label (the rows' name), key, flags, files
    legend = text.index("**Configs**")
    assert results < legend < text.index("### ")
    assert ("| anon, 20 Jul 21:35 (cross-day, not usable) | `anon-crossday` | "
            "`--dense-weights anon` | `bmoe-20260720-212009.csv` |") in text
    # each model's note above its tables, each config's note under the tables showing it
    # headed by the models' labels (the design's models.NAME.label)
    qwen = text.index("### Qwen3.6-35B-A3B Q4_K_M on OnePlus 15R")
    gptoss = text.index("### gpt-oss-120b Q4_K_M on OnePlus 15R")
    assert qwen < text.index("\n\nIn-app runs, k=8") < gptoss      # the label is the heading's
    assert "**Qwen3.6-35B-A3B Q4_K_M**" not in text[qwen:text.index("**Throughput**", qwen)]
    assert text.index("findings.md describes every run") > gptoss
    # the design's baselines: anon-long did not run here, so Qwen's A/B says so
    crossday = text.index("**anon, 20 Jul 21:35 (cross-day, not usable)**: Not usable")
    assert qwen < text.index("The baseline anon-long did not run in this group") < crossday < gptoss
    assert re.search(r"\| anon, short pair, cache 2000 MiB \| [^|]+ \| baseline \|", text)
    # the device line carries the design's facts, storage included
    assert ("OnePlus 15R (Snapdragon 8 Elite, 8 cores, 11.4 GiB RAM, UFS 4.0, Android 16; "
            "given by the design file)" in text)
    html = tmp_path / "r.html"
    orch("report", "--db", db, "--no-plots", "--format", "html", "-o", str(html))
    page = html.read_text(encoding="utf-8")
    assert "Not usable as a comparison" in page and "<td>anon-crossday</td>" in page


def test_orch_table_prints_the_notes_under_each_group_markdown_only(tmp_path):
    db = str(tmp_path / "orch.db")
    design_session(db)
    text = orch("table", "--db", db)
    assert text.index("Verdict of the study") < text.index("**Configs**") < text.index("### ")
    qwen, gptoss = text.index(f"### {QWEN}"), text.index(f"### {GPTOSS}")
    crossday = text.index("**anon, 20 Jul 21:35 (cross-day, not usable)**: Not usable")
    assert qwen < text.index("In-app runs") < crossday < gptoss
    assert text.index("findings.md describes every run") > gptoss
    assert ("| ahwb, short pair, cache 2000 MiB (ran first) | `ahwb-short-c2000` |" in text)
    for fmt in ("csv", "json"):
        assert "Not usable" not in orch("table", "--db", db, "--format", fmt)


def test_a_matrix_notes_are_printed_like_a_designs(tmp_path):
    """A live session's matrix `notes:` (the same model as the design's) beside its tables."""
    db = str(tmp_path / "orch.db")
    store = Store.open(db)
    device = store.upsert_device("box", "local")
    text = ("name: m\nengine: bmoe\nmodels: {q: /m/q.gguf}\nconfigs: {a: '', b: ''}\n"
            "notes:\n  session: Measured on a quiet box.\n  configs: {b: 'b ran second.'}\n")
    sid = store.create_session(kind="run", name="m", matrix_name="m", matrix_text=text)
    for i, config in enumerate(("a", "b")):
        rid = store.create_run(uid=f"m{i}", session_id=sid, device_id=device,
                               cell_key=f"q|{config}|0", model="q", config=config, flags="",
                               repeat_index=0, order_index=i, status="ok", engine="bmoe",
                               superseded=False)
        with store.engine.begin() as conn:
            conn.execute(schema.token.insert(), [
                {"run_id": rid, "seq": k, "step": k + 1, "wall_ms": 100.0 + i} for k in range(8)])
    report = orch("report", "--db", db, "--no-plots")
    assert report.index("Measured on a quiet box.") < report.index("## Results")
    assert report.index("### q") < report.index("**b**: b ran second.")
    assert "Measured on a quiet box." in orch("table", "--db", db)
