"""orch's own error classes, at the bottom of the layers so that every layer can raise them
(docs/architecture.md, "Layers"). Each is printed as one line by the CLI's error handler."""
from __future__ import annotations


class ConfigError(Exception):
    """A user file (matrix, inventory, design) or option is wrong. The message is meant to be
    printed as is; the CLI exits 2."""


class StoreWriteError(Exception):
    """The store failed while a run streamed into it (a full disk, a server gone): printed
    as one line, exit 1. The engine was stopped first; the cell is left to `--resume`."""


class StoreError(ConfigError):
    """`--db` names no usable store (a directory, a bad URL, a missing driver, a server that
    does not answer): one line and exit 2, before anything runs."""
