"""Running the `orch` CLI in-process from tests."""
from __future__ import annotations

from click.testing import CliRunner

from orchestrator.cli import main


def orch(*args: str, input: str | None = None) -> tuple[int, str]:
    """(exit code, stdout+stderr) of `orch ARGS...`."""
    result = CliRunner().invoke(main, list(args), input=input, catch_exceptions=False)
    return result.exit_code, result.output


def orch_ok(*args: str) -> str:
    """The output of `orch ARGS...`, which must exit 0."""
    code, output = orch(*args)
    assert code == 0, output
    return output


def fake_thermal_zone(root, celsius: float = 38.0):
    """A thermal zone directory (one `cpu-0-0` zone at `celsius`) for ORCH_THERMAL_DIR; the
    zone's own directory is returned, so a test can write new temperatures into it."""
    zone = root / "thermal" / "thermal_zone0"
    zone.mkdir(parents=True)
    (zone / "type").write_text("cpu-0-0\n")
    (zone / "temp").write_text(f"{round(celsius * 1000)}\n")
    return zone


def ssh_device(name: str, sshd, workdir, known_hosts=None) -> str:
    """A devices.yaml entry (indented under `devices:`) for the test sshd."""
    return (f"  {name}:\n    kind: ssh\n    host: {sshd.host}\n    port: {sshd.port}\n"
            f"    user: {sshd.user}\n    key: {sshd.key}\n"
            f"    known_hosts: {known_hosts or sshd.known_hosts}\n    workdir: {workdir}\n")


def adb_device(name: str, phone) -> str:
    """A devices.yaml entry (indented under `devices:`) for the emulated phone."""
    return (f"  {name}:\n    kind: adb\n    serial: \"{phone.serial}\"\n"
            f"    adb_port: {phone.adb_port}\n    workdir: {phone.data_dir}/orch\n")


# a two-config moe-probe matrix that runs on `local` in a second or two
SMALL_PROBE_MATRIX = """\
    name: probe-small
    engine: moe-probe
    prompt: hello experts
    tokens: 12
    cooldown: 0
    sample_interval: 0.2s
    configs:
      c0: --io pread --cache-mb 0 --layers 4 --experts 8 --expert-mb 0.0625 --top-k 2
      c1: --io mmap --cache-mb 1 --layers 4 --experts 8 --expert-mb 0.0625 --top-k 2
    """
