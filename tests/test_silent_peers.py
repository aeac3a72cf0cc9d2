"""A store at an address that accepts and never answers (a hung server, a proxy on the wrong
port): `orch run` and a reading command give up with one line and exit 1, instead of waiting
for ever or for the kernel's two minutes (db/reconnect.py gives every PostgreSQL connection a
10 s connect timeout). The bound is the call returning: the suite's per-test timeout catches a
hang, no wall-clock assert."""
from __future__ import annotations

import pytest
from cli_helpers import orch
from lab_helpers import SilentPeer

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

MATRIX = """\
name: silent
engine: bmoe
binary: /bin/true
models: {m: /m.gguf}
prompt: p
tokens: 4
configs:
  a: ""
"""


@pytest.mark.parametrize("argv", [["run", "m.yaml", "-d", "local"], ["runs"]],
                         ids=["run", "runs"])
def test_a_silent_postgresql_store_is_one_line_and_exit_1(workspace, argv):
    (workspace / "m.yaml").write_text(MATRIX)
    with SilentPeer() as peer:
        url = f"postgresql+psycopg://u@127.0.0.1:{peer.port}/x"
        code, out = orch(*argv, "--db", url)
        assert peer.accepted, "orch never connected"
    assert code == 1, out
    lines = [line for line in out.splitlines() if f"127.0.0.1:{peer.port}" in line]
    assert len(lines) == 1 and "cannot be reached" in lines[0], out
    assert "timeout" in lines[0], out
    assert "Traceback" not in out
    assert not (workspace / "dev-local").exists()   # no device was touched


SSH_AND_ADB = {
    "ssh": ("devices:\n  box: {{kind: ssh, host: 127.0.0.1, port: {port}, user: nobody}}\n",
            "box", "no SSH answer within 10 s"),
    "adb": ("devices:\n  box: {{kind: adb, serial: emulator-5554, adb_port: {port}}}\n",
            "box", "the adb server at 127.0.0.1:{port} did not answer within 30 s"),
}


@pytest.mark.parametrize("kind", sorted(SSH_AND_ADB))
def test_a_silent_ssh_or_adb_peer_is_one_line_and_exit_1(workspace, kind):
    """A device whose SSH port, or whose adb server's port, accepts and never answers: `orch
    run` gives up with one line naming what did not answer, and exit 1 (paramiko's banner
    and auth timeouts, our adb socket timeout), instead of "No existing session" or waiting."""
    inventory, device, words = SSH_AND_ADB[kind]
    (workspace / "m.yaml").write_text(MATRIX)
    with SilentPeer() as peer:
        (workspace / "devices.yaml").write_text(inventory.format(port=peer.port))
        code, out = orch("run", "m.yaml", "-d", device, "-i", str(workspace / "devices.yaml"))
        assert peer.accepted, "orch never connected"
    assert code == 1, out
    lines = [line for line in out.splitlines() if line.strip()]
    assert len(lines) == 1 and words.format(port=peer.port) in lines[0], out
    assert "Traceback" not in out
