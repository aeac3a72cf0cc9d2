"""SSH host keys: strict checking's helpers, and `orch devices trust`'s fetch-and-add.

fabric accepts every host key by default (AutoAddPolicy); orch never does. Keys are shown as
OpenSSH does (SHA256:base64) so a user can compare them with `ssh-keygen -lf` on the machine.
"""
from __future__ import annotations

import base64
import hashlib
import os
import socket
from pathlib import Path

import paramiko

from orchestrator.transports.base import AccessDenied, TransportError

_NET = (paramiko.SSHException, OSError, EOFError)


class HostKeyError(AccessDenied):
    """The device's host key is unknown or has changed."""


def fingerprint(key: paramiko.PKey) -> str:
    """OpenSSH-style: SHA256:<unpadded base64 of the key blob's sha256>."""
    return "SHA256:" + base64.b64encode(hashlib.sha256(key.asbytes()).digest()).decode().rstrip("=")


def known_hosts_name(host: str, port: int = 22) -> str:
    return host if int(port) == 22 else f"[{host}]:{port}"


def fetch_host_key(host: str, port: int = 22, timeout: float = 10.0) -> paramiko.PKey:
    """The key the server offers during key exchange; nothing is trusted or authenticated."""
    try:
        sock = socket.create_connection((host, port), timeout=timeout)
    except OSError as exc:
        raise TransportError(f"cannot reach {host}:{port}: {exc}") from exc
    transport = paramiko.Transport(sock)
    try:
        transport.start_client(timeout=timeout)
        return transport.get_remote_server_key()
    except _NET as exc:
        raise TransportError(f"no SSH key exchange with {host}:{port}: {exc}") from exc
    finally:
        transport.close()


def add_known_host(path: str | Path, host: str, port: int, key: paramiko.PKey,
                   replace: bool = False) -> bool:
    """Trust `key` for host:port in an OpenSSH known_hosts file; False if it already was.
    A different key listed for that host (plain or hashed) is an error unless `replace`."""
    path, name = Path(path).expanduser(), known_hosts_name(host, port)
    kept: list[str] = []
    for line in path.read_text().splitlines() if path.exists() else []:
        try:
            entry = paramiko.hostkeys.HostKeyEntry.from_line(line)
        except (paramiko.SSHException, ValueError):
            entry = None
        if entry and entry.key and any(p == name or (p.startswith("|1|") and
                                       paramiko.HostKeys.hash_host(name, p) == p)
                                       for p in entry.hostnames):
            if entry.key == key:
                return False
            if not replace:
                raise HostKeyError(f"{path} already has another key for {name} "
                                   f"({fingerprint(entry.key)}); replace it deliberately")
            continue
        kept.append(line + "\n")
    kept.append(f"{name} {key.get_name()} {key.get_base64()}\n")
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".orch-tmp")
    tmp.write_text("".join(kept))
    os.chmod(tmp, path.stat().st_mode & 0o777 if path.exists() else 0o644)
    os.replace(tmp, path)
    return True


class _Unknown(paramiko.SSHException):
    def __init__(self, hostname: str, key: paramiko.PKey) -> None:
        super().__init__(f"{hostname} not found in known_hosts")
        self.hostname, self.key = hostname, key


class _RejectUnknown(paramiko.RejectPolicy):
    def missing_host_key(self, client, hostname, key):
        raise _Unknown(hostname, key)
