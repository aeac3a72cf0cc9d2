"""A file of a study folder that Python cannot name or date is one line naming the file and
why, and the rest of the folder imports (docs/import.md; docs/reliability.md, "Text from
devices in reports and terminals"): a name that is not UTF-8 is skipped with its bytes shown
as `\\xff`, a file time before year 1 or past 9999 imports the run without a time."""
from __future__ import annotations

import datetime as dt
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from orchestrator.cli import main
from orchestrator.db.runs import Runs
from orchestrator.db.store import Store
from orchestrator.ingest.when import file_time

REPLAY = Path(__file__).resolve().parent / "fixtures" / "bigmoe" / "2026-07-20-cache-replay"


@pytest.fixture
def folder():
    """A copy of the cache-replay study (its runs are dated by their file times) on tmpfs,
    which keeps any 64-bit file time (ext4 clamps them to 1901-2446)."""
    base = Path(tempfile.mkdtemp(dir="/dev/shm" if os.path.isdir("/dev/shm") else None))
    study = base / "lfu-study"
    shutil.copytree(REPLAY, study)
    yield study
    shutil.rmtree(base)


def _import(folder: Path, db: Path):
    return CliRunner().invoke(main, ["import", str(folder), "--db", str(db)])


def test_a_name_that_is_not_utf8_is_one_line_and_the_rest_imports(folder, tmp_path) -> None:
    shutil.copy(folder / "pf1_k2.csv", os.fsencode(folder) + b"/pf1_\xffk2.csv")
    (folder / "sub").mkdir()
    os.mkdir(os.fsencode(folder / "sub") + b"/d\xfe")
    result = _import(folder, tmp_path / "orch.db")
    assert result.exit_code == 0, result.output
    lines = [line.strip() for line in result.stderr.splitlines() if "UTF-8" in line]
    assert lines == [
        "pf1_\\xffk2.csv: not imported: its name is not UTF-8 (the store keeps names as "
        "text): rename it to import it",
        "sub/d\\xfe: not imported: its name is not UTF-8 (the store keeps names as text): "
        "rename it to import it"], result.stderr
    assert "Error" not in result.output
    store = Store.open(str(tmp_path / "orch.db"))
    assert len(Runs(store).current()) == 8


def test_a_file_time_out_of_range_imports_the_run_without_a_time(folder, tmp_path) -> None:
    far, before_year_1 = 10 ** 15, -10 ** 12       # year 31690708, year -29719
    os.utime(folder / "pf1_k2.csv", (far, far))
    os.utime(folder / "lanes4_k2.csv", (before_year_1, before_year_1))
    if os.stat(folder / "pf1_k2.csv").st_mtime != far:
        pytest.fail("this file system clamps file times: the test needs tmpfs (/dev/shm)")
    assert file_time(folder / "pf1_k2.csv") is None
    result = _import(folder, tmp_path / "orch.db")
    assert result.exit_code == 0, result.output
    said = sorted(line.strip() for line in result.stderr.splitlines() if "out of range" in line)
    assert said == [
        "lanes4_k2.csv: the file's time (mtime) is out of range: the run is imported without one",
        "pf1_k2.csv: the file's time (mtime) is out of range: the run is imported without one"]
    assert "Error" not in result.output
    store = Store.open(str(tmp_path / "orch.db"))
    runs = {r.source_file: r for r in Runs(store).current()}
    assert len(runs) == 8
    for name in ("pf1_k2.csv", "lanes4_k2.csv"):
        assert runs[name].started_at is None and runs[name].time_source == "unknown"
    assert isinstance(runs["lanes8_k2.csv"].started_at, dt.datetime)
