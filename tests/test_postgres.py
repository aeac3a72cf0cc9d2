"""The store on PostgreSQL (a lab shares one database): a real server started by the test."""
from __future__ import annotations

import textwrap

import pytest
from cli_helpers import orch
from conftest import FIXTURES
from pg_fixture import fresh_pg_database

from orchestrator.db.runs import Runs
from orchestrator.db.store import Store


@pytest.fixture(scope="module")
def pg_url(pg_url):
    """This module's own empty database on the session's server (tests/pg_fixture.py): the
    tables below compare whole stores, so rows of other modules' tests must not be in it."""
    return fresh_pg_database(pg_url, "test_postgres")


def test_import_and_table_on_postgres_match_sqlite(pg_url, tmp_path):
    folder = str(FIXTURES / "bigmoe" / "2026-07-13")
    sqlite = str(tmp_path / "orch.db")
    for db in (pg_url, sqlite):
        code, out = orch("import", folder, "--db", db)
        assert code == 0, out
    code, on_pg = orch("table", "--db", pg_url)
    assert code == 0, on_pg
    code, on_sqlite = orch("table", "--db", sqlite)
    assert on_pg == on_sqlite and "**5.02**" in on_pg


@pytest.mark.slow
def test_run_and_report_on_postgres(pg_url, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "devices.yaml").write_text(f"devices:\n  local:\n    kind: local\n"
                                           f"    workdir: {tmp_path}/dev\n")
    (tmp_path / "m.yaml").write_text(textwrap.dedent("""\
        name: pg-probe
        engine: moe-probe
        prompt: hello
        tokens: 10
        sample_interval: 0.2s
        repeat: 2
        baseline: a
        configs:
          a: --io pread --layers 4 --experts 8 --expert-mb 0.0625 --top-k 2
          b: --io mmap --layers 4 --experts 8 --expert-mb 0.0625 --top-k 2
        """))
    code, out = orch("run", "m.yaml", "--db", pg_url)
    assert code == 0, out
    store = Store.open(pg_url)
    runs = [r for r in Runs(store).current() if r.matrix_name == "pg-probe"]
    assert len(runs) == 4 and all(len(store.frame("token", [r.id])) == 10 for r in runs)
    code, out = orch("report", "--matrix", "pg-probe", "--db", pg_url, "-o", "r.md", "--no-plots")
    assert code == 0, out
    assert "A/B against the baseline" in (tmp_path / "r.md").read_text()


def test_non_utf8_prompt_runs_and_is_stored_on_postgres(pg_url, tmp_path, monkeypatch):
    """A prompt file's bytes reach the engine as they are (README), and the run's argv, whose
    non-UTF-8 bytes are lone surrogates in Python, is stored on PostgreSQL as on SQLite
    (the JSON column escapes them) without failing the run."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "devices.yaml").write_text(f"devices:\n  local:\n    kind: local\n"
                                           f"    workdir: {tmp_path}/dev\n")
    out = tmp_path / "prompt.out"
    prompt = b"caf\xe9 \xff\xfe\r\n"
    (tmp_path / "p.txt").write_bytes(prompt)
    (tmp_path / "m.yaml").write_text(textwrap.dedent(f"""\
        name: pg-bytes
        engine: generic
        binary: /bin/sh
        engine_options:
          argv: ["{{binary}}", "-c", "printf %s \\"$1\\" > {out}", "sh", "{{prompt}}"]
        prompt_file: p.txt
        cooldown: 0
        sample_interval: 0.1s
        configs: {{a: ""}}
        """))
    code, output = orch("run", "m.yaml", "--db", pg_url)
    assert code == 0, output
    assert out.read_bytes() == prompt
    code, output = orch("show", "--db", pg_url, str(Runs(Store.open(pg_url)).current()[-1].id))
    assert code == 0 and "Traceback" not in output, output
