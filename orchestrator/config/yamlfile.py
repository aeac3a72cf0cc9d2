"""YAML loading that remembers where each value came from, for error messages with lines."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import yaml
from pydantic import BaseModel, ValidationError


class ConfigError(Exception):
    """A user file (matrix, inventory) is wrong. The message is meant to be printed as is."""


def _line_of(node: yaml.Node | None, loc: Sequence[Any]) -> int | None:
    """Follow a pydantic error location through the YAML node tree; return a 1-based line."""
    line = node.start_mark.line + 1 if node is not None else None
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            found = None
            for key_node, value_node in node.value:
                if str(key_node.value) == str(part):
                    found = value_node
                    line = key_node.start_mark.line + 1
                    break
            if found is None:
                return line
            node = found
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            if part >= len(node.value):
                return line
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            return line
    if node is not None:
        line = node.start_mark.line + 1
    return line


def _describe(error: dict[str, Any]) -> str:
    kind = error.get("type", "")
    if kind == "string_type":
        return "expected a string"
    if kind == "missing":
        return "is required"
    if kind == "extra_forbidden":
        return "is not a known key"
    if kind in ("int_type", "int_parsing"):
        return "expected a whole number"
    if kind in ("float_type", "float_parsing"):
        return "expected a number"
    if kind in ("dict_type", "model_type"):
        return "expected a mapping"
    if kind == "list_type":
        return "expected a list"
    return error.get("msg", "invalid value").removeprefix("Value error, ")


def load_yaml(path: Path) -> tuple[Any, yaml.Node | None, str]:
    """Read a YAML file; return (data, node tree, text). Syntax errors become ConfigError."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text ({exc.reason})") from None
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        raise ConfigError(f"{where}: YAML syntax: {exc.problem}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: YAML syntax: {exc}") from None
    return data, node, text


def validate(model: type[BaseModel], data: Any, node: yaml.Node | None, path: Path,
             context: dict[str, Any] | None = None) -> Any:
    """Validate with pydantic; turn the first errors into `file:line: key.path: message`."""
    try:
        return model.model_validate(data, context=context)
    except ValidationError as exc:
        messages = []
        for error in exc.errors()[:5]:
            loc = [p for p in error["loc"] if not (isinstance(p, str) and p.startswith("function-"))]
            key = ".".join(str(p) for p in loc) or "(top level)"
            line = _line_of(node, loc)
            where = f"{path}:{line}" if line else str(path)
            messages.append(f"{where}: {key}: {_describe(error)}")
        raise ConfigError("\n".join(messages)) from None
