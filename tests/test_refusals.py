"""One-line refusals of hostile inputs and outputs: symlink loops and symlinks out of an imported
folder, output paths that cannot be written, templates that are not files, deeply nested YAML.
Each refusal names its reason, exits with the documented code and writes nothing."""
from __future__ import annotations

import shutil
from pathlib import Path

from cli_helpers import orch

FIX = Path(__file__).resolve().parent / "fixtures" / "bigmoe"
JUL13_CSV = FIX / "2026-07-13" / "qwen_base_ov.csv"


# ---- orch import: symlinks ------------------------------------------------------------------

def test_symlink_loop_and_symlink_outside_are_skipped_the_rest_imports(tmp_path):
    folder = tmp_path / "day"
    folder.mkdir()
    shutil.copy(JUL13_CSV, folder)
    (folder / "a.csv").symlink_to("b.csv")
    (folder / "b.csv").symlink_to("a.csv")
    outside = tmp_path / "elsewhere.csv"
    shutil.copy(JUL13_CSV, outside)
    (folder / "out.csv").symlink_to(outside)
    code, out = orch("import", str(folder), "--db", str(tmp_path / "orch.db"))
    assert code == 0, out
    assert "a.csv: not imported: symlink loop" in out
    assert "b.csv: not imported: symlink loop" in out
    assert (f"out.csv: not imported: symlink to a file outside the folder "
            f"({outside.resolve()})") in out
    assert "1 run(s) imported" in out


# ---- output paths: refused before anything is rendered or written ---------------------------

def _store(tmp_path) -> str:
    db = str(tmp_path / "orch.db")
    code, out = orch("import", str(FIX / "2026-07-13"), "--db", db)
    assert code == 0, out
    return db


def test_report_to_a_device_refuses_and_leaves_no_figure_folder(tmp_path):
    db = _store(tmp_path)
    doc = tmp_path / "out" / "report.md"
    doc.parent.mkdir()
    doc.symlink_to("/dev/full")           # a path that names a device, not a regular file
    code, out = orch("report", "--db", db, "-o", str(doc))
    assert code == 2, out
    assert out.strip() == f"error: cannot write {doc}: not a regular file"
    assert sorted(p.name for p in doc.parent.iterdir()) == ["report.md"]   # no report_files/


def test_export_to_a_file_is_not_a_directory(tmp_path):
    db = _store(tmp_path)
    code, out = orch("export", "--db", db, "-o", "/dev/null")
    assert code == 2, out
    assert out.strip() == "error: -o /dev/null: not a directory"


def test_report_template_fifo_is_neither_file_nor_directory(tmp_path):
    import os

    db = _store(tmp_path)
    fifo = tmp_path / "template.j2"
    os.mkfifo(fifo)
    doc = tmp_path / "doc" / "r.md"
    code, out = orch("report", "--db", db, "--template", str(fifo), "-o", str(doc))
    assert code == 2, out
    assert out.strip() == f"error: --template: {fifo}: not a directory or regular file"
    assert not (tmp_path / "doc").exists()    # no r_files/, no document


# ---- YAML nested beyond what the parser can take ----------------------------------------------

def test_deeply_nested_yaml_is_refused_in_one_line(tmp_path):
    for name, text in (("lists.yaml", "[" * 5000 + "]" * 5000 + "\n"),
                       ("maps.yaml", "a: {" * 5000 + "a: 1" + "}" * 5000 + "\n")):
        matrix = tmp_path / name
        matrix.write_text(text)
        db = tmp_path / "orch.db"
        code, out = orch("run", str(matrix), "--db", str(db))
        assert code == 2, out
        assert out.strip() == f"error: {matrix}: nesting too deep"
        assert not db.exists()


# ---- a read-only store --------------------------------------------------------------------------
# Tests run as root, where chmod 444 does not stop a write: os.access is made to answer as it
# would for an ordinary user, for the store file (or its folder) only.

def _read_only(monkeypatch, *paths):
    import os

    real = os.access
    denied = {str(p) for p in paths}

    def access(path, mode, *args, **kwargs):
        if str(path) in denied and mode & os.W_OK:
            return False
        return real(path, mode, *args, **kwargs)
    monkeypatch.setattr(os, "access", access)


def test_read_only_store_file_refuses_import_and_run(tmp_path, monkeypatch):
    db = tmp_path / "orch.db"
    _store(tmp_path)
    before = db.read_bytes()
    _read_only(monkeypatch, db)
    code, out = orch("import", str(FIX / "2026-07-17"), "--db", str(db))
    assert code == 2, out
    assert out.strip() == f"error: store {db} is read-only"
    matrix = tmp_path / "m.yaml"
    matrix.write_text("name: m\nengine: moe-probe\nprompt: hi\ntokens: 2\ncooldown: 0\n"
                      "configs:\n  c0: --layers 2 --experts 4 --expert-mb 0.0625 --top-k 1\n")
    code, out = orch("run", str(matrix), "--db", str(db))
    assert code == 2, out
    assert out.strip() == f"error: store {db} is read-only"
    assert db.read_bytes() == before


def test_store_in_a_read_only_folder_refuses_import(tmp_path, monkeypatch):
    folder = tmp_path / "ro"
    folder.mkdir()
    _read_only(monkeypatch, folder)
    code, out = orch("import", str(FIX / "2026-07-13"), "--db", str(folder / "orch.db"))
    assert code == 2, out
    assert out.strip() == f"error: store {folder / 'orch.db'} is read-only (its folder is not writable)"
    assert list(folder.iterdir()) == []


# ---- a device workdir that cannot be written ----------------------------------------------------

def _read_only_dir(path: Path):
    """`path` as a directory no one can write: chmod 555 for an ordinary user; as root (CI),
    where chmod stops nothing, a read-only tmpfs mounted on it. Returns the undo."""
    import os
    import subprocess

    path.mkdir(parents=True)
    if os.geteuid() != 0:
        path.chmod(0o555)
        return lambda: path.chmod(0o755)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(path)],
                          check=False, capture_output=True, text=True)
    if done.returncode != 0:
        from ci import unavailable
        unavailable(f"cannot mount a read-only tmpfs: {done.stderr.strip()}")
    return lambda: subprocess.run(["umount", str(path)], check=True)


MATRIX_SMALL = ("name: m\nengine: moe-probe\nprompt: hi\ntokens: 2\ncooldown: 0\n"
                "configs:\n  c0: --layers 2 --experts 4 --expert-mb 0.0625 --top-k 1\n")


def test_a_read_only_ssh_workdir_says_so(tmp_path, sshd, monkeypatch):
    from cli_helpers import ssh_device

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ORCH_DB", raising=False)
    workdir = tmp_path / "ro-workdir"
    undo = _read_only_dir(workdir)
    try:
        (tmp_path / "devices.yaml").write_text("devices:\n" + ssh_device("box", sshd, workdir))
        (tmp_path / "m.yaml").write_text(MATRIX_SMALL)
        code, out = orch("run", "m.yaml", "--device", "box")
        assert code == 1, out
        assert out.strip() == f"box: workdir {workdir} is not writable", out
        assert list(workdir.iterdir()) == []
    finally:
        undo()
    from orchestrator.transports.ssh import SshTransport

    writable = SshTransport("box", workdir=str(tmp_path / "rw" / "wd"), **sshd.transport_kwargs())
    writable.connect()   # a writable one (created here) connects as before
    try:
        assert writable.workdir == str(tmp_path / "rw" / "wd")
        assert writable.run(["pwd"]).stdout.decode().strip() == writable.workdir
    finally:
        writable.close()


def test_a_read_only_local_workdir_says_so(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ORCH_DB", raising=False)
    workdir = tmp_path / "ro-workdir"
    undo = _read_only_dir(workdir)
    try:
        (tmp_path / "devices.yaml").write_text(
            f"devices:\n  here:\n    kind: local\n    workdir: {workdir}\n")
        (tmp_path / "m.yaml").write_text(MATRIX_SMALL)
        code, out = orch("run", "m.yaml", "--device", "here")
        assert code == 1, out
        assert out.strip() == f"here: workdir {workdir} is not writable", out
    finally:
        undo()


def test_a_read_only_adb_workdir_says_so(tmp_path, phone, monkeypatch):
    from cli_helpers import adb_device

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ORCH_DB", raising=False)
    workdir = Path(phone.data_dir) / "ro-orch"
    undo = _read_only_dir(workdir)
    try:
        entry = adb_device("phone", phone).replace(f"{phone.data_dir}/orch", str(workdir))
        (tmp_path / "devices.yaml").write_text("devices:\n" + entry)
        (tmp_path / "m.yaml").write_text(MATRIX_SMALL)
        code, out = orch("run", "m.yaml", "--device", "phone")
        assert code == 1, out
        assert out.strip() == f"phone: workdir {workdir} is not writable", out
    finally:
        undo()
