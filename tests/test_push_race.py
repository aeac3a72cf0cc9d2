"""Two pushes of one file to one device at once (docs/reliability.md, "Two runs pushing one
file"): each push writes its own temporary (pid and random in its name), so both succeed and
the destination is one of them whole, with no temporary left; and push_if_changed holds a
lock per device and destination on the controller, so of two pushes of the same file one
sends it and the other finds it there. Local, a real sshd on 127.0.0.1, the emulated phone;
each push on its own connection, as two orch processes would have."""
from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from orchestrator.transports.base import Transport
from orchestrator.transports.local import LocalTransport

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(params=["local", "ssh", "adb"])
def connect(request, tmp_path) -> Iterator[tuple[Callable[[], Transport], Path]]:
    """(a function giving a new connected transport to one device, that device's workdir
    as this test sees it)."""
    opened: list[Transport] = []
    if request.param == "local":
        workdir = str(tmp_path / "dev")

        def make() -> Transport:
            return LocalTransport("local", workdir)
    elif request.param == "ssh":
        from orchestrator.transports.ssh import SshTransport
        sshd = request.getfixturevalue("sshd")
        workdir = str(sshd.dir / f"wd-{uuid.uuid4().hex[:8]}")

        def make() -> Transport:
            return SshTransport("dev1", **{**sshd.transport_kwargs(), "workdir": workdir})
    else:
        from orchestrator.transports.adb import AdbTransport
        phone = request.getfixturevalue("phone")
        workdir = f"{phone.data_dir}/orch-{uuid.uuid4().hex[:8]}"

        def make() -> Transport:
            return AdbTransport("emu", serial=phone.serial, adb_port=phone.adb_port,
                                workdir=workdir)

    def connected() -> Transport:
        transport = make()
        transport.connect()
        opened.append(transport)
        return transport
    try:
        yield connected, Path(workdir)
    finally:
        for transport in opened:
            transport.close()


def _at_once(calls: list[Callable[[], object]]) -> list[object]:
    """Run the calls in threads released together; their results (an exception raises)."""
    start = threading.Barrier(len(calls))
    results: list[object] = [None] * len(calls)

    def run(i: int) -> None:
        start.wait(30)
        try:
            results[i] = calls[i]()
        except BaseException as exc:   # noqa: BLE001 - re-raised in the test's thread
            results[i] = exc
    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not any(thread.is_alive() for thread in threads), "a push never returned"
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results


def _leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if ".orch-tmp" in p.name
                  or ".orch-part" in p.name)


def test_two_puts_at_once_leave_the_destination_whole(connect, tmp_path):
    """Two different files of one size put to one destination at once: both succeed, the
    destination is one of them byte for byte, no temporary is left."""
    make, workdir = connect
    one, two = tmp_path / "one", tmp_path / "two"
    one.write_bytes(os.urandom(3 << 20))
    two.write_bytes(os.urandom(3 << 20))
    first, second = make(), make()
    for _ in range(3):
        _at_once([lambda: first.put(one, f"{workdir}/models/m.gguf"),
                  lambda: second.put(two, f"{workdir}/models/m.gguf")])
        got = (workdir / "models" / "m.gguf").read_bytes()
        assert got in (one.read_bytes(), two.read_bytes())
        assert _leftovers(workdir / "models") == []


def test_two_pushes_of_one_file_send_it_once(connect, tmp_path):
    """push_if_changed of one file from two connections at once: one sends it, the other
    waits for it and finds it there (not a second copy over the link)."""
    make, workdir = connect
    model = tmp_path / "model.gguf"
    model.write_bytes(os.urandom(5 << 20))
    first, second = make(), make()
    pushed = _at_once([lambda: first.push_if_changed(model, f"{workdir}/models/model.gguf"),
                       lambda: second.push_if_changed(model, f"{workdir}/models/model.gguf")])
    assert sorted(pushed) == [False, True]       # type: ignore[type-var]
    assert (workdir / "models" / "model.gguf").read_bytes() == model.read_bytes()
    assert _leftovers(workdir / "models") == []
