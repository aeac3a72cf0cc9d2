"""`orch import` into a store whose disk fills (docs/reliability.md, "A store that fills
during an import"): one line, `the store's disk is full: ...; nothing of FOLDER was kept`,
exit 1, and no run of the attempt left, `running` or otherwise. SQLite's page limit stands in
for a full disk where the point of the failure must be exact; a real 2 MiB tmpfs (root, which
CI has) for the rest."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from ci import unavailable
from cli_helpers import orch
from sqlalchemy import event, select
from sqlalchemy.exc import OperationalError

from orchestrator.db import schema
from orchestrator.db.store import Store
from orchestrator.ingest import importer

pytestmark = pytest.mark.timeout(180)

HEADER = "step,steps,wall_ms,io_ms,compute_ms,read_bytes,cache_hit_pct,stall_ms,mgmt_ms"


def _study(folder: Path, files: int, rows: int) -> Path:
    folder.mkdir()
    for k in range(files):
        lines = [f"# bmoe_metrics v1\n# model=m{k}.gguf moe_stream=1\n{HEADER}\n"]
        lines += [f"{i + 1},{rows},250.5,120.5,150.25,{235000000 + i},76.25,40.5,20.75\n"
                  for i in range(rows)]
        lines.append(f"# summary tokens={rows} s/tok=0.250 tok/s=4.0 prefill_tps=6.63\n")
        (folder / f"run{k}_k6.csv").write_text("".join(lines))
    return folder


def _left(db: Path) -> list[tuple[int, str]]:
    store = Store.open(str(db), create=False)
    return [(r.id, r.status) for r in store.fetch(select(schema.run))]


def _one_full_line(output: str, folder: Path) -> None:
    lines = [line for line in output.splitlines() if line.strip()]
    assert lines == [f"error: the store's disk is full: database or disk is full; nothing of "
                     f"{folder} was kept"], output


@pytest.mark.slow
def test_a_store_that_fills_at_the_second_run_keeps_nothing(tmp_path, monkeypatch):
    """Two runs; the store stops growing once the first is in: the first is taken back."""
    study = _study(tmp_path / "study", files=2, rows=1000)
    real = importer.write_run
    calls = []

    def second_fills(store, *args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            def limit(dbapi_connection, _record):
                pages = dbapi_connection.execute("PRAGMA page_count").fetchone()[0]
                dbapi_connection.execute(f"PRAGMA max_page_count = {pages}")
            event.listen(store.engine, "connect", limit)
            store.engine.dispose()
        return real(store, *args, **kwargs)

    monkeypatch.setattr(importer, "write_run", second_fills)
    code, output = orch("import", str(study), "--db", str(tmp_path / "orch.db"), "-d", "dev")
    assert code == 1
    _one_full_line(output, study)
    assert len(calls) == 2 and _left(tmp_path / "orch.db") == []


def test_a_store_that_fills_at_the_bookkeeping_keeps_nothing(tmp_path, monkeypatch):
    """Every run is in; the session's bookkeeping after them finds the disk full."""
    study = _study(tmp_path / "study", files=2, rows=10)

    def full(*_args, **_kwargs):
        raise OperationalError("INSERT INTO imported_file ...", {},
                               Exception("database or disk is full"))

    monkeypatch.setattr(Store, "set_imported_file", full)
    code, output = orch("import", str(study), "--db", str(tmp_path / "orch.db"), "-d", "dev")
    assert code == 1
    _one_full_line(output, study)
    assert _left(tmp_path / "orch.db") == []
    store = Store.open(str(tmp_path / "orch.db"), create=False)
    assert store.fetch(select(schema.session)) == []


def test_another_store_error_is_still_a_skipped_file(tmp_path, monkeypatch):
    """Not every store error is a full disk: one that is not keeps its old meaning (the file
    skipped with its reason, the other runs imported)."""
    study = _study(tmp_path / "study", files=2, rows=10)
    real = importer.write_run
    calls = []

    def first_fails(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise OperationalError("INSERT ...", {}, Exception("something else"))
        return real(*args, **kwargs)

    monkeypatch.setattr(importer, "write_run", first_fails)
    code, output = orch("import", str(study), "--db", str(tmp_path / "orch.db"), "-d", "dev")
    assert code == 0 and "something else" in output, output
    assert [status for _, status in _left(tmp_path / "orch.db")] == ["ok"]


@pytest.mark.slow
def test_a_real_disk_filling_during_an_import(tmp_path, monkeypatch):
    """The store on a 2 MiB tmpfs, a 60,000-token run: one line, nothing kept, nothing
    `running`, and the store still opens."""
    if os.geteuid() != 0:
        unavailable("mounting a small tmpfs needs root")
    study = _study(tmp_path / "study", files=1, rows=60000)
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(disk)], check=True,
                   timeout=30)
    try:
        code, output = orch("import", str(study), "--db", str(disk / "orch.db"), "-d", "dev")
        assert code == 1
        _one_full_line(output, study)
        assert _left(disk / "orch.db") == []
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=True, timeout=30)
