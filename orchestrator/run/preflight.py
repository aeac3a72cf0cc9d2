"""What `orch run` and `orch lab submit` check before they open the store or a device: the
engine and its options, every cell's argv, the devices named. A ConfigError here (exit 2)
leaves nothing behind (no database file, no device row). The size question is the CLI's
(cli/preflight.py), since only it may ask at a terminal."""
from __future__ import annotations

import shlex

from orchestrator.config.configs import expand_config_specs
from orchestrator.config.inventory import Inventory
from orchestrator.config.matrix import LoadedMatrix
from orchestrator.config.yamlfile import line_of, node_tree
from orchestrator.errors import ConfigError


def _at(loaded: LoadedMatrix, *loc: str) -> str:
    line = line_of(node_tree(loaded.text), loc)
    return f"{loaded.path}:{line}" if line else loaded.path


def check_engine(loaded: LoadedMatrix) -> None:
    """The engine exists, its engine_options validate, and it can build the argv of every
    (model, config): `bmoe` without models, a generic argv naming {model} without one, a
    NUL in a model path are refused here, not found by the first cell."""
    from orchestrator.engines.base import CellSpec
    from orchestrator.plugins import PluginError, UnknownPlugin, get_adapter

    matrix = loaded.matrix
    try:
        adapter = get_adapter(matrix.engine, matrix.engine_options)
    except UnknownPlugin as exc:
        raise ConfigError(f"{_at(loaded, 'engine')}: engine: {exc}") from None
    except PluginError as exc:
        raise ConfigError(f"{_at(loaded, 'engine')}: engine: {exc}") from None
    except (ValueError, TypeError) as exc:
        # the line of the key named first (`engine_options.KEY: ...`), else of engine_options
        key = str(exc).removeprefix("engine_options.").split(":", 1)[0].split(".", 1)[0]
        loc = ("engine_options", key) if key in matrix.engine_options else ("engine_options",)
        raise ConfigError(f"{_at(loaded, *loc)}: {exc}") from None
    spec = matrix.binary
    if (spec is None or spec.device == "builtin") and adapter.builtin_binary() is None \
            and not matrix.builds:
        raise ConfigError(f"{_at(loaded, 'engine')}: engine {matrix.engine!r} needs `binary:` "
                          f"(a path on the device, or `local: FILE` to push)")
    models: list[tuple[str, str | None]] = [
        (name, spec if isinstance(spec, str) else spec.local)
        for name, spec in matrix.models.items()] or [("-", None)]
    for model, path in models:
        for name, flags, trace in expand_config_specs(matrix):
            cell = CellSpec(binary="ENGINE", model_path=path, prompt=loaded.prompt_text,
                            tokens=matrix.tokens, flags=shlex.split(flags),
                            csv_path="/job/tokens.csv",
                            extra={"workdir": "/workdir", **matrix.engine_options},
                            route_trace_path="/job/route.trace" if trace else None)
            try:
                argv = adapter.build_argv(cell)
            except (ValueError, KeyError, TypeError) as exc:
                where = _at(loaded, "models" if matrix.models else "engine")
                raise ConfigError(f"{where}: engine {matrix.engine!r}, model {model}, "
                                  f"config {name}: {exc}") from None
            if any("\0" in str(element) for element in argv):
                raise ConfigError(f"{_at(loaded, 'models')}: model {model}, config {name}: "
                                  f"an argv element contains a NUL byte")


def device_names(inv: Inventory, devices: tuple[str, ...]) -> list[str]:
    """The devices a run uses (`all`: every inventory device), each one known."""
    names = inv.names() if devices == ("all",) else list(dict.fromkeys(devices))
    for name in names:
        inv.get(name)
    return names
