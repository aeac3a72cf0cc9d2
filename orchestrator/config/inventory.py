"""The device inventory (`devices.yaml`): which devices exist and how to reach them."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field

from orchestrator.config.yamlfile import ConfigError, load_yaml, validate


class _Entry(BaseModel):
    model_config = ConfigDict(extra="forbid")
    workdir: str | None = None
    description: str | None = None
    # The shell that runs the agent (`sh` on every device; tests also use mksh, dash, bash).
    shell: str = "sh"
    # Environment for agent commands, e.g. a restricted PATH or ORCH_THERMAL_DIR.
    env: dict[str, str] = Field(default_factory=dict)


class LocalEntry(_Entry):
    kind: Literal["local"]


class SshEntry(_Entry):
    kind: Literal["ssh"]
    host: str
    port: int = 22
    user: str | None = None
    key: str | None = None
    known_hosts: str | None = None
    jump: str | None = None


class AdbEntry(_Entry):
    kind: Literal["adb"]
    serial: str
    adb_host: str = "127.0.0.1"
    adb_port: int = 5037


DeviceEntry = Annotated[Union[LocalEntry, SshEntry, AdbEntry], Field(discriminator="kind")]


class InventoryFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    devices: dict[str, DeviceEntry] = Field(default_factory=dict)


DEFAULT_WORKDIRS = {
    "local": "~/.cache/orch/devices/{name}",
    "ssh": "~/.cache/orch",
    "adb": "/data/local/tmp/orch",
}


class Inventory:
    """Named devices. `local` always exists (kind local, default workdir)."""

    def __init__(self, entries: dict[str, BaseModel], source: Path | None = None) -> None:
        self.entries = dict(entries)
        self.source = source
        self.entries.setdefault("local", LocalEntry(kind="local"))

    def names(self) -> list[str]:
        return list(self.entries)

    def get(self, name: str) -> BaseModel:
        try:
            return self.entries[name]
        except KeyError:
            where = f" in {self.source}" if self.source else ""
            known = ", ".join(self.entries)
            raise ConfigError(f"no device named {name!r}{where} (known: {known})") from None

    def workdir(self, name: str) -> str:
        entry = self.get(name)
        if entry.workdir:
            return entry.workdir
        return DEFAULT_WORKDIRS[entry.kind].format(name=name)


def inventory_search_path(explicit: str | None) -> list[Path]:
    if explicit:
        return [Path(explicit)]
    home = Path(os.environ.get("XDG_CONFIG_HOME", Path.home() / ".config"))
    return [Path("devices.yaml"), home / "orch" / "devices.yaml"]


def load_inventory(explicit: str | None = None) -> Inventory:
    """`--inventory FILE`, else ./devices.yaml, else ~/.config/orch/devices.yaml, else only local."""
    for path in inventory_search_path(explicit):
        if path.exists() or explicit:
            data, node, _ = load_yaml(path)
            if data is None:
                data = {}
            if not isinstance(data, dict):
                raise ConfigError(f"{path}:1: expected a mapping with a top-level `devices:` key")
            parsed = validate(InventoryFile, data, node, path)
            return Inventory(parsed.devices, source=path)
    return Inventory({})
