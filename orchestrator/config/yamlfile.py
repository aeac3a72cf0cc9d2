"""YAML loading that remembers where each value came from, for error messages with lines."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import yaml
from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails, InitErrorDetails, PydanticCustomError

from orchestrator.config.local_files import NotRegular, read_regular
from orchestrator.errors import ConfigError

_MERGE = "tag:yaml.org,2002:merge"
# The largest matrix, inventory or design orch reads: far beyond any written by hand or by a
# generator (a 1,000-config grid is a few hundred kB), far below a memory's worth.
MAX_YAML = 16 << 20

# What a cross-key check found: (key path, message) per problem.
Problems = list[tuple[tuple[str | int, ...], str]]


class DuplicateKey(yaml.MarkedYAMLError):
    """A mapping names the same key twice (PyYAML would silently keep the last one)."""

    def __init__(self, key_path: str, first: yaml.Node, again: yaml.Node) -> None:
        super().__init__(problem=f"duplicate key (first at line {first.start_mark.line + 1})",
                         problem_mark=again.start_mark)
        self.key_path = key_path


def _value_at(source: Any, loc: tuple[str | int, ...]) -> Any:
    """The value a key path names (an error's `input`)."""
    for part in loc:
        if isinstance(source, BaseModel):
            source = getattr(source, str(part), None)
        elif isinstance(source, dict):
            source = source.get(part)
        elif isinstance(source, list) and isinstance(part, int) and part < len(source):
            source = source[part]
        else:
            return None
    return source


def errors_at(model: BaseModel, problems: Problems) -> ValidationError:
    """A ValidationError whose errors sit at the given key paths of `model`. Raised from a
    model validator, pydantic keeps these locations (prefixed by the enclosing field's), so
    `validate` can name the line; a plain ValueError there would have an empty location."""
    return ValidationError.from_exception_data(type(model).__name__, [
        InitErrorDetails(type=PydanticCustomError("cross_key", "{message}", {"message": message}),
                         loc=loc, input=_value_at(model, loc))
        for loc, message in problems])


def _line_of(node: yaml.Node | None, loc: Sequence[Any]) -> int | None:
    """Follow a pydantic error location through the YAML node tree; return a 1-based line."""
    line = node.start_mark.line + 1 if node is not None else None
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            found = None
            # The last match: after construction a merge key's pairs come first and the
            # mapping's own keys, which win, after them.
            for key_node, value_node in node.value:
                if str(key_node.value) == str(part):
                    found = value_node
                    line = key_node.start_mark.line + 1
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
    if isinstance(node, yaml.ScalarNode):  # a mapping or list value: its key's line
        line = node.start_mark.line + 1
    return line


def line_of(node: yaml.Node | None, loc: Sequence[Any]) -> int | None:
    """The 1-based line of a key path in a composed YAML tree (None without a tree)."""
    return _line_of(node, loc) if node is not None else None


def _describe(error: ErrorDetails) -> str:
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
    if kind == "too_short":
        count = error.get("ctx", {}).get("min_length", 1)
        return f"needs at least {count} {'entry' if count == 1 else 'entries'}"
    return error.get("msg", "invalid value").removeprefix("Value error, ")


def _refuse_duplicate_keys(loader: yaml.SafeLoader, root: yaml.Node) -> None:
    """Walk the composed tree once, before construction, so each mapping's own keys are
    compared (construction folds merge keys in, and an own key may override those)."""
    seen: set[int] = set()  # an alias is the anchored node again: check each node once

    def walk(node: yaml.Node, path: tuple[str, ...]) -> None:
        if id(node) in seen:
            return
        seen.add(id(node))
        if isinstance(node, yaml.SequenceNode):
            for index, item in enumerate(node.value):
                walk(item, (*path, str(index)))
        elif isinstance(node, yaml.MappingNode):
            first: dict[Any, yaml.Node] = {}
            for key_node, value_node in node.value:
                part = str(key_node.value) if isinstance(key_node, yaml.ScalarNode) else "?"
                if key_node.tag != _MERGE:
                    # Compare constructed keys: `1` and `0x1` are the same key.
                    key = loader.construct_object(key_node, deep=True)
                    try:
                        earlier = first.setdefault(key, key_node)
                    except TypeError:  # unhashable: construction reports it
                        earlier = key_node
                    if earlier is not key_node:
                        raise DuplicateKey(".".join((*path, part)), earlier, key_node)
                walk(value_node, (*path, part))

    walk(root, ())


def _parse(text: str) -> tuple[Any, yaml.Node | None]:
    """Compose once, check keys on the node tree, build the data from that same tree."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None, None
        _refuse_duplicate_keys(loader, node)
        return loader.construct_document(node), node
    finally:
        loader.dispose()


def node_tree(text: str) -> yaml.Node | None:
    """The composed node tree of YAML text that loaded before (for `line_of`)."""
    try:
        return _parse(text)[1]
    except (yaml.YAMLError, RecursionError):
        return None


def load_yaml(path: Path) -> tuple[Any, yaml.Node | None, str]:
    """Read a YAML file; return (data, node tree, text). Syntax errors, duplicate keys and
    nesting too deep for the parser become ConfigError; so does a file that cannot be read,
    in one line naming it and why: a FIFO or /dev/zero is refused at the open, never waited
    on or read without end (config/local_files.py read_regular), and a file over MAX_YAML
    from its size, unread."""
    try:
        text = read_regular(path, MAX_YAML).decode("utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    except NotRegular as exc:
        why = f"not a regular file ({exc.kind})" if exc.kind else \
            f"{exc.size} bytes, over the {MAX_YAML >> 20} MiB a YAML file of orch may have"
        raise ConfigError(f"{path}: {why}") from None
    except OSError as exc:   # not a directory on the way, a name too long, no permission
        raise ConfigError(f"{path}: cannot read it: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text ({exc.reason})") from None
    try:
        data, node = _parse(text)
    except DuplicateKey as exc:
        where = f"{path}:{exc.problem_mark.line + 1}" if exc.problem_mark else str(path)
        raise ConfigError(f"{where}: {exc.key_path}: {exc.problem}") from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        raise ConfigError(f"{where}: YAML syntax: {exc.problem}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: YAML syntax: {exc}") from None
    except RecursionError:   # PyYAML composes and constructs recursively: [[[[...]]]] 5,000 deep
        raise ConfigError(f"{path}: nesting too deep") from None
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
