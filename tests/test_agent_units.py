"""The agent's functions one at a time, under mksh + toybox-only PATH, dash and bash.

`ORCH_AGENT_LIB=1 . agent/orch-agent.sh` defines the functions and runs no command
(docs/agent-protocol.md, "Source-only mode"); each test sources the agent that way in a fresh
shell, calls a function and prints the variable it sets. Paths the agent reads come from fake
/proc and /sys files in tmp_path through the ORCH_* overrides. The last test runs shellcheck.

Over 400 lines on purpose: one test per agent function, sharing the source-only fixture.
"""
from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
from agent_helpers import AGENT, Shell, wait_for
from ci import unavailable

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def procs():
    """Processes a test starts (stand-ins for supervisors and engines); killed at teardown."""
    started: list[subprocess.Popen] = []

    def start(*argv: str, **kwargs) -> subprocess.Popen:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, **kwargs)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


def run_lib(shell: Shell, script: str, env: dict[str, str] | None = None,
            args: list[str] | None = None) -> subprocess.CompletedProcess:
    """Source the agent in source-only mode, then run `script` in the same shell ($1...: args)."""
    prog = f"ORCH_AGENT_LIB=1 . {shlex.quote(str(AGENT))}\n{script}"
    return subprocess.run([shell.interpreter, "-c", prog, "unit", *(args or [])],
                          env=shell.environ(env), capture_output=True, stdin=subprocess.DEVNULL,
                          timeout=30)


def lib(shell: Shell, script: str, env: dict[str, str] | None = None,
        args: list[str] | None = None) -> list[str]:
    """run_lib's stdout lines; the script must succeed and say nothing on stderr."""
    res = run_lib(shell, script, env, args)
    assert res.returncode == 0 and res.stderr == b"", (res.returncode, res.stderr)
    return res.stdout.decode("utf-8", "surrogateescape").split("\n")[:-1]


def stat_of(pid: int) -> list[str]:
    """/proc/PID/stat fields from the state letter (field 3) on."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def start_time(pid: int) -> str:
    return stat_of(pid)[19]   # field 22


# -- source-only mode --------------------------------------------------------------------------

def test_source_only_mode_defines_functions_and_runs_no_command(shell, tmp_path):
    out = lib(shell, 'say "lib=${ORCH_AGENT_LIB-unset}"; command -v supervise; '
                     'say "$AGENT_VERSION"; env | grep -c ORCH_AGENT_LIB || :')
    assert out[0] == "lib=unset"           # unset: nothing this shell starts inherits it
    assert out[1] == "supervise"
    assert out[2] == shell.run("version").stdout.decode().strip()
    assert out[3] == "0"
    # run (not sourced) with the variable set, the agent does nothing at all
    res = shell.run("version", extra_env={"ORCH_AGENT_LIB": "1"})
    assert (res.returncode, res.stdout, res.stderr) == (0, b"", b"")
    assert shell.run("version").stdout.decode().strip() == out[2]


# -- numbers -----------------------------------------------------------------------------------

CENTI = {"4.07": "407", "0.52": "52", "0.05": "5", "0.00": "0", "12": "1200", "3.5": "350",
         "10.999": "1099", "08.09": "809", ".5": "50", "1.": "100", "abc": "", "-1.5": "",
         "1.2.3": "",
         "": "", ".": ""}   # an unreadable /proc/loadavg: no value, not load 0


def test_centi(shell):
    values = list(CENTI)
    out = lib(shell, 'for v in "$@"; do centi "$v"; say "$C"; done', args=values)
    assert dict(zip(values, out)) == CENTI


MS_SECS = {"0": "0.000", "5": "0.005", "50": "0.050", "999": "0.999", "1000": "1.000",
           "1234": "1.234", "60010": "60.010"}


def test_ms_secs(shell):
    values = list(MS_SECS)
    out = lib(shell, 'for v in "$@"; do ms_secs "$v"; say "$SECS"; done', args=values)
    assert dict(zip(values, out)) == MS_SECS


UPTIMES = {"12345.67 999.00": "12345670", "12345.07 1.00": "12345070",  # "07" is no octal
           "12345.6 1": "12345600", "12345 1": "12345000", "0.05 0.01": "50", "7.00": "7000"}


def test_now_ms_parses_uptime(shell, tmp_path):
    files = []
    for i, text in enumerate(UPTIMES):
        path = tmp_path / f"uptime{i}"
        path.write_text(text + "\n")
        files.append(str(path))
    # the first through the override, the others by setting UPTIME as the override does
    script = 'now_ms; say "$NOW"; shift; for f in "$@"; do UPTIME=$f; now_ms; say "$NOW"; done'
    out = lib(shell, script, env={"ORCH_UPTIME": files[0]}, args=files)
    assert out == list(UPTIMES.values())


def test_now_ms_reads_the_real_uptime(shell):
    def uptime_ms() -> int:   # "4141.53" -> 4141530 exactly (as a float product it can fall short)
        return round(float(Path("/proc/uptime").read_text().split()[0]) * 1000)
    before = uptime_ms()
    out = lib(shell, 'now_ms; say "$NOW"')
    after = uptime_ms()
    assert before <= int(out[0]) <= after   # /proc/uptime has 10 ms steps: NOW is one of them


# -- /proc/PID/stat ----------------------------------------------------------------------------

# fields from the state on: ppid 1, pgrp 2, ... majflt 9 (field 12), utime 11 / stime 12 (14/15),
# num_threads 17 (20), starttime 19 (22); the comm holds ") " and blanks
STAT = "4321 (we) (ird n) S " + " ".join(str(n) for n in range(1, 45))


def test_stat_fields_proc_start_ppid_of(shell):
    out = lib(shell, '''
        st=$1
        proc_start "$st"; say "start=$PSTART"
        ppid_of "$st"; say "ppid=$PPID_OF"
        set -f
        stat_fields ${st##*) }
        say "$MAJ $TICKS $THREADS $START"
        proc_start "no parenthesis"; say "none=$PSTART"
        ppid_of ""; say "none=$PPID_OF"
    ''', args=[STAT])
    assert out == ["start=19", "ppid=1", "9 23 17 19", "none=", "none="]


def test_proc_start_and_ppid_of_a_real_process(shell):
    me = os.getpid()
    out = lib(shell, 'read -r st <"/proc/$1/stat"; proc_start "$st"; ppid_of "$st"; '
                     'say "$PSTART $PPID_OF"', args=[str(me)])
    assert out == [f"{start_time(me)} {os.getppid()}"]


# -- processes and job directories -------------------------------------------------------------

def test_alive(shell, procs):
    live = procs("sleep", "30")
    zombie = procs("true")
    # not waited for: a zombie, which still answers kill -0
    wait_for(lambda: stat_of(zombie.pid)[0] == "Z")
    gone = procs("true")
    gone.wait()
    out = lib(shell, 'for p in "$@"; do if alive "$p"; then say yes; else say no; fi; done',
              args=[str(live.pid), str(zombie.pid), str(gone.pid), "", "x"])
    assert out == ["yes", "no", "no", "no", "no"]


def job_states(shell: Shell, jobdirs: list[Path]) -> list[str]:
    return lib(shell, 'for d in "$@"; do JOBDIR=$d; job_state; say "$STATE"; done',
               args=[str(d) for d in jobdirs])


def test_job_state(shell, tmp_path, procs):
    sup = procs("sleep", "30")
    eng = procs("sleep", "30")
    dead = procs("true")
    dead.wait()
    jobs = {}

    def job(name: str, **files: str) -> Path:
        path = tmp_path / name
        path.mkdir()
        for file, text in files.items():
            (path / file.replace("_", ".")).write_text(text)
        jobs[name] = path
        return path

    job("absent")
    # ended: the supervisor is gone and `done` holds the spool's last line, its X line
    job("finished", done="X\t0\t0\t5\n", pid=f"{dead.pid}\n", spool="H\tproto=1\nX\t0\t0\t5\n")
    # a `done` file beside a live supervisor is no end (anyone can make one: end_proven)
    job("forged_done", done="X\t0\t0\t5\n", pid=f"{sup.pid}\n",
        sup_start=f"{start_time(sup.pid)}\n")
    job("running", pid=f"{sup.pid}\n", sup_start=f"{start_time(sup.pid)}\n")
    job("running_older_agent", pid=f"{sup.pid}\n")   # no sup.start: alive is all we know
    # the pid now names another process (reused): its start time is not the recorded one
    job("reused", pid=f"{sup.pid}\n", sup_start="1\n", spool="H\tproto=1\n")
    job("orphan", pid=f"{dead.pid}\n", engine_pid=f"{eng.pid}\n",
        engine_start=f"{start_time(eng.pid)}\n")
    job("dead", pid=f"{dead.pid}\n", spool="H\tproto=1\nS\t0\n")
    # an X line without the supervisor's `done` holding it: not proven, so dead
    job("unproven", pid=f"{dead.pid}\n", spool="H\tproto=1\nX\t0\t0\t5\n")
    out = job_states(shell, list(jobs.values()))
    assert dict(zip(jobs, out)) == {
        "absent": "absent", "finished": "done", "forged_done": f"running {sup.pid}",
        "running": f"running {sup.pid}",
        "running_older_agent": f"running {sup.pid}", "reused": "dead",
        "orphan": f"orphan {eng.pid}", "dead": "dead", "unproven": "dead"}


def test_enforce_timeout_terms_the_group_then_kills_it(shell, procs):
    # TERM ignored (the disposition survives exec), so only the KILL 3 s later ends it
    engine = procs("sh", "-c", "trap '' TERM; exec sleep 30", start_new_session=True)
    wait_for(lambda: Path(f"/proc/{engine.pid}/cmdline").read_bytes().startswith(b"sleep"))
    out = lib(shell, '''
        EPID=$1 TIMEOUT_MS=1000 TERM_AT='' CAUSE=''
        enforce_timeout 999; say "cause=$CAUSE term_at=$TERM_AT"
        enforce_timeout 1000; say "cause=$CAUSE term_at=$TERM_AT"
        enforce_timeout 3999; say "cause=$CAUSE term_at=$TERM_AT"
        alive "$EPID" && say "alive after TERM"
        enforce_timeout 4000
    ''', args=[str(engine.pid)])
    assert out == ["cause= term_at=", "cause=timeout term_at=1000", "cause=timeout term_at=1000",
                   "alive after TERM"]
    assert engine.wait(timeout=10) == -signal.SIGKILL


def test_check_meta(shell, tmp_path):
    script = '''
        JOBDIR=$1 INTERVAL=$2 TIMEOUT=$3 TIMEOUT_MS=$4 CSV=$5 CWD=$6
        check_meta
        say "$INTERVAL $SLP $TIMEOUT_MS $CSV $CWD"
    '''
    job = str(tmp_path)
    assert lib(shell, script, args=[job, "250", "2", "", "out.csv", ""]) == [
        f"250 0.250 2000 {job}/out.csv {job}"]
    assert lib(shell, script, args=[job, "5", "0", "300", "/abs.csv", "work"]) == [
        f"10 0.010 300 /abs.csv {job}/work"]
    assert lib(shell, script, args=[job, "1s", "x", "y", "", "/w"]) == [
        "W\tbad interval_ms '1s', using 1000", "W\tbad timeout_s 'x', using 0",
        "W\tbad timeout_ms 'y', using timeout_s", "1000 1.000 0  /w"]


def test_say_exit(shell, tmp_path):
    uptime = tmp_path / "uptime"
    uptime.write_text("100.25 1.00\n")
    script = 'UP0=99000 RC=$1 CAUSE=$2; say_exit'
    env = {"ORCH_UPTIME": str(uptime)}
    assert lib(shell, script, env, ["3", ""]) == ["X\t3\t0\t1250"]
    assert lib(shell, script, env, ["143", "timeout"]) == ["X\t143\t15\t1250\tcause=timeout"]
    assert lib(shell, script, env, ["126", ""]) == ["X\t126\t0\t1250"]


def test_drain_keeps_partial_lines_per_tag(shell, tmp_path):
    out_file, err_file = tmp_path / "stdout", tmp_path / "stderr"
    out_file.write_bytes(b"")
    err_file.write_bytes(b"")
    parts = []
    for i, data in enumerate([b"a\nb", b"c\nd\n", b"e", b"x\ty"]):
        (tmp_path / f"p{i}").write_bytes(data)
        parts.append(str(tmp_path / f"p{i}"))
    out = lib(shell, '''
        o=$1 e=$2; shift 2
        exec 3<"$o" 4<"$e"
        P_O='' P_E='' P_C=''
        cat "$1" >>"$o"; drain 3 O; say "P_O=$P_O"
        cat "$4" >>"$e"; drain 4 E; say "P_E=$P_E P_O=$P_O"
        cat "$2" >>"$o"; drain 3 O; say "P_O=$P_O"
        cat "$3" >>"$o"; drain 3 O; say "P_O=$P_O P_C=$P_C"
    ''', args=[str(out_file), str(err_file), *parts])
    assert out == ["O\ta", "P_O=b", "P_E=x\ty P_O=b", "O\tbc", "O\td", "P_O=", "P_O=e P_C="]


# -- sensors -----------------------------------------------------------------------------------

def fake_thermal(root: Path, zones: dict[str, tuple[str | None, str | None]]) -> Path:
    """root/thermal_zoneN with `type` and `temp` (None: no such file)."""
    for name, (typ, temp) in zones.items():
        zone = root / name
        zone.mkdir(parents=True)
        if typ is not None:
            (zone / "type").write_text(typ + "\n")
        if temp is not None:
            (zone / "temp").write_text(temp + "\n")
    return root


ZONES = {
    "thermal_zone0": ("cpu-0-0", "45000"),
    "thermal_zone1": ("battery", "52000"),
    "thermal_zone2": ("gpu", None),           # no temp: not a zone the agent samples
    "thermal_zone3": ("BIG", "61000"),         # Tensor / Exynos cluster: a CPU zone
    "thermal_zone4": ("x86_pkg_temp", "-5000"),
    "thermal_zone5": (None, "30000"),          # no type: sampled, not a CPU zone
    "thermal_zone6": ("cpu-1-0", "n/a"),       # listed, but its value is no number
    "thermal_zone10": ("gpu0", "38000"),
    "thermal_zoneX": ("cpu", "99000"),         # not thermal_zoneN
}


def test_list_zones(shell, tmp_path):
    thermal = fake_thermal(tmp_path / "thermal", ZONES)
    (thermal / "cooling_device0").mkdir()
    out = lib(shell, 'list_zones; say "$ZONES"', env={"ORCH_THERMAL_DIR": str(thermal)})
    tokens = out[0].split()
    assert len(tokens) == len(set(tokens))
    assert set(tokens) == {"0:c", "1:", "3:c", "4:c", "5:", "6:c", "10:"}
    empty = lib(shell, 'list_zones; say "[$ZONES]"',
                env={"ORCH_THERMAL_DIR": str(tmp_path / "none")})
    assert empty == ["[]"]


def test_battery_paths(shell, tmp_path):
    battery = tmp_path / "battery"
    battery.mkdir()
    script = 'battery_paths; say "$BATT|$BSTAT|$DUMPSYS"'
    env = {"ORCH_BATTERY_DIR": str(battery)}
    assert lib(shell, script, env) == ["||"]
    (battery / "temp").write_text("312\n")
    (battery / "status").write_text("Charging\n")
    assert lib(shell, script, env) == [f"{battery}/temp|{battery}/status|"]
    # no sysfs temperature but a dumpsys on PATH: the temperature comes from dumpsys
    (battery / "temp").unlink()
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "dumpsys").write_text("#!/bin/sh\nexit 0\n")
    (shim / "dumpsys").chmod(0o755)
    env["PATH"] = f"{shim}{os.pathsep}{shell.environ()['PATH']}"
    assert lib(shell, script, env) == [f"|{battery}/status|1"]


def test_battery_dumpsys(shell, tmp_path):
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "dumpsys").write_text(
        "#!/bin/sh\n[ \"$1\" = battery ] || exit 1\ncat <<'EOF'\nCurrent Battery Service state:\n"
        "  AC powered: false\n  status: 2\n  level: 77\n  temperature: 305\nEOF\n")
    (shim / "dumpsys").chmod(0o755)
    env = {"PATH": f"{shim}{os.pathsep}{shell.environ()['PATH']}"}
    assert lib(shell, 'battery_dumpsys; say "$DS_T|$DS_S|$DS_L"', env) == ["305|Charging|77"]


def test_list_freqs(shell, tmp_path):
    cpu = tmp_path / "cpu"
    for name, cur in [("cpu0", "576000"), ("cpu1", None), ("cpu2", "1804800"),
                      ("cpu10", "2841600"), ("cpu3x", "1")]:
        freq = cpu / name / "cpufreq"
        freq.mkdir(parents=True)
        if cur is not None:
            (freq / "scaling_cur_freq").write_text(cur + "\n")
    (cpu / "cpufreq").mkdir()
    (cpu / "cpuidle").mkdir()
    out = lib(shell, 'list_freqs; say "$FREQ_CPUS"', env={"ORCH_CPU_DIR": str(cpu)})
    tokens = out[0].split()
    assert sorted(tokens, key=int) == ["0", "2", "10"]


def test_read_sensor(shell, tmp_path):
    thermal = fake_thermal(tmp_path / "thermal", ZONES)
    battery = tmp_path / "battery"
    battery.mkdir()
    (battery / "temp").write_text("312\n")
    env = {"ORCH_THERMAL_DIR": str(thermal), "ORCH_BATTERY_DIR": str(battery)}
    sensors = ["cpu", "battery", "gpu*", "batt*", "*", "nomatch", "x86_pkg_temp"]
    out = lib(shell, 'list_zones; battery_paths; for s in "$@"; do read_sensor "$s"; '
                     'say "$s=$VAL"; done', env, sensors)
    assert out == ["cpu=61000", "battery=31200", "gpu*=38000", "batt*=52000", "*=61000",
                   "nomatch=", "x86_pkg_temp=-5000"]
    (battery / "temp").unlink()
    assert lib(shell, 'list_zones; battery_paths; read_sensor battery; say "[$VAL]"', env) == ["[]"]


def test_sample_line(shell, tmp_path, procs):
    engine = procs("sleep", "30")
    gone = procs("true")
    gone.wait()
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:  100000 kB\nMemFree:  5000 kB\nMemAvailable:  4242 kB\n")
    thermal = fake_thermal(tmp_path / "thermal", {"thermal_zone0": ("cpu-0-0", "45000"),
                                                  "thermal_zone1": ("battery", "52000")})
    battery = tmp_path / "battery"
    battery.mkdir()
    (battery / "temp").write_text("312\n")
    (battery / "status").write_text("Charging\n")
    cpu = tmp_path / "cpu"
    for n, khz in enumerate([576000, 1804800]):
        (cpu / f"cpu{n}" / "cpufreq").mkdir(parents=True)
        (cpu / f"cpu{n}" / "cpufreq" / "scaling_cur_freq").write_text(f"{khz}\n")
    loadavg = tmp_path / "loadavg"
    loadavg.write_text("1.50 0.80 0.30 2/300 4242\n")
    uptime = tmp_path / "uptime"
    uptime.write_text("100.25 50.00\n")
    env = {"ORCH_MEMINFO": str(meminfo), "ORCH_THERMAL_DIR": str(thermal),
           "ORCH_BATTERY_DIR": str(battery), "ORCH_CPU_DIR": str(cpu),
           "ORCH_LOADAVG": str(loadavg), "ORCH_UPTIME": str(uptime)}
    script = ('EPID=$1 START0="" GONE="" UP0=100000; list_zones; battery_paths; list_freqs; '
              'sample; say "gone=$GONE"')

    def sample(pid: int) -> tuple[str, dict[str, str], str]:
        line, gone_line = lib(shell, script, env, [str(pid)])
        fields = line.split("\t")
        assert fields[0] == "S"
        return fields[1], dict(f.split("=", 1) for f in fields[2:]), gone_line

    t_ms, keys, gone_flag = sample(engine.pid)
    assert t_ms == "250" and gone_flag == "gone="
    # a one-shot job reads the status file up to VmRSS: no swap_kb (a session job's has it)
    assert {k: keys.pop(k) for k in ("rss_kb", "hwm_kb", "majflt", "cpu_ticks")}
    assert keys == {"threads": "1", "mem_avail_kb": "4242", "tz0_mC": "45000",
                    "tz1_mC": "52000", "cpu_temp_mC": "45000", "load1_x100": "150",
                    "cpu_khz": "1804800", "batt_temp_dC": "312", "batt_charging": "1"}
    # a session job reads on to VmSwap: the engine's swap over an idle gap (docs/sessions.md)
    line, _ = lib(shell, "SESSION=session " + script, env, [str(engine.pid)])
    assert "\tswap_kb=" in line
    # an unreadable file gives no key (no load1_x100=0); an ended engine gives no engine keys
    loadavg.unlink()
    t_ms, keys, gone_flag = sample(gone.pid)
    assert gone_flag == "gone=1"
    assert "load1_x100" not in keys and "rss_kb" not in keys and "threads" not in keys, keys
    assert keys["mem_avail_kb"] == "4242"


@pytest.mark.parametrize("name", ["my engine", "a) b", "x"])
def test_sample_reads_stat_whatever_the_engine_is_called(shell, tmp_path, procs, name):
    """sample() lets `read` split /proc/PID/stat as it reads; a comm with a blank (or a
    ") " of its own) shifts those fields, and the line is then split after its last ") "."""
    binary = tmp_path / name
    shutil.copy(shutil.which("sleep"), binary)
    engine = procs(str(binary), "30")
    wait_for(lambda: Path(f"/proc/{engine.pid}/comm").read_text().strip() == name[:15])
    line, = lib(shell, 'EPID=$1 START0="" GONE="" UP0=0; sample', args=[str(engine.pid)])
    keys = dict(f.split("=", 1) for f in line.split("\t")[2:])
    fields = stat_of(engine.pid)
    assert keys["threads"] == fields[17] == "1"
    assert keys["majflt"] == fields[9]
    assert int(keys["cpu_ticks"]) == int(fields[11]) + int(fields[12])


# -- shellcheck --------------------------------------------------------------------------------

def test_shellcheck_finds_nothing():
    """Every finding is fixed or disabled on its own line with the reason beside it."""
    tool = shutil.which("shellcheck")
    if tool is None:
        unavailable("shellcheck is not installed (scripts/install --test installs it)")
    res = subprocess.run([tool, "-s", "sh", str(AGENT)], capture_output=True, timeout=120)
    assert res.returncode == 0 and not res.stdout, res.stdout.decode() + res.stderr.decode()
