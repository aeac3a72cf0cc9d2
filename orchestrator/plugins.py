"""Engines and device kinds are plugins: named by entry points of installed distributions
(groups `orch.engines` and `orch.transports`). orch's own register in its pyproject.toml the
same way a third-party package does (docs/plugins.md).

- `orch.engines`: NAME = "module:Callable" returning an EngineAdapter, usually the adapter
  class. It is called with `name=` (the matrix's engine name: one class can serve several
  names) when it has a parameter `name`, and `options=` (the matrix's engine_options) when it
  has one called `options`.
- `orch.transports`: KIND = "module:TransportClass", a Transport subclass whose `kind` is KIND
  (it brings its inventory entry model, default workdir and address text, see
  transports/base.py).

The entry points are read once per process; a plugin's module is imported when its name is
first used, so a broken plugin only matters to the matrices and inventories that name it.
"""
from __future__ import annotations

import inspect
from functools import cache
from collections.abc import Mapping
from importlib.metadata import EntryPoint, entry_points
from typing import TYPE_CHECKING, Any

from orchestrator.errors import ConfigError

if TYPE_CHECKING:
    from orchestrator.engines.base import EngineAdapter
    from orchestrator.transports.base import Transport

ENGINES = "orch.engines"
TRANSPORTS = "orch.transports"
_WHAT = {ENGINES: "engine", TRANSPORTS: "device kind"}


class UnknownPlugin(KeyError):
    """No installed plugin has this name; the message lists the names that exist."""

    def __str__(self) -> str:  # KeyError would print the message in quotes
        return str(self.args[0])


class PluginError(ConfigError):
    """A plugin is registered but cannot be used (import failed, wrong kind of object)."""


def _origin(point: EntryPoint) -> str:
    dist = getattr(point, "dist", None)
    return f" (from {dist.name} {dist.version})" if dist is not None else ""


@cache
def _registry(group: str) -> dict[str, EntryPoint]:
    found: dict[str, EntryPoint] = {}
    for point in entry_points(group=group):
        other = found.get(point.name)
        if other is not None and other.value != point.value:
            raise PluginError(f"{_WHAT[group]} {point.name!r} is registered twice: "
                              f"{other.value}{_origin(other)} and {point.value}{_origin(point)}")
        found[point.name] = point
    return found


def names(group: str) -> list[str]:
    """Every registered name of the group, sorted."""
    return sorted(_registry(group))


def _unknown(group: str, name: str) -> UnknownPlugin:
    known = ", ".join(names(group)) or "none: is orch installed (pip install -e .)?"
    return UnknownPlugin(f"unknown {_WHAT[group]} {name!r} (known: {known})")


@cache
def load(group: str, name: str) -> Any:
    """The object a registered entry point names; UnknownPlugin or PluginError otherwise."""
    point = _registry(group).get(name)
    if point is None:
        raise _unknown(group, name)
    try:
        return point.load()
    except Exception as exc:  # noqa: BLE001 - any import-time failure of third-party code
        raise PluginError(f"{group} entry point {point.name} = {point.value}{_origin(point)} "
                          f"cannot be loaded: {type(exc).__name__}: {exc}") from exc


def engine_names() -> list[str]:
    return names(ENGINES)


def get_adapter(name: str, options: dict | None = None) -> "EngineAdapter":
    """The adapter of engine `name` for a matrix with these engine_options (may be None). An
    unknown name raises UnknownPlugin (a KeyError listing the known ones), a bad option
    ValueError naming the key (the adapter's own check), a plugin that cannot be imported
    PluginError (a ConfigError)."""
    from orchestrator.engines.base import EngineAdapter

    factory = load(ENGINES, name)
    try:
        params: Mapping[str, inspect.Parameter] = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        params = {}
    kwargs: dict[str, Any] = {}
    if "name" in params:
        kwargs["name"] = name
    if "options" in params:
        kwargs["options"] = options
    adapter = factory(**kwargs)
    if not isinstance(adapter, EngineAdapter):
        raise PluginError(f"{ENGINES} entry point {name} made a {type(adapter).__name__}, "
                          f"not an EngineAdapter")
    return adapter


def device_kind_names() -> list[str]:
    return names(TRANSPORTS)


def device_kind(kind: str) -> "type[Transport]":
    """The Transport class of a device kind."""
    from orchestrator.transports.base import Transport

    cls = load(TRANSPORTS, kind)
    if not (isinstance(cls, type) and issubclass(cls, Transport)):
        raise PluginError(f"{TRANSPORTS} entry point {kind} names {cls!r}, not a Transport class")
    if cls.kind != kind:
        raise PluginError(f"{TRANSPORTS} entry point {kind} names {cls.__name__}, whose kind "
                          f"is {cls.kind!r}")
    return cls
