"""The device inventory (`devices.yaml`): which devices exist and how to reach them.

Each device kind (an `orch.transports` plugin, orchestrator/plugins.py) brings its own entry
model: an entry's `kind` is checked first, then the entry against that kind's model, so every
error reads `file:line: devices.NAME.key: ...`."""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from orchestrator.config.matrix_values import parse_duration
from orchestrator.config.workdirs import workdir_problems
from orchestrator.config.yamlfile import (
    Problems,
    errors_at,
    load_yaml,
    validate,
)
from orchestrator.errors import ConfigError, NotFound
from orchestrator.plugins import device_kind, device_kind_names
from orchestrator.transports.base import DeviceEntry, Transport


class _Kind(BaseModel):
    """An entry's `kind` alone, checked against the installed device kinds."""

    kind: str

    @field_validator("kind")
    @classmethod
    def _known(cls, kind: str) -> str:
        if kind not in device_kind_names():
            raise ValueError(f"unknown device kind {kind!r} (known: "
                             f"{', '.join(device_kind_names())})")
        return kind


def _entry(value: Any) -> Any:
    if isinstance(value, DeviceEntry) or not isinstance(value, dict):
        return value  # not a mapping: DeviceEntry's own check says "expected a mapping"
    kind = _Kind.model_validate(value).kind
    return device_kind(kind).entry_model.model_validate(value)


# A device name becomes a path component (the local workdir, job directories): no `/`, no
# `..`, nothing a shell or a file system treats specially.
DEVICE_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*")   # a full match: fullmatch


def entry_problems(name: str, entry: DeviceEntry) -> Problems:
    """What the transports' own models leave open: the device name, every `*port` field
    within 1..65535, `env` names and values an exec can carry, and a workdir that is
    absolute (or under ~) with no `..` component."""
    problems: Problems = []
    if not DEVICE_NAME.fullmatch(name):
        problems.append((("devices", name), (f"device name {name!r}: use letters, digits and "
                                             ". _ - only, not starting with a dot")))
    for key, value in entry.model_dump().items():
        if key.endswith("port") and isinstance(value, int) and not 1 <= value <= 65535:
            problems.append((("devices", name, key), f"{value} is not a port (1..65535)"))
    for key, value in (getattr(entry, "env", None) or {}).items():
        # what execve and `env KEY=VALUE` cannot carry: found here, not after the store
        # and the device row are written
        if not key or "=" in key or "\0" in key:
            problems.append((("devices", name, "env", key),
                             "a variable name must be non-empty, without `=` or NUL"))
        elif "\0" in str(value):
            problems.append((("devices", name, "env", key), "the value contains a NUL byte"))
    workdir = entry.workdir
    if workdir is not None:
        if not workdir.startswith(("/", "~")):
            problems.append((("devices", name, "workdir"), "must be absolute (/...) or under ~"))
        elif ".." in workdir.split("/") or any(c in workdir for c in "\0\n\r"):
            problems.append((("devices", name, "workdir"),
                             "must not contain `..`, a newline or NUL"))
    return problems


class LabAlerts(BaseModel):
    """The inventory's `lab:` key: where the lab's watcher (`orch lab worker`, lab/watch.py)
    posts its alerts (docs/lab.md, docs/regressions.md)."""

    model_config = ConfigDict(extra="forbid")
    webhook: str | None = None        # http(s) URL the JSON of each event is POSTed to
    site_url: str | None = None       # where `orch site` is published: links in the JSON
    silent_after: float = 7200.0      # a device with queued work and no cell ended this long
    webhook_timeout: float = 5.0      # seconds for one POST, connect and answer

    @field_validator("webhook", "site_url")
    @classmethod
    def _http(cls, url: str | None) -> str | None:
        if url is not None and not re.match(r"https?://[^/\s]+", url):
            raise ValueError(f"{url!r}: an http:// or https:// URL")
        return url

    @field_validator("silent_after", "webhook_timeout", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> float:
        seconds = parse_duration(value)
        if seconds <= 0:
            raise ValueError("must be above 0")
        return seconds


class InventoryFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    devices: dict[str, Annotated[DeviceEntry, BeforeValidator(_entry)]] = \
        Field(default_factory=dict)
    lab: LabAlerts = Field(default_factory=LabAlerts)

    @model_validator(mode="after")
    def _confined(self) -> InventoryFile:
        problems = [p for name, entry in self.devices.items() for p in entry_problems(name, entry)]
        if not problems:
            # the implicit `local` (Inventory) counts too: a workdir may hold its default one
            devices = [(name, entry, entry.workdir or device_kind(entry.kind).workdir_for(name))
                       for name, entry in {**_implicit(), **self.devices}.items()]
            problems = [(("devices", name, "workdir"), message) for name, message
                        in workdir_problems(devices, listed=self.devices)]
        if problems:
            raise errors_at(self, problems)
        return self


def _implicit() -> dict[str, DeviceEntry]:
    """The devices every inventory has, its file naming them or not."""
    return {"local": device_kind("local").entry_model(kind="local")}


class Inventory:
    """Named devices. `local` always exists (kind local, default workdir)."""

    def __init__(self, entries: dict[str, DeviceEntry], source: Path | None = None,
                 lab: LabAlerts | None = None) -> None:
        self.entries = dict(entries)
        self.source = source
        self.lab = lab or LabAlerts()
        for name, entry in _implicit().items():
            self.entries.setdefault(name, entry)

    def names(self) -> list[str]:
        return list(self.entries)

    def get(self, name: str) -> DeviceEntry:
        try:
            return self.entries[name]
        except KeyError:
            where = f" in {self.source}" if self.source else ""
            known = ", ".join(self.entries)
            raise NotFound(f"no device named {name!r}{where} (known: {known})") from None

    def workdir(self, name: str) -> str:
        entry = self.get(name)
        if entry.workdir:
            return entry.workdir
        return device_kind(entry.kind).workdir_for(name)


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
            return Inventory(parsed.devices, source=path, lab=parsed.lab)
    return Inventory({})


def open_transport(inventory: Inventory, name: str) -> Transport:
    """Build (not yet connect) the transport for a named device of the inventory."""
    entry = inventory.get(name)
    return device_kind(entry.kind).from_entry(name, entry, inventory.workdir(name))
