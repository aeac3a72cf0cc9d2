"""`orch import` is atomic per run and exclusive per folder: a run whose write fails (an
exception, Ctrl-C, SIGTERM) is deleted, never left `running`; two imports of one folder at once
make one session with every run once (the second refuses, exit 2, naming the holder's pid)."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from sqlalchemy import func, select
from waiting import wait_for

from orchestrator.db import schema
from orchestrator.db.runs import Runs
from orchestrator.db.session_lock import ImportBusy, import_lock
from orchestrator.db.store import Store
from orchestrator.ingest import write
from orchestrator.ingest.importer import import_dir

FIX = Path(__file__).resolve().parent / "fixtures" / "bigmoe" / "2026-07-17"
ORCH = str(Path(sys.executable).with_name("orch"))   # the venv running the tests


@pytest.fixture
def folder(tmp_path):
    """A copy of a study folder (per-token CSVs with their sidecars and driver logs)."""
    dest = tmp_path / "study"
    shutil.copytree(FIX, dest)
    return dest


def _state(db: str) -> tuple[int, list[str], int]:
    """(sessions, each run's import key sorted, runs left `running`)."""
    store = Store.open(db)
    sessions = store.fetch(select(func.count()).select_from(schema.session))[0][0]
    keys = sorted(r.record.extra.get("import_key") for r in Runs(store).current(include_superseded=True))
    running = store.fetch(select(func.count()).select_from(schema.run)
                          .where(schema.run.c.status == "running"))[0][0]
    return sessions, keys, running


def _all_keys(tmp_path: Path) -> list[str]:
    """The import keys a clean import of the study folder stores, each once."""
    db = str(tmp_path / "reference.db")
    import_dir(Store.open(db), FIX)
    keys = _state(db)[1]
    assert keys and len(keys) == len(set(keys))
    return keys


def _failing_recorder(monkeypatch, exc: BaseException, on_run: int = 2) -> None:
    """RunRecorder whose flush raises `exc` in the `on_run`-th run written."""
    seen = {"runs": 0}

    class Failing(write.RunRecorder):
        def flush(self) -> None:
            seen["runs"] += 1
            if seen["runs"] == on_run:
                raise exc
            super().flush()
    monkeypatch.setattr(write, "RunRecorder", Failing)


def test_a_failed_write_deletes_its_run_and_reports_the_file(folder, tmp_path, monkeypatch):
    db = str(tmp_path / "orch.db")
    _failing_recorder(monkeypatch, RuntimeError("disk on fire"))
    report = import_dir(Store.open(db), folder)
    assert report.ok and len(report.skipped) >= 1
    failed = [(f, why) for f, why in report.skipped if "disk on fire" in why]
    assert len(failed) == 1 and failed[0][1] == "not written: RuntimeError: disk on fire"
    sessions, keys, running = _state(db)
    assert sessions == 1 and running == 0 and keys == sorted(report.imported)
    monkeypatch.undo()               # the next import writes the file that failed, once
    again = import_dir(Store.open(db), folder)
    assert len(again.imported) == 1 and not [w for _, w in again.skipped if "not written" in w]
    sessions, keys, running = _state(db)
    assert sessions == 1 and running == 0 and keys == _all_keys(tmp_path)


def test_a_failed_only_write_leaves_no_session(tmp_path, monkeypatch):
    study = tmp_path / "one"
    study.mkdir()
    shutil.copy(FIX / "gemma_k6.csv", study)
    db = str(tmp_path / "orch.db")
    _failing_recorder(monkeypatch, OSError("gone"), on_run=1)
    report = import_dir(Store.open(db), study)
    assert not report.ok and report.session_id is None
    assert _state(db) == (0, [], 0)


def test_ctrl_c_while_writing_rolls_the_run_being_written_back(folder, tmp_path, monkeypatch):
    db = str(tmp_path / "orch.db")
    _failing_recorder(monkeypatch, KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        import_dir(Store.open(db), folder)
    _, keys, running = _state(db)
    assert running == 0 and len(keys) == 1          # the first run is in, the second gone


def test_a_changed_file_that_fails_keeps_its_old_run(folder, tmp_path, monkeypatch):
    db = str(tmp_path / "orch.db")
    import_dir(Store.open(db), folder)
    csv = folder / "gemma_k6.csv"
    csv.write_text(csv.read_text().replace("# summary", "# note changed\n# summary", 1))
    _failing_recorder(monkeypatch, RuntimeError("boom"), on_run=1)
    report = import_dir(Store.open(db), folder)
    assert [f for f, why in report.skipped if "boom" in why] == ["gemma_k6.csv"]
    sessions, keys, running = _state(db)
    assert sessions == 1 and running == 0 and keys == _all_keys(tmp_path)


def test_a_second_import_while_one_runs_is_refused(folder, tmp_path, monkeypatch):
    db = str(tmp_path / "orch.db")
    entered, release = threading.Event(), threading.Event()
    real = write.RunRecorder

    class Slow(real):
        def flush(self) -> None:
            entered.set()
            assert release.wait(30), "never released"
            super().flush()
    monkeypatch.setattr(write, "RunRecorder", Slow)
    result: dict[str, object] = {}
    first = threading.Thread(target=lambda: result.update(r=import_dir(Store.open(db), folder)))
    first.start()
    try:
        assert entered.wait(30), "the first import never wrote a run"
        with pytest.raises(ImportBusy, match=rf"another orch import of {folder} is running "
                                             rf"\(pid {os.getpid()}\)"):
            import_dir(Store.open(db), folder)
    finally:
        release.set()
        first.join(30)
    assert not first.is_alive()
    sessions, keys, running = _state(db)
    assert sessions == 1 and running == 0 and keys == _all_keys(tmp_path)


def test_the_cli_refuses_while_another_process_holds_the_folder(folder, tmp_path):
    db = str(tmp_path / "orch.db")
    store = Store.open(db)
    with import_lock(store, str(folder.resolve())):     # this process: "another orch import"
        proc = subprocess.run([ORCH, "import", str(folder), "--db", db], capture_output=True,
                              text=True, timeout=120, check=False)
    assert proc.returncode == 4, proc.stderr   # Busy (orchestrator/errors.py)
    assert f"another orch import of {folder.resolve()} is running (pid {os.getpid()})" \
        in proc.stderr
    assert _state(db) == (0, [], 0)


def test_two_concurrent_cli_imports_make_one_session(folder, tmp_path):
    db = str(tmp_path / "orch.db")
    Store.open(db)                                      # the schema exists before both start
    procs = [subprocess.Popen([ORCH, "import", str(folder), "--db", db],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=180) for p in procs]
    codes = sorted(p.returncode for p in procs)
    assert codes in ([0, 0], [0, 4]), outs     # 4: Busy (orchestrator/errors.py)
    if codes == [0, 4]:
        assert any("another orch import of" in err for _, err in outs)
    sessions, keys, running = _state(db)
    assert sessions == 1 and running == 0 and keys == _all_keys(tmp_path)


SLOW_IMPORT = """
import sys
from pathlib import Path
from orchestrator.cli import main
from orchestrator.ingest import write
from orchestrator.run.recorder import RunRecorder

MARKER = Path(sys.argv[1])

class Slow(RunRecorder):
    def flush(self):
        MARKER.write_text("writing")
        import threading
        threading.Event().wait(60)      # until SIGTERM arrives
        super().flush()

write.RunRecorder = Slow
sys.argv = ["orch", "import", sys.argv[2], "--db", sys.argv[3]]
main()
"""


def test_sigterm_while_writing_keeps_nothing_of_the_run_being_written(folder, tmp_path):
    db = str(tmp_path / "orch.db")
    marker = tmp_path / "writing"
    proc = subprocess.Popen([sys.executable, "-c", SLOW_IMPORT, str(marker), str(folder), db],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=str(tmp_path))
    try:
        wait_for(lambda: marker.exists() or proc.poll() is not None, 60,
                 what="the import writing its first run")
        assert proc.poll() is None, proc.communicate()
        # the run being written is one open transaction: no other reader sees it
        assert _state(db)[2] == 0
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 143, err
    assert "stopped by SIGTERM" in err
    assert _state(db)[2] == 0
