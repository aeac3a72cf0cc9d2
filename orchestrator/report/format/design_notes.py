"""What an import's design file (config/design.py) adds to a report and to `orch table`: its
markdown notes (the session's, a model's, a config's), the configs it left out on purpose,
and a "Configs" legend of the configs' labels, keys, flags and files.

The tables' rows are named by the configs' labels (results/rows.py); the legend keeps each
config's key (what `--baseline`, `--match` and the design file call it) findable beside its
label, in the tables' order. Notes and reasons are the study author's markdown and are printed
as written but for what would link or load (markdown.md_author); labels, keys, flags and globs are data and are escaped.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from orchestrator.config.design import Design
from orchestrator.report.format.markdown import (
    Table,
    md_author,
    md_code,
    md_escape,
    md_flags,
    render,
)
from orchestrator.results.rows import LeftOut
from orchestrator.stats.values import DASH

LEGEND_CAPTION = ("**Configs** (as the design file of the import names them; the tables' rows "
                  "are the labels, in this order):")


def _present(designs: Iterable[Design | None]) -> list[Design]:
    return [d for d in designs if d is not None]


def _text(note: str | None) -> str | None:
    return md_author(note.strip()) if note and note.strip() else None


def session_notes(designs: Iterable[Design | None]) -> list[str]:
    """Each design's session note (markdown), once each."""
    notes = [_text(d.session_note()) for d in _present(designs)]
    return list(dict.fromkeys(n for n in notes if n))


def model_note(designs: Iterable[Design | None], model: str) -> str | None:
    """The model's note (None without one). Its label is the group's heading
    (labels.group_title), so the note does not repeat it."""
    for design in _present(designs):
        note = _text(design.model_note(model))
        if note:
            return note
    return None


def config_notes(designs: Iterable[Design | None], configs: Sequence[str],
                 model: str | None = None,
                 labels: Mapping[str, str] | None = None) -> list[str]:
    """The notes on these configs (in their order) as `model`'s tables show them (a
    `MODEL:CONFIG` note only under that model's), each opening with the config's label (as
    its row is named) or name."""
    found = _present(designs)
    out: list[str] = []
    for config in configs:
        note = next((n for d in found if (n := _text(d.config_note(config, model)))), None)
        if note:
            out.append(f"**{md_escape((labels or {}).get(config, config))}**: {note}")
    return out


def left_out_notes(entries: Iterable[LeftOut]) -> list[str]:
    """The configs left out on purpose, one note each: "**cache 4000 MiB**: not run — OOM on
    this device"."""
    return [f"**{md_escape(e.label)}**: not run — {md_author(e.reason)}" for e in entries]


def legend(designs: Iterable[Design | None], configs: Sequence[str]) -> Table | None:
    """Config (its label, as the rows name it) — key — flags — files, for the configs (in the
    tables' order) a design describes; None when no design describes any of them."""
    found = _present(designs)
    table = Table(["Config", "key", "flags", "files"], ["---"] * 4)
    for config in dict.fromkeys(configs):
        info = next((d.configs[config] for d in found if config in d.configs), None)
        if info is None:
            continue
        table.rows.append([md_escape(info.label or config), md_code(config),
                           md_flags(info.flags) if info.flags else DASH,
                           ", ".join(md_code(p) for p in info.files)])
    return table.drop_empty(keep=(0, 1)) if table.rows else None


def markdown_block(designs: Iterable[Design | None], configs: Sequence[str]) -> str:
    """The legend as it opens `orch table`'s markdown ("" without one)."""
    table = legend(designs, configs)
    return f"{LEGEND_CAPTION}\n\n{render(table)}\n" if table is not None else ""
