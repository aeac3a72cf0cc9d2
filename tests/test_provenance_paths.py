"""A shared document leaks no local layout: by default the report's provenance and
`orch export` show paths relative to the study folder (or by file name) and no user@host;
`--provenance full` shows them as stored (report/format/paths.py, docs/report.md "Provenance")."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from cli_helpers import orch, orch_ok

from orchestrator.db.runs import Sessions
from orchestrator.db.store import Store
from orchestrator.report.format.paths import Paths, base_of

FIX = Path(__file__).parent / "fixtures" / "bigmoe"


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """(db, folder): two runs of 2026-07-17, one of them in a subfolder, imported."""
    root = tmp_path_factory.mktemp("paths")
    folder = root / "home" / "someone" / "2026-07-17"
    (folder / "repeat").mkdir(parents=True)
    for f in (FIX / "2026-07-17").glob("qwen_k6.*"):
        shutil.copy(f, folder / f.name)
    for f in (FIX / "2026-07-17").glob("qwen_kdef.*"):
        shutil.copy(f, folder / "repeat" / f.name)
    db = str(root / "orch.db")
    orch_ok("import", str(folder), "--db", db)
    return db, folder


def _host(db: str) -> str:
    session = Sessions(Store.open(db)).get(1)
    return session.values["controller_host"]


def test_report_shows_paths_relative_and_no_host(study: tuple[str, Path]) -> None:
    db, folder = study
    text = orch_ok("report", "--db", db, "--no-plots")
    provenance = text[text.index("## Provenance"):]
    assert str(folder) not in text and str(folder.parent) not in text
    assert _host(db) not in provenance
    assert "| controller |" not in provenance
    # the per-token CSV by its path in the study folder, the sidecars beside it
    assert "`repeat/qwen_kdef.csv`" in provenance
    assert "`repeat/qwen_kdef.metrics`" in provenance
    assert "`qwen_k6.csv`" in provenance


def test_report_full_provenance_shows_what_is_stored(study: tuple[str, Path]) -> None:
    db, folder = study
    text = orch_ok("report", "--db", db, "--no-plots", "--provenance", "full")
    provenance = text[text.index("## Provenance"):]
    assert f"`{folder / 'repeat' / 'qwen_kdef.csv'}`" in provenance
    assert f"`{folder}`" in provenance                 # the folder the session was read from
    assert f"| {_host(db)} |" in provenance            # user@host of the controller


def _runs(db: str, out: Path, *options: str) -> list[dict]:
    orch_ok("export", "--db", db, "--format", "json", "-o", str(out), *options)
    return json.loads((out / "runs.json").read_text(encoding="utf-8"))


def test_export_shows_paths_relative(study: tuple[str, Path], tmp_path: Path) -> None:
    db, folder = study
    runs = _runs(db, tmp_path / "share")
    assert {r["remote_dir"] for r in runs} == {"qwen_k6.csv", "repeat/qwen_kdef.csv"}
    assert {r["source_file"] for r in runs} == {"qwen_k6.csv", "repeat/qwen_kdef.csv"}
    text = (tmp_path / "share" / "runs.json").read_text(encoding="utf-8")
    assert str(folder) not in text
    full = _runs(db, tmp_path / "full", "--provenance", "full")
    assert {r["remote_dir"] for r in full} == {str(folder / "qwen_k6.csv"),
                                               str(folder / "repeat" / "qwen_kdef.csv")}
    # csv says the same
    orch_ok("export", "--db", db, "-o", str(tmp_path / "csv"))
    frame = pd.read_csv(tmp_path / "csv" / "runs.csv")
    assert not frame.remote_dir.str.startswith("/").any()


def test_provenance_option_is_checked(study: tuple[str, Path]) -> None:
    db, _ = study
    code, out = orch("report", "--db", db, "--no-plots", "--provenance", "everything")
    assert code == 2 and "share" in out and "full" in out


def test_live_run_paths() -> None:
    """A live run's paths: against the matrix's folder, others by file name, in flag strings
    and argv too."""
    share, full = Paths(), Paths(full=True)
    base = "/home/someone/bench"
    assert share.path("/home/someone/bench/prompts/long.txt", base) == "prompts/long.txt"
    assert share.path("/data/local/tmp/orch/bin/bmoe", base) == "bmoe"
    assert share.path("relative/already.gguf", base) == "relative/already.gguf"
    flags = "-m /data/local/tmp/models/q.gguf --prompt-file=/home/someone/bench/p.txt -t 4"
    assert share.text(flags, base) == "-m q.gguf --prompt-file=p.txt -t 4"
    assert full.text(flags, base) == flags
    assert share.argv(["/data/x/bmoe", "-m", "/m/q.gguf", 4], base) == ["bmoe", "-m", "q.gguf", 4]
    assert share.host("root@vm") is None and full.host("root@vm") == "root@vm"


def test_base_of_a_session() -> None:
    class Row:
        def __init__(self, **values: str) -> None:
            self.values = values

    assert base_of(Row(source_dir="/s/study", matrix_path="")) == "/s/study"   # type: ignore[arg-type]
    assert base_of(Row(matrix_path="/h/bench/phone.yaml")) == "/h/bench"       # type: ignore[arg-type]
    assert base_of(None) is None
