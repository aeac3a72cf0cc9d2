"""What one `orch import` asks for, checked before the folder's lock is taken: the folder, the
engine's adapter, the design file as read and the options as given (ingest/importer.py)."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.config.design import Design, load_design, parse_measured
from orchestrator.errors import ConfigError
from orchestrator.plugins import get_adapter

MAX_FILE = 512 * 1024 * 1024   # a per-token CSV of a 256-token run is ~50 KB; refuse absurd files


@dataclass(frozen=True)
class ImportRequest:
    """One import's inputs. None for an option means "not given": a folder imported before
    keeps its stored value then (importer._options)."""

    folder: Path                          # resolved
    adapter: Any                          # the engine's adapter (plugins.get_adapter)
    design: Design | None = None          # --design, as read
    device: str | None = None
    name: str | None = None
    model: Mapping[str, str] | None = None   # --model rules (naming.model_globs)
    label: str | None = None
    replace: bool = False
    max_bytes: int = MAX_FILE
    measured: str | None = None           # --measured YYYY-MM-DD[THH:MM]

    @classmethod
    def checked(cls, directory: str | Path, engine: str = "bmoe",
                design: str | Path | None = None, **options: Any) -> ImportRequest:
        """The request for `directory`, or ConfigError naming what is wrong (not a folder,
        an unknown engine, a bad design file or --measured): nothing is written before."""
        folder = Path(directory).resolve()
        if not folder.is_dir():
            raise ConfigError(f"{directory}: not a directory")
        try:
            adapter = get_adapter(engine)
        except KeyError as exc:
            raise ConfigError(str(exc.args[0])) from None
        given_design = load_design(Path(design)) if design is not None else None
        measured = options.get("measured")
        if measured is not None:
            try:
                parse_measured(measured)
            except ValueError as exc:
                raise ConfigError(f"--measured {measured!r}: {exc}") from None
        return cls(folder, adapter, given_design, **options)

    def given(self) -> dict[str, Any]:
        """The options given (stored with the session; compared with a re-import's)."""
        pairs = (("device", self.device), ("name", self.name), ("label", self.label),
                 ("model", dict(self.model) if self.model else None),
                 ("measured", self.measured),
                 ("design", self.design.stored() if self.design else None))
        return {k: v for k, v in pairs if v is not None}
