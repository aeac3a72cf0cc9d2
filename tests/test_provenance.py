"""Provenance: engine build, model sha256 for device-path models (hashed
once per device), Python and orch versions, imported runs keeping their files' times."""
from __future__ import annotations

import datetime as dt
import hashlib
import os
import platform
import shutil
import textwrap
from pathlib import Path
from types import SimpleNamespace

from cli_helpers import orch
from sqlalchemy import select

from orchestrator.db import schema
from orchestrator.db.runs import Runs, Sessions
from orchestrator.db.store import Store
from orchestrator.record import load_record
from orchestrator.report.document.provenance import engines_table
from orchestrator.ingest.importer import import_dir

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "bigmoe"


def _bmoe_matrix(path: Path, model: str) -> str:
    path.write_text(textwrap.dedent(f"""\
        name: prov
        engine: bmoe
        binary: {{local: fake_bmoe.sh}}
        models: {{m: {model}}}
        prompt: p
        tokens: 3
        configs: {{a: --delay 0}}
        """))
    return str(path)


def test_device_path_model_is_hashed_once_and_session_has_versions(workspace):
    model = workspace / "model.gguf"
    model.write_bytes(os.urandom(300_000))
    old = model.stat().st_mtime - 3600   # a file still being written (mtime < 2 s ago) is not cached
    os.utime(model, (old, old))
    digest = hashlib.sha256(model.read_bytes()).hexdigest()
    m = _bmoe_matrix(workspace / "m.yaml", str(model))
    code, out = orch("run", m)
    assert code == 0, out
    store = Store.open("orch.db")
    (run,) = Runs(store).current()
    assert run.model_sha256 == digest and run.model_size == 300_000
    cache = Path(f"{model}.orch-sha256")
    assert cache.read_text().split()[-1] == digest      # kept next to the file on the device
    session = store.fetch(select(schema.session))[0]
    assert session.python_version == f"{platform.python_implementation()} {platform.python_version()}"
    assert session.orch_version and session.git_rev
    code, report = orch("report", "--no-plots")
    assert code == 0, report
    assert digest in report and session.python_version in report
    # a second session reads the cached hash instead of hashing the file again
    before = cache.stat().st_mtime_ns
    code, out = orch("run", m)
    assert code == 0, out
    assert cache.stat().st_mtime_ns == before
    assert {r.model_sha256 for r in Runs(Store.open("orch.db")).current()} == {digest}


def test_unhashed_model_is_named_with_the_reason(workspace):
    code, out = orch("run", _bmoe_matrix(workspace / "m.yaml", "/nonexistent/model.gguf"))
    assert code == 0, out
    assert Runs(Store.open("orch.db")).current()[0].model_sha256 is None
    code, report = orch("report", "--no-plots")
    assert code == 0, report
    assert "no sha256 — the device could not hash it" in report


def test_engine_build_and_version_are_shown():
    row = SimpleNamespace(id=1, engine="llama-bench", binary_path="/d/llama-bench",
                          binary_sha256="ab" * 32, engine_build="3cb7ffb1a (10453)",
                          summary={"schema_version": 1, "settings": {"version": "b10453"}})
    t = engines_table(SimpleNamespace(runs=[SimpleNamespace(id=1, row=row)]))
    assert t.column("version") == ["`b10453; 3cb7ffb1a (10453)`"]
    assert t.column("sha256") == [f"`{'ab' * 32}`"]


def test_imported_runs_keep_their_files_times(tmp_path):
    folder = tmp_path / "2026-07-17"
    shutil.copytree(FIXTURES / "2026-07-17", folder)
    written = dt.datetime(2026, 7, 17, 14, 30, 5, tzinfo=dt.timezone.utc)
    os.utime(folder / "gpt_k2.csv", (written.timestamp(), written.timestamp()))
    store = Store.open(str(tmp_path / "orch.db"))
    report = import_dir(store, folder)
    runs = {r.config: r for r in Runs(store).current(report.session_id)}
    run = runs["gpt_k2"]
    ended = run.ended_at.replace(tzinfo=dt.timezone.utc)
    assert ended == written
    record = load_record(run.summary)
    took = record.ttft_s + record.tokens / record.decode_tps
    assert abs((ended - run.started_at.replace(tzinfo=dt.timezone.utc)).total_seconds() - took) < 1e-3
    session = Sessions(store).get(report.session_id)
    assert session.ended_at.replace(tzinfo=dt.timezone.utc) > written   # the import itself
    assert session.python_version and session.orch_version
    from orchestrator.cli.documents import report_text as render_report

    text = render_report(store, Runs(store).current(report.session_id), plots=False)
    # the copied files take their folder's day; the one written that day keeps its file time
    assert "measured 2026-07-17 (the folder name's date" in text
    assert "1 run(s) with file times only" in text and " (file time)" in text
    assert {r.time_source for r in runs.values()} == {"folder name", "mtime"}


def test_provenance_shows_the_facts_of_when_the_session_ran(tmp_path):
    """A session keeps a snapshot of its device's facts; a later probe (a new kernel) changes
    the device row, not what an old session's report says about the device it ran on."""
    from orchestrator.db.runs import Runs, Sessions
    from orchestrator.results.report_data import device_views
    from orchestrator.report.document.provenance import devices_table

    store = Store.open(str(tmp_path / "orch.db"))
    dev = store.upsert_device("phone", "adb", {"kernel": "5.4.0", "cores": "8"})
    then = dt.datetime(2026, 7, 1, tzinfo=dt.timezone.utc)
    old = store.create_session(kind="run", name="old", matrix_name="m", started_at=then,
                               device_facts={"kernel": "5.4.0", "cores": "8"})
    store.upsert_device("phone", "adb", {"kernel": "6.1.0", "cores": "8"})   # probed since
    bare = store.create_session(kind="run", name="bare", matrix_name="m")    # an older orch's
    for sid in (old, bare):
        store.create_run(uid=f"u{sid}", session_id=sid, device_id=dev, cell_key="m|c|0",
                         model="m", config="c", status="ok", superseded=False)
    for sid, kernel, snapshot in ((old, "5.4.0", True), (bare, "6.1.0", False)):
        rows = Runs(store).current(session=sid)
        view = device_views(store, rows, Sessions(store).by_ids([sid]))["phone"]
        assert (view.facts["kernel"], view.snapshot) == (kernel, snapshot)
    data = SimpleNamespace(devices=device_views(store, Runs(store).current(session=bare),
                                                Sessions(store).by_ids([bare])))
    assert any("the newest probe, not a snapshot" in n for n in devices_table(data).notes)
