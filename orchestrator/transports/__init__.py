"""Device transports (DESIGN §5): one class per device kind behind one interface."""
from __future__ import annotations

from orchestrator.config.inventory import Inventory
from orchestrator.transports.base import (
    CommandResult,
    LinkLost,
    Transport,
    TransportError,
)

__all__ = ["CommandResult", "LinkLost", "Transport", "TransportError", "open_transport"]


def open_transport(inventory: Inventory, name: str) -> Transport:
    """Build (not yet connect) the transport for a named device of the inventory."""
    entry = inventory.get(name)
    workdir = inventory.workdir(name)
    if entry.kind == "local":
        from orchestrator.transports.local import LocalTransport

        return LocalTransport(name, workdir, shell=entry.shell, env=entry.env)
    if entry.kind == "ssh":
        from orchestrator.transports.ssh import SshTransport

        return SshTransport(name, host=entry.host, port=entry.port, user=entry.user,
                            key=entry.key, known_hosts=entry.known_hosts, workdir=workdir,
                            jump=entry.jump, shell=entry.shell, env=entry.env)
    if entry.kind == "adb":
        from orchestrator.transports.adb import AdbTransport

        return AdbTransport(name, serial=entry.serial, adb_host=entry.adb_host,
                            adb_port=entry.adb_port, workdir=workdir, shell=entry.shell,
                            env=entry.env)
    raise TransportError(f"{name}: unknown device kind {entry.kind!r}")
