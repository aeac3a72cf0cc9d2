"""SshTransport against a real OpenSSH server on 127.0.0.1 (see sshd_fixture.py).

Over 400 lines on purpose: the transport's whole contract against one real sshd.
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import threading
import time
import uuid
from pathlib import Path

import paramiko
import pytest
from waiting import gated_lines, release_gates

from orchestrator.transports.base import (
    CommandTimedOut,
    LinkLost,
    LinkPolicy,
    TransportError,
)
from orchestrator.transports.hostkeys import (
    HostKeyError,
    add_known_host,
    fetch_host_key,
    fingerprint,
)
from orchestrator.transports.ssh import SshTransport

COUNT = "for i in 1 2 3 4 5 6 7 8 9 10; do echo $i; sleep 0.3; done"


def make(server, **overrides) -> SshTransport:
    kwargs = server.transport_kwargs()
    kwargs["workdir"] = str(server.dir / f"wd-{uuid.uuid4().hex[:8]}")  # removed with tmp dirs
    kwargs.update(overrides)
    return SshTransport("dev1", **kwargs)


@pytest.fixture
def ssh(sshd):
    transport = make(sshd)
    transport.connect()
    try:
        yield transport
    finally:
        transport.close()


# -- commands --------------------------------------------------------------------------------
def test_run_rc_stdout_stderr_and_workdir(sshd, ssh):
    result = ssh.run(["sh", "-c", "echo out; echo err >&2; exit 7"])
    assert (result.rc, result.stdout, result.stderr) == (7, b"out\n", b"err\n")
    assert ssh.workdir.startswith(str(sshd.dir)) and Path(ssh.workdir).is_dir()
    assert ssh.run(["pwd"]).stdout.decode().strip() == ssh.workdir
    assert ssh.run(["no-such-program-orch"]).rc == 127
    # a command killed by a signal reports 128+N (sshd's exit-signal would be lost in paramiko)
    assert ssh.run(["sh", "-c", "kill -KILL $$"]).rc == 137
    assert ssh.run(["cat"]).stdout == b""  # stdin is closed: nothing waits for input
    assert ssh.kind == "ssh" and "127.0.0.1" in ssh.describe()


def test_workdir_tilde_is_resolved_against_remote_home(sshd):
    name = f".cache/orch-test-{uuid.uuid4().hex[:8]}"
    with make(sshd, workdir=f"~/{name}") as transport:
        home = transport.run(["sh", "-c", 'printf %s "$HOME"']).stdout.decode()
        assert transport.workdir == f"{home}/{name}"
        assert transport.run(["test", "-d", transport.workdir]).rc == 0
        transport.run(["rmdir", transport.workdir])


ODD_ARGS = ["plain", "", " two  spaces ", "it's", 'say "hi"', "$HOME", "${PATH}", "`id`",
            "$(id)", "line1\nline2\n", "tab\there", "back\\slash\\", "*", "~", "a;b&&c|d",
            "# not a comment", "!event", "-n", "--", "ü日本語🙂", "'\"'\"'", "\r\n"]


@pytest.mark.slow
def test_argv_arrives_byte_exact(ssh):
    for arg in ODD_ARGS:
        assert ssh.run(["printf", "%s", arg]).stdout == arg.encode(), arg
    # all at once, as separate argv elements, NUL-terminated by the remote printf
    result = ssh.run(["printf", "%s\\0", *ODD_ARGS])
    assert result.stdout.split(b"\0")[:-1] == [a.encode() for a in ODD_ARGS]


def test_run_timeout_leaves_the_transport_usable(ssh):
    with pytest.raises(CommandTimedOut):   # raised: the run did not wait for the command's end
        ssh.run(["sleep", "5"], timeout=0.5)
    assert ssh.run(["echo", "ok"]).stdout == b"ok\n"


# -- files -----------------------------------------------------------------------------------
def test_put_get_put_bytes_and_progress(ssh, tmp_path):
    local = tmp_path / "blob"
    data = os.urandom(3 * 1024 * 1024 + 17)
    local.write_bytes(data)
    seen = []
    ssh.put(local, "sub/dir/blob", mode=0o640, progress=lambda d, t: seen.append((d, t)))
    assert ssh.get_bytes("sub/dir/blob") == data
    remote = Path(ssh.workdir, "sub/dir/blob")
    assert remote.stat().st_mode & 0o777 == 0o640
    assert seen[-1] == (len(data), len(data)) and len(seen) > 10
    assert not Path(f"{remote}.orch-part").exists()
    ssh.put_bytes("ü\n\0x".encode(), "job/args/000", mode=0o600)
    assert ssh.get_bytes(f"{ssh.workdir}/job/args/000") == "ü\n\0x".encode()
    assert Path(ssh.workdir, "job/args/000").stat().st_mode & 0o777 == 0o600
    with pytest.raises(FileNotFoundError):
        ssh.get_bytes("missing")
    with pytest.raises(TransportError):  # also a TransportError, like the local transport's
        ssh.get_bytes("missing")


@pytest.mark.slow
def test_files_without_sftp_subsystem(sshd_factory, tmp_path):
    server = sshd_factory(sftp=False)
    with make(server) as transport:
        local = tmp_path / "blob"
        data = os.urandom(1024 * 1024 + 3)
        local.write_bytes(data)
        seen = []
        transport.put(local, "a/b/blob", mode=0o600, progress=lambda d, t: seen.append((d, t)))
        assert transport._sftp_ok is False  # really took the exec path
        assert transport.get_bytes("a/b/blob") == data
        assert Path(transport.workdir, "a/b/blob").stat().st_mode & 0o777 == 0o600
        assert seen[-1] == (len(data), len(data))
        transport.put_bytes(b"x'y\n", "c/d")
        assert transport.get_bytes("c/d") == b"x'y\n"
        with pytest.raises(FileNotFoundError):
            transport.get_bytes("missing")
        with pytest.raises(TransportError):
            transport.get_bytes("missing")
        assert transport.push_if_changed(local, "a/b/blob") is False


# -- remote sha256 cache ---------------------------------------------------------------------
def test_remote_sha256_cache(ssh):
    path = Path(ssh.workdir, "model.bin")
    path.write_bytes(os.urandom(200_000))
    real = hashlib.sha256(path.read_bytes()).hexdigest()
    old = time.time() - 100
    os.utime(path, (old, old))
    cache = Path(f"{path}.orch-sha256")

    assert ssh.remote_sha256("model.bin") == real and ssh.last_sha256_source == "computed"
    st = path.stat()
    assert cache.read_text() == f"{st.st_size} {int(st.st_mtime)} {real}\n"
    # a forged cache with matching size+mtime is believed: proof that sha256sum did not run
    cache.write_text(f"{st.st_size} {int(st.st_mtime)} {'f' * 64}\n")
    assert ssh.remote_sha256("model.bin") == "f" * 64 and ssh.last_sha256_source == "cached"
    # an mtime change invalidates it
    os.utime(path, (old + 1, old + 1))
    assert ssh.remote_sha256("model.bin") == real and ssh.last_sha256_source == "computed"
    assert cache.read_text().split()[2] == real
    # a size change too
    with open(path, "ab") as handle:
        handle.write(b"more")
    os.utime(path, (old + 1, old + 1))
    assert ssh.remote_sha256("model.bin") == hashlib.sha256(path.read_bytes()).hexdigest()
    # a file modified within the last 2 s is hashed but not cached (same-second rewrites)
    fresh = Path(ssh.workdir, "fresh.bin")
    fresh.write_bytes(b"abc")
    assert ssh.remote_sha256("fresh.bin") == hashlib.sha256(b"abc").hexdigest()
    assert not Path(f"{fresh}.orch-sha256").exists()
    assert ssh.remote_sha256("nothing-here") is None


def test_push_if_changed(ssh, tmp_path):
    local = tmp_path / "agent.sh"
    local.write_bytes(b"echo one\n")
    assert ssh.push_if_changed(local, "agent.sh") is True
    cache = Path(ssh.workdir, "agent.sh.orch-sha256")
    assert cache.read_text().split()[2] == hashlib.sha256(b"echo one\n").hexdigest()
    assert ssh.push_if_changed(local, "agent.sh") is False
    assert ssh.last_sha256_source == "cached"
    local.write_bytes(b"echo two\n")  # same size, new content
    assert ssh.push_if_changed(local, "agent.sh") is True
    assert ssh.get_bytes("agent.sh") == b"echo two\n"
    local.write_bytes(b"echo three\n")  # other size: pushed without asking for a remote hash
    ssh.last_sha256_source = "untouched"
    assert ssh.push_if_changed(local, "agent.sh") is True
    assert ssh.last_sha256_source == "untouched"


# -- streaming and link loss -----------------------------------------------------------------
def test_stream_arrives_incrementally(ssh, tmp_path):
    # line i+1 is printed only after this test has received line i (waiting.gated_lines)
    gate, data = str(tmp_path / "gate"), b""
    for chunk in ssh.stream(["sh", "-c", gated_lines(gate, 10)]):
        data += chunk
        release_gates(gate, data)
    assert data == b"".join(b"line%d\n" % i for i in range(1, 11))


def test_stream_returns_exit_status_and_keeps_stderr_out(ssh):
    def consume(gen):
        out = b""
        while True:
            try:
                out += next(gen)
            except StopIteration as stop:
                return out, stop.value
    out, rc = consume(ssh.stream(["sh", "-c", "echo a; echo oops >&2; exit 3"]))
    assert (out, rc) == (b"a\n", 3)
    assert ssh.last_stderr == b"oops\n"


def test_stream_abandoned_early_closes_its_channel(ssh):
    stream = ssh.stream(["sh", "-c", COUNT])
    assert next(stream).startswith(b"1")
    stream.close()
    assert ssh.run(["echo", "next"]).stdout == b"next\n"


def test_kill_connection_mid_stream_raises_linklost_then_reconnects(sshd, ssh):
    got = b""
    with pytest.raises(LinkLost):
        for chunk in ssh.stream(["sh", "-c", COUNT]):
            got += chunk
            if got.count(b"\n") == 3:
                assert sshd.kill_connections()
    # noticed before the command would have ended by itself (its last line never came)
    assert got.startswith(b"1\n2\n3\n") and b"10\n" not in got
    # the next call reconnects by itself
    assert ssh.run(["echo", "back"]).stdout == b"back\n"


@pytest.mark.slow
def test_hung_link_is_noticed_by_keepalive_probe(sshd):
    transport = make(sshd, dead_after=1.0)
    transport.connect()
    # a bound, not a check: a probe that never gives up sees the stream go on once this
    # resumes the server, and the test fails on the missing LinkLost instead of hanging
    unhang = threading.Timer(30, sshd.resume_connections)
    try:
        with pytest.raises(LinkLost):
            for chunk in transport.stream(["sh", "-c", COUNT]):
                if chunk.startswith(b"1") and not unhang.ident:   # once: "10" starts with 1 too
                    paused = sshd.pause_connections()
                    assert paused
                    unhang.start()
    finally:
        unhang.cancel()
        sshd.resume_connections()
    assert transport.run(["echo", "back"]).stdout == b"back\n"
    transport.close()


@pytest.mark.slow
def test_reconnect_with_backoff_when_device_is_down(sshd):
    transport = make(sshd, connect_timeout=2)
    transport.link = LinkPolicy(grace_s=1.0)  # what `orch run --link-grace 1` sets
    transport.connect()
    attempts: list[str] = []
    come_back_after: list[int] = []   # the device is back once this many attempts failed
    real_connect = transport.connect

    def connect() -> None:   # every connection attempt of reconnect()'s backoff
        try:
            real_connect()
        except TransportError:
            attempts.append("failed")
            if come_back_after and len(attempts) == come_back_after[0]:
                sshd.start()
            raise
        attempts.append("ok")
    transport.connect = connect
    sshd.stop()
    try:
        with pytest.raises(TransportError) as info:
            transport.run(["true"])  # link gone, sshd down: bounded retries, then an error
        assert not isinstance(info.value, HostKeyError)
        assert len(attempts) >= 2 and set(attempts) == {"failed"}, attempts   # retried
        with pytest.raises(TransportError, match="no connection within"):
            transport.reconnect(0.6)
        attempts.clear()
        come_back_after.append(1)     # sshd starts again when the first attempt has failed
        transport.reconnect(15)
        assert attempts[0] == "failed" and attempts[-1] == "ok", attempts  # the backoff got it
        assert transport.run(["echo", "up"]).stdout == b"up\n"
    finally:
        sshd.start()  # no-op when already running
        transport.close()


def test_jump_host(sshd):
    jump = f"{sshd.user}@{sshd.host}:{sshd.port}"
    with make(sshd, jump=jump) as transport:
        assert transport.run(["echo", "via jump"]).stdout == b"via jump\n"


# -- host keys -------------------------------------------------------------------------------
def test_unknown_host_key_is_rejected_with_trust_hint(sshd, tmp_path):
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    with pytest.raises(HostKeyError) as info:
        make(sshd, known_hosts=str(empty)).connect()
    message = str(info.value)
    assert f"127.0.0.1:{sshd.port}" in message and "orch devices trust dev1" in message
    assert empty.read_text() == ""  # nothing was added behind our back


def test_default_known_hosts_is_the_users(sshd, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.ssh/known_hosts there
    with pytest.raises(HostKeyError, match="not known"):
        make(sshd, known_hosts=None).connect()
    (tmp_path / ".ssh").mkdir()
    (tmp_path / ".ssh/known_hosts").write_text(sshd.known_hosts.read_text())
    with make(sshd, known_hosts=None) as transport:
        assert transport.run(["true"]).rc == 0


def _openssh_fingerprint(pub: Path) -> str:
    out = subprocess.run(["ssh-keygen", "-l", "-E", "sha256", "-f", str(pub)],
                         capture_output=True, text=True, check=True).stdout
    return out.split()[1]


def test_changed_host_key_is_rejected(sshd, tmp_path):
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "other")],
                   check=True)
    other = " ".join((tmp_path / "other.pub").read_text().split()[:2])
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.1]:{sshd.port} {other}\n")
    with pytest.raises(HostKeyError) as info:
        make(sshd, known_hosts=str(known)).connect()
    message = str(info.value)
    assert "CHANGED" in message and f"127.0.0.1:{sshd.port}" in message
    assert _openssh_fingerprint(tmp_path / "other.pub") in message  # expected
    assert _openssh_fingerprint(Path(f"{sshd.host_key}.pub")) in message  # offered


def test_fetch_host_key_then_trust_then_connect(sshd, tmp_path):
    key = fetch_host_key(sshd.host, sshd.port, timeout=5)
    assert fingerprint(key) == _openssh_fingerprint(Path(f"{sshd.host_key}.pub"))
    known = tmp_path / "sub" / "known_hosts"
    assert add_known_host(known, sshd.host, sshd.port, key) is True
    assert add_known_host(known, sshd.host, sshd.port, key) is False  # no duplicate
    assert known.read_text() == f"[127.0.0.1]:{sshd.port} {sshd.host_pub}\n"
    with make(sshd, known_hosts=str(known)) as transport:
        assert transport.run(["true"]).rc == 0
    # a different key for the same host is only written deliberately
    other = paramiko.Ed25519Key.from_private_key_file(str(sshd.key))
    with pytest.raises(HostKeyError):
        add_known_host(known, sshd.host, sshd.port, other)
    assert add_known_host(known, sshd.host, sshd.port, other, replace=True) is True
    assert known.read_text().count("\n") == 1 and other.get_base64() in known.read_text()
    assert add_known_host(known, "example.org", 22, key) is True
    assert f"\nexample.org {sshd.host_pub}\n" in known.read_text()


def test_hashed_known_hosts_entries_are_understood(sshd, tmp_path):
    known = tmp_path / "known_hosts"
    known.write_text(sshd.known_hosts.read_text())
    subprocess.run(["ssh-keygen", "-H", "-f", str(known)], check=True, capture_output=True)
    assert known.read_text().startswith("|1|")
    with make(sshd, known_hosts=str(known)) as transport:
        assert transport.run(["true"]).rc == 0
    key = fetch_host_key(sshd.host, sshd.port)
    assert add_known_host(known, sshd.host, sshd.port, key) is False


def test_fetch_host_key_unreachable():
    with pytest.raises(TransportError):
        fetch_host_key("127.0.0.1", 1, timeout=2)


def test_password_from_env_is_not_kept(sshd, monkeypatch):
    monkeypatch.setenv("ORCH_SSH_PASSWORD", "s3cret-pw")
    with make(sshd) as transport:  # key auth still works; the password is not stored
        assert transport.run(["true"]).rc == 0
        assert "s3cret-pw" not in repr(vars(transport))
        assert "s3cret-pw" not in repr(vars(transport._conn))


# -- a noisy, slow login shell ---------------------------------------------------------------
@pytest.mark.slow
def test_noisy_rc_files_do_not_reach_callers(sshd_factory, tmp_path):
    """Debian's bash reads ~/.bashrc even for `ssh host cmd`. sshd's SetEnv HOME=... makes the
    login shell read our rc file instead of root's (which we must not touch)."""
    home = tmp_path / "home"
    home.mkdir()
    (home / ".bashrc").write_text("echo RC-NOISE-OUT; echo RC-NOISE-ERR >&2; printf 'no newline'\n"
                                  "sleep 0.2\n")
    server = sshd_factory(setenv={"HOME": str(home)})
    plain = subprocess.run(["ssh", "-i", str(server.key), "-p", str(server.port),
                            "-o", "BatchMode=yes", "-o", f"UserKnownHostsFile={server.known_hosts}",
                            f"{server.user}@{server.host}", "echo out"],
                           capture_output=True, timeout=30)
    assert plain.stdout == b"RC-NOISE-OUT\nno newlineout\n"  # the noise is real
    assert b"RC-NOISE-ERR" in plain.stderr
    with make(server, workdir="~/wd") as transport:
        assert transport.workdir == f"{home}/wd"
        result = transport.run(["sh", "-c", "echo out; echo err >&2"])
        assert (result.stdout, result.stderr) == (b"out\n", b"err\n")
        assert b"".join(transport.stream(["printf", "%s", "a\nb"])) == b"a\nb"
        transport.put_bytes(b"data", "f")
        assert transport.get_bytes("f") == b"data"
        assert transport.remote_sha256("f") == hashlib.sha256(b"data").hexdigest()


@pytest.mark.slow
def test_large_push_goes_through_scp_and_falls_back_to_sftp(sshd, tmp_path, monkeypatch):
    """Files of 64 MiB and more go through OpenSSH's scp (same key, strict known_hosts, no
    ~/.ssh/config); without scp, SFTP. Both byte-exact, with progress and the sha256 cache."""
    from orchestrator.transports import ssh_files as sshmod

    big = tmp_path / "big.bin"
    with open(big, "wb") as handle:
        block = os.urandom(1 << 20)
        for i in range(65):
            handle.write(block[:-1] + bytes([i]))
    t = SshTransport("t", workdir=str(tmp_path / "wd"), **sshd.transport_kwargs())
    t.connect()
    try:
        seen: list[tuple[int, int]] = []
        assert t.push_if_changed(big, "m/big.bin", 0o600, lambda d, n: seen.append((d, n)))
        assert t.last_put_method == "scp"
        landed = tmp_path / "wd" / "m" / "big.bin"
        assert landed.read_bytes() == big.read_bytes() and (landed.stat().st_mode & 0o777) == 0o600
        assert seen and seen[-1] == (big.stat().st_size, big.stat().st_size)
        assert not t.push_if_changed(big, "m/big.bin")          # unchanged: not pushed again
        monkeypatch.setattr(sshmod.shutil, "which", lambda name: None)
        assert t.push_if_changed(big, "m/other.bin")
        assert t.last_put_method == "sftp"
        assert (tmp_path / "wd" / "m" / "other.bin").read_bytes() == big.read_bytes()
    finally:
        t.close()
