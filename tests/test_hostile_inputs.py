"""Hostile inputs: every bad matrix, inventory, prompt, option and
path ends with one clear line and its documented exit code (2 bad input, 1 failed), with no
traceback, no database file on exit 2, no `running` row and no process left behind."""
from __future__ import annotations

import os
import sqlite3
import textwrap
from pathlib import Path

import pytest
from cli_helpers import orch

from orchestrator.db.store import Store

GOOD = """\
name: hostile
engine: moe-probe
prompt: hello
tokens: 4
cooldown: 0
configs:
  a: --layers 2 --experts 4 --expert-mb 0.0625 --top-k 1
"""


def _m(body: str) -> str:
    """A matrix: GOOD's header with `body` in place of its configs."""
    return "name: hostile\nengine: moe-probe\nprompt: hello\n" + textwrap.dedent(body)


def _inv(body: str) -> str:
    return "devices:\n" + body


_TEST_START = {"ticks": 0}


def _uptime_ticks() -> int:
    return int(float(Path("/proc/uptime").read_text().split()[0]) * os.sysconf("SC_CLK_TCK"))


@pytest.fixture(autouse=True)
def _note_test_start() -> None:
    """Processes that other tests' session fixtures started before this test (the adb server,
    sshd, PostgreSQL) are pytest's children too: only what started during the test counts."""
    _TEST_START["ticks"] = _uptime_ticks() - 1


def _descendants(pid: int) -> list[str]:
    """Processes below `pid` (from /proc) started since this test began: a case must leave
    none."""
    parents: dict[int, tuple[int, str, int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            name = stat[stat.index("(") + 1:stat.rindex(")")]
            fields = stat[stat.rindex(")") + 2:].split()
            # fields[1] = ppid, fields[19] = start time in clock ticks since boot (proc(5))
            parents[int(entry.name)] = (int(fields[1]), name, int(fields[19]))
    found, frontier = [], {pid}
    while frontier:
        nxt = {p for p, (pp, _, _) in parents.items() if pp in frontier}
        found += [f"{p} {parents[p][1]}" for p in nxt if parents[p][2] >= _TEST_START["ticks"]]
        frontier = nxt
    return found


# (id, files, args, exit code, text the last line must hold)
CASES: list[tuple[str, dict[str, str | bytes], list[str], int, str]] = [
    # -- matrices -------------------------------------------------------------------------
    ("missing-file", {}, ["run", "nope.yaml"], 2, "no such file"),
    ("not-utf8", {"m.yaml": b"name: \xff\n"}, ["run", "m.yaml"], 2, "not UTF-8"),
    ("yaml-syntax", {"m.yaml": "name: [x\n"}, ["run", "m.yaml"], 2, "YAML syntax"),
    ("duplicate-key", {"m.yaml": GOOD + "tokens: 5\n"}, ["run", "m.yaml"], 2, "duplicate key"),
    ("top-level-list", {"m.yaml": "- a\n"}, ["run", "m.yaml"], 2, "expected a mapping"),
    ("no-name", {"m.yaml": "engine: bmoe\nconfigs: {a: x}\n"}, ["run", "m.yaml"], 2, "name: is required"),
    ("no-engine", {"m.yaml": "name: x\nconfigs: {a: x}\n"}, ["run", "m.yaml"], 2, "engine: is required"),
    ("unknown-key", {"m.yaml": GOOD + "tokenz: 3\n"}, ["run", "m.yaml"], 2, "tokenz: is not a known key"),
    ("bad-name", {"m.yaml": GOOD.replace("name: hostile", "name: ../x")}, ["run", "m.yaml"], 2, "name:"),
    ("no-configs", {"m.yaml": _m("tokens: 3\n")}, ["run", "m.yaml"], 2, "at least one of"),
    ("unbalanced-quote", {"m.yaml": _m("configs:\n  a: --x 1\n  b: --x \"2\n")},
     ["run", "m.yaml"], 2, "m.yaml:6: configs.b: cannot be split into flags: no closing quotation"),
    ("unbalanced-quote-spec", {"m.yaml": _m("configs:\n  a: {flags: \"--x '1\"}\n")},
     ["run", "m.yaml"], 2, "configs.a.flags: cannot be split"),
    ("trailing-backslash", {"m.yaml": _m("configs:\n  a: '--x \\'\n")}, ["run", "m.yaml"], 2,
     "no escaped character"),
    ("nul-in-flags", {"m.yaml": _m("configs:\n  a: \"--x \\0\"\n")}, ["run", "m.yaml"], 2, "NUL"),
    ("unknown-engine", {"m.yaml": GOOD.replace("moe-probe", "nosuch")}, ["run", "m.yaml"], 2,
     "m.yaml:2: engine:"),
    ("unknown-engine-two-devices",
     {"m.yaml": GOOD.replace("moe-probe", "nosuch"), "devices.yaml": _inv("  l2: {kind: local}\n")},
     ["run", "m.yaml", "-d", "local", "-d", "l2"], 2, "m.yaml:2: engine:"),
    ("bmoe-no-models", {"m.yaml": GOOD.replace("moe-probe", "bmoe") + "binary: /bin/true\n"}, ["run", "m.yaml"], 2,
     "needs a model path"),
    ("llama-cli-no-models", {"m.yaml": GOOD.replace("moe-probe", "llama-cli") + "binary: /bin/true\n"}, ["run", "m.yaml"],
     2, "needs a model path"),
    ("generic-empty-argv", {"m.yaml": _m("engine_options: {argv: []}\nconfigs: {a: x}\n")
                            .replace("moe-probe", "generic")}, ["run", "m.yaml"], 2,
     "engine_options.argv: needs at least the program"),
    ("generic-bad-placeholder",
     {"m.yaml": _m("binary: /bin/true\nengine_options: {argv: ['{binary}', '{nope}']}\n"
                   "configs: {a: x}\n").replace("moe-probe", "generic")},
     ["run", "m.yaml"], 2, "unknown placeholder"),
    ("generic-bad-regex",
     {"m.yaml": _m("binary: /bin/true\nengine_options: {argv: ['{binary}'], regex: {tps: '('}}\n"
                   "configs: {a: x}\n").replace("moe-probe", "generic")},
     ["run", "m.yaml"], 2, "engine_options"),
    ("generic-unknown-option",
     {"m.yaml": _m("binary: /bin/true\nengine_options: {argv: ['{binary}'], nope: 1}\n"
                   "configs: {a: x}\n").replace("moe-probe", "generic")},
     ["run", "m.yaml"], 2, "engine_options"),
    ("generic-model-placeholder-no-model",
     {"m.yaml": _m("binary: /bin/true\nengine_options: {argv: ['{binary}', '{model}']}\n"
                   "configs: {a: x}\n").replace("moe-probe", "generic")},
     ["run", "m.yaml"], 2, "uses {model} but the cell has none"),
    ("generic-no-binary", {"m.yaml": _m("engine_options: {argv: ['{binary}']}\nconfigs: {a: x}\n")
                           .replace("moe-probe", "generic")}, ["run", "m.yaml"], 2,
     "needs `binary:`"),
    ("timeout-inf", {"m.yaml": GOOD + "timeout: .inf\n"}, ["run", "m.yaml"], 2, "finite"),
    ("timeout-nan", {"m.yaml": GOOD + "timeout: .nan\n"}, ["run", "m.yaml"], 2, "finite"),
    ("timeout-negative", {"m.yaml": GOOD + "timeout: -1\n"}, ["run", "m.yaml"], 2, "negative"),
    ("timeout-text", {"m.yaml": GOOD + "timeout: soon\n"}, ["run", "m.yaml"], 2, "duration"),
    ("timeout-huge", {"m.yaml": GOOD + "timeout: 1.0e+12\n"}, ["run", "m.yaml"], 2, "at most 7 days"),
    ("interval-inf", {"m.yaml": GOOD + "sample_interval: .inf\n"}, ["run", "m.yaml"], 2, "finite"),
    ("interval-zero", {"m.yaml": GOOD + "sample_interval: 0\n"}, ["run", "m.yaml"], 2, "at least 0.01"),
    ("cooldown-inf", {"m.yaml": GOOD.replace("cooldown: 0", "cooldown: .inf")}, ["run", "m.yaml"],
     2, "finite"),
    ("cooldown-max-nan", {"m.yaml": GOOD.replace("cooldown: 0", "cooldown: {until: 40C, max: .nan}")},
     ["run", "m.yaml"], 2, "finite"),
    ("seed-huge", {"m.yaml": GOOD + "seed: 99999999999999999999999\n"}, ["run", "m.yaml"], 2, "seed"),
    ("seed-negative", {"m.yaml": GOOD + "seed: -3\n"}, ["run", "m.yaml"], 2, "seed"),
    ("repeat-huge", {"m.yaml": GOOD + "repeat: 1000000000\n"}, ["run", "m.yaml"], 2, "repeat"),
    ("repeat-zero", {"m.yaml": GOOD + "repeat: 0\n"}, ["run", "m.yaml"], 2, "repeat"),
    ("repeat-until-nan", {"m.yaml": GOOD + "repeat: {min: 2, max: 3, until: .nan}\n"},
     ["run", "m.yaml"], 2, "percentage"),
    ("tokens-zero", {"m.yaml": GOOD.replace("tokens: 4", "tokens: 0")}, ["run", "m.yaml"], 2, "tokens"),
    ("tokens-huge", {"m.yaml": GOOD.replace("tokens: 4", "tokens: 100000000000")}, ["run", "m.yaml"],
     2, "tokens"),
    ("tokens-float", {"m.yaml": GOOD.replace("tokens: 4", "tokens: 4.5")}, ["run", "m.yaml"], 2, "tokens"),
    ("order-bad", {"m.yaml": GOOD + "order: random\n"}, ["run", "m.yaml"], 2, "order"),
    ("path-check-bad", {"m.yaml": GOOD + "path_check: maybe\n"}, ["run", "m.yaml"], 2, "path_check"),
    ("env-bad-name", {"m.yaml": GOOD + "env: {'1X': a}\n"}, ["run", "m.yaml"], 2, "environment variable"),
    ("env-newline", {"m.yaml": GOOD + "env: {X: \"a\\nb\"}\n"}, ["run", "m.yaml"], 2, "newlines"),
    ("baseline-unknown", {"m.yaml": GOOD + "baseline: zz\n"}, ["run", "m.yaml"], 2, "is not one of"),
    ("pairs-unknown", {"m.yaml": GOOD + "pairs: [[a, zz]]\n"}, ["run", "m.yaml"], 2, "is not one of"),
    ("route-trace-llama-cli", {"m.yaml": GOOD.replace("moe-probe", "llama-cli") + "route_trace: true\n"},
     ["run", "m.yaml"], 2, "cannot write a route trace"),
    ("grid-duplicate", {"m.yaml": _m("grid: {--x: [1, '1']}\n")}, ["run", "m.yaml"], 2, "again"),
    ("grid-nul", {"m.yaml": _m("grid: {--x: [\"a\\0\"]}\n")}, ["run", "m.yaml"], 2, "NUL"),
    ("grid-over-1000-no-tty", {"m.yaml": _m("grid: {--a: [" + ",".join(map(str, range(40)))
                                            + "], --b: [" + ",".join(map(str, range(30))) + "]}\n")},
     ["run", "m.yaml"], 2, "plans 1,200 cells per device (over 1,000): give --yes"),
    ("grid-over-a-million", {"m.yaml": _m("grid: {" + ", ".join(
        f"--g{i}: [" + ",".join(map(str, range(10))) + "]" for i in range(7)) + "}\n")},
     ["run", "m.yaml"], 2, "at most 1,000,000"),
    # -- prompts --------------------------------------------------------------------------
    ("prompt-nul", {"m.yaml": GOOD.replace("prompt: hello", "prompt: \"a\\0b\"")}, ["run", "m.yaml"],
     2, "NUL byte"),
    ("prompt-file-nul", {"m.yaml": GOOD.replace("prompt: hello", "prompt_file: p.txt"),
                         "p.txt": b"a\0b"}, ["run", "m.yaml"], 2, "NUL byte"),
    ("prompt-file-missing", {"m.yaml": GOOD.replace("prompt: hello", "prompt_file: p.txt")},
     ["run", "m.yaml"], 2, "m.yaml:3: prompt_file: cannot read"),
    ("prompt-and-file", {"m.yaml": GOOD + "prompt_file: p.txt\n", "p.txt": "x"}, ["run", "m.yaml"],
     2, "not both"),
    ("prompt-file-directory", {"m.yaml": GOOD.replace("prompt: hello", "prompt_file: ."), },
     ["run", "m.yaml"], 2, "prompt_file: . is not a regular file (a directory)"),
    # -- inventories ----------------------------------------------------------------------
    ("port-70000", {"m.yaml": GOOD, "devices.yaml": _inv("  s: {kind: ssh, host: h, port: 70000}\n")},
     ["run", "m.yaml"], 2, "devices.s.port: 70000 is not a port (1..65535)"),
    ("port-minus-1", {"m.yaml": GOOD, "devices.yaml": _inv("  s: {kind: ssh, host: h, port: -1}\n")},
     ["run", "m.yaml"], 2, "is not a port"),
    ("adb-port-0", {"m.yaml": GOOD, "devices.yaml": _inv("  p: {kind: adb, serial: x, adb_port: 0}\n")},
     ["run", "m.yaml"], 2, "devices.p.adb_port"),
    ("device-name-escape", {"m.yaml": GOOD, "devices.yaml": _inv("  ../../x: {kind: local}\n")},
     ["run", "m.yaml"], 2, "device name '../../x'"),
    ("device-name-space", {"m.yaml": GOOD, "devices.yaml": _inv("  'a b': {kind: local}\n")},
     ["run", "m.yaml"], 2, "device name 'a b'"),
    ("device-name-dot", {"m.yaml": GOOD, "devices.yaml": _inv("  '..': {kind: local}\n")},
     ["run", "m.yaml"], 2, "device name '..'"),
    ("workdir-relative", {"m.yaml": GOOD, "devices.yaml": _inv("  l: {kind: local, workdir: rel}\n")},
     ["run", "m.yaml"], 2, "workdir: must be absolute"),
    ("workdir-dotdot", {"m.yaml": GOOD, "devices.yaml": _inv("  l: {kind: local, workdir: /tmp/../x}\n")},
     ["run", "m.yaml"], 2, "workdir: must not contain"),
    ("unknown-kind", {"m.yaml": GOOD, "devices.yaml": _inv("  l: {kind: telnet}\n")},
     ["run", "m.yaml"], 2, "unknown device kind"),
    ("inventory-syntax", {"m.yaml": GOOD, "devices.yaml": "devices: [\n"}, ["run", "m.yaml"], 2,
     "YAML syntax"),
    ("inventory-list", {"m.yaml": GOOD, "devices.yaml": "- a\n"}, ["run", "m.yaml"], 2,
     "expected a mapping"),
    ("inventory-missing", {"m.yaml": GOOD}, ["run", "m.yaml", "-i", "none.yaml"], 2, "no such file"),
    ("unknown-device", {"m.yaml": GOOD}, ["run", "m.yaml", "-d", "phone"], 3, "no device named 'phone'"),
    ("device-path-escape", {"m.yaml": GOOD}, ["run", "m.yaml", "-d", "../../x"], 3, "no device named"),
    # -- options and paths ----------------------------------------------------------------
    ("db-proc", {"m.yaml": GOOD}, ["run", "m.yaml", "--db", "/proc/x.db"], 2, "cannot open the store"),
    ("db-directory", {"m.yaml": GOOD, "d/keep": ""}, ["run", "m.yaml", "--db", "d"], 2, "is a directory"),
    ("db-not-a-url", {"m.yaml": GOOD}, ["run", "m.yaml", "--db", "notaurl://"], 2, "notaurl"),
    ("db-postgres-closed-port", {"m.yaml": GOOD},
     ["run", "m.yaml", "--db", "postgresql+psycopg://u@127.0.0.1:1/x"], 1, "cannot open the store"),
    ("db-not-a-database", {"x.db": b"not sqlite at all" * 100}, ["runs", "--db", "x.db"], 2,
     "cannot open the store"),
    ("show-no-database", {}, ["show", "1"], 2, "no database at"),
    ("table-no-database", {}, ["table"], 2, "no database at"),
    ("report-no-database", {}, ["report"], 2, "no database at"),
    ("export-no-database", {}, ["export"], 2, "no database at"),
    ("runs-db-directory", {"d/keep": ""}, ["runs", "--db", "d"], 2, "is a directory"),
    ("link-grace-negative", {"m.yaml": GOOD}, ["run", "m.yaml", "--link-grace", "-1"], 2, "link-grace"),
    ("link-grace-inf", {"m.yaml": GOOD}, ["run", "m.yaml", "--link-grace", "inf"], 2, "link-grace"),
    ("show-not-a-number", {}, ["show", "x"], 2, "is not a valid integer"),
    # a file orch cannot read is one line naming it and why, exit 2 (never Python's text)
    ("matrix-under-a-file", {"f": "x"}, ["run", "f/m.yaml"], 2, "f/m.yaml: cannot read it: Not a directory"),
    ("matrix-name-too-long", {}, ["run", "x" * 300 + ".yaml"], 2, "cannot read it: File name too long"),
    ("matrix-dev-zero", {}, ["run", "/dev/zero"], 2, "/dev/zero: not a regular file (a character device)"),
    ("inventory-directory", {"m.yaml": GOOD, "inv/keep": ""}, ["run", "m.yaml", "-i", "inv"], 2,
     "inv: not a regular file (a directory)"),
    ("inventory-dev-zero", {"m.yaml": GOOD}, ["run", "m.yaml", "-i", "/dev/zero"], 2,
     "not a regular file (a character device)"),
    ("inventory-under-a-file", {"m.yaml": GOOD, "f": "x"}, ["run", "m.yaml", "-i", "f/d.yaml"], 2,
     "f/d.yaml: cannot read it: Not a directory"),
    ("probes-dev-zero", {"m.yaml": GOOD + "quality: {prompts: /dev/zero, grader: exact}\n"},
     ["run", "m.yaml"], 2, "/dev/zero: not a regular file (a character device) (quality.prompts)"),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_hostile_input(case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, files, args, code, text = case
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ORCH_DB", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    for name, content in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        (path.write_bytes if isinstance(content, bytes) else path.write_text)(content)
    before = set(os.listdir(tmp_path))
    got, output = orch(*args)
    lines = [line for line in output.splitlines() if line.strip()]
    assert got == code, output
    assert "Traceback" not in output, output
    assert lines and text in lines[-1], output
    if code in (2, 3):   # nothing written: no database file, nothing new at all
        assert set(os.listdir(tmp_path)) == before, output
    db = tmp_path / "orch.db"
    if db.exists():
        with sqlite3.connect(db) as conn:
            assert conn.execute("select count(*) from run where status = 'running'").fetchone() == (0,)
    assert _descendants(os.getpid()) == []


@pytest.mark.timeout(60)
@pytest.mark.parametrize("args", [["run", "fifo"], ["run", "m.yaml", "-i", "fifo"],
                                  ["import", "study", "--design", "fifo"],
                                  ["run", "q.yaml"]], ids=["matrix", "inventory", "design",
                                                           "probes"])
def test_a_fifo_is_refused_at_the_open_not_waited_on(args, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A FIFO given as a matrix, an inventory, a design or a probes file: one line naming it,
    exit 2, at once (before, the read waited for a writer for ever)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ORCH_DB", raising=False)
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "study").mkdir()
    (tmp_path / "m.yaml").write_text(GOOD)
    (tmp_path / "q.yaml").write_text(GOOD + "quality: {prompts: fifo, grader: exact}\n")
    code, output = orch(*args)
    lines = [line for line in output.splitlines() if line.strip()]
    assert code == 2 and "Traceback" not in output, output
    assert len(lines) == 1 and "fifo: not a regular file (a FIFO)" in lines[0], output
    if args[0] == "run":   # (`orch import` opens its store before it reads the design)
        assert not (tmp_path / "orch.db").exists()


def test_suite_size() -> None:
    """At least 60 cases."""
    assert len(CASES) >= 60


# -- wrong or silent results, tracebacks and exit codes ------------------------------------------

SH_ENGINE = """\
name: bytes
engine: generic
binary: /bin/sh
engine_options:
  argv: ["{binary}", "-c", "printf %s \\"$1\\" > \\"$2\\"; echo boom-on-stderr >&2; exit 3",
         "sh", "{prompt}", "{flags}"]
prompt_file: p.txt
cooldown: 0
sample_interval: 0.1s
configs:
  a: OUT
"""
PROMPT = b"line one\r\nline two\rthree\xff\xfe not utf-8\t\x01end\n\n"


def test_prompt_bytes_reach_the_engine_and_show_prints_its_stderr(tmp_path: Path,
                                                                  monkeypatch) -> None:
    """CR, CRLF and non-UTF-8 bytes of a prompt file reach the engine exactly; the failed run's
    stderr tail is what `orch show` prints; -o to an unwritable place is one line."""
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "prompt.out"
    (tmp_path / "p.txt").write_bytes(PROMPT)
    (tmp_path / "m.yaml").write_text(SH_ENGINE.replace("OUT", str(out)))
    code, output = orch("run", "m.yaml")
    assert code == 1, output
    assert out.read_bytes() == PROMPT
    code, output = orch("show", "1")
    assert code == 0, output
    assert "engine stderr" in output and "boom-on-stderr" in output, output
    for args in (["report", "-o", "/proc/nope/report.md"], ["export", "-o", "/proc/nope"]):
        code, output = orch(*args)
        lines = [line for line in output.splitlines() if line.strip()]
        assert code in (1, 2) and "Traceback" not in output and lines[-1].startswith("error:"), output
    assert _descendants(os.getpid()) == []


def test_inline_prompt_keeps_cr_and_crlf(tmp_path: Path) -> None:
    from orchestrator.config.matrix import load_matrix

    (tmp_path / "m.yaml").write_text(GOOD.replace("prompt: hello", 'prompt: "a\\r\\nb\\rc"'))
    assert load_matrix(tmp_path / "m.yaml").prompt_text == "a\r\nb\rc"


def test_subsecond_timeout_is_sent_and_honoured(tmp_path: Path, monkeypatch) -> None:
    """`timeout: 0.5s` was int(0.5) = 0 = no timeout: now the job carries it (rounded up to
    whole seconds for the agent's timeout_s, exact in timeout_ms) and the cell times out."""
    from orchestrator.run.agent_client import Job

    assert Job("u", [], {}, timeout_s=0.5).timeout_ms == 500
    assert Job("u", [], {}, timeout_s=0).timeout_ms == 0
    monkeypatch.chdir(tmp_path)
    (tmp_path / "m.yaml").write_text(
        "name: to\nengine: generic\nbinary: /bin/sleep\n"
        "engine_options: {argv: ['{binary}', '{flags}']}\nprompt: x\ntimeout: 0.5s\n"
        "sample_interval: 0.1s\ncooldown: 0\nconfigs: {a: '30'}\n")
    code, output = orch("run", "m.yaml")
    assert code == 1, output
    with sqlite3.connect(tmp_path / "orch.db") as conn:
        assert conn.execute("select status from run").fetchall() == [("timeout",)]
    assert _descendants(os.getpid()) == []


def test_timeout_zero_means_no_timeout(tmp_path: Path) -> None:
    from orchestrator.config.matrix import load_matrix

    (tmp_path / "m.yaml").write_text(GOOD + "timeout: 0\n")
    assert load_matrix(tmp_path / "m.yaml").matrix.timeout == 0.0
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    assert "`timeout: 0`" in readme


@pytest.mark.slow
def test_resume_reruns_a_config_whose_flags_changed(tmp_path: Path, monkeypatch) -> None:
    """--resume after a config's flags changed re-runs that config (superseding the old run)
    and keeps the unchanged one, where it used to keep the old results silently."""
    monkeypatch.chdir(tmp_path)
    two = GOOD + "  b: --layers 2 --experts 4 --expert-mb 0.0625 --top-k 1\n"
    (tmp_path / "m.yaml").write_text(two)
    assert orch("run", "m.yaml")[0] == 0
    (tmp_path / "m.yaml").write_text(two.replace("  b: --layers 2", "  b: --layers 3"))
    code, output = orch("run", "m.yaml", "--resume")
    assert code == 0, output
    with sqlite3.connect(tmp_path / "orch.db") as conn:
        rows = conn.execute("select config, flags, superseded from run order by id").fetchall()
    assert [(c, s) for c, _, s in rows] == [("a", 0), ("b", 1), ("b", 0)]
    assert "--layers 3" in rows[-1][1]


def test_unexpected_error_is_one_line_and_debug_shows_it(tmp_path: Path, monkeypatch) -> None:
    from orchestrator.report.terminal import runs as terminal

    def boom(*_args: object) -> None:
        raise RuntimeError("something odd\nsecond line")

    monkeypatch.chdir(tmp_path)
    Store.open("orch.db")
    monkeypatch.setattr(terminal, "print_runs", boom)
    code, output = orch("runs")
    assert code == 1
    assert output.strip().splitlines() == [
        "error: RuntimeError: something odd (run with --debug for the traceback)"]
    with pytest.raises(RuntimeError):
        orch("--debug", "runs")


def test_a_device_thread_that_dies_reports_its_error(monkeypatch) -> None:
    """Two devices: an unexpected error in one device's thread is that device's result, not
    a KeyError of the CLI afterwards."""
    from orchestrator.run import session

    def broken(*_args: object, **_kwargs: object) -> None:
        raise KeyError("local")

    monkeypatch.setattr(session, "run_matrix", broken)

    class Board:
        def device(self, name: str) -> None:
            return None

    results = session.run_devices(None, None, None, ["a", "b"], Board())  # type: ignore[arg-type]
    assert set(results) == {"a", "b"}
    assert all("KeyError" in str(r) for r in results.values())


def test_interrupt_is_one_line_and_130(tmp_path: Path, monkeypatch) -> None:
    from orchestrator.report.terminal import runs as terminal

    def interrupted(*_args: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.chdir(tmp_path)
    Store.open("orch.db")
    monkeypatch.setattr(terminal, "print_runs", interrupted)
    code, output = orch("runs")
    assert (code, output.strip()) == (130, "interrupted")
