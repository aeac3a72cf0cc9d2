"""A matrix driver's stdout (`gptoss-matrix.out`): `==== NAME ====` sections, each the whole
stdout of one engine run, with its summary lines but no per-token CSV.

A section is one of three things:
- the stdout of a run whose per-token CSV is in the same folder, when its name is the CSV's
  stem or the stem after its model prefix (`mmap_k2` for `gptoss_mmap_k2.csv`) AND its
  `generation:` line says the same token count and s/token as the CSV's `# summary` trailer:
  it then gives that run its text and summary lines (a name alone could be a coincidence);
- a summary-only run: any other section with engine summary lines (tok/s, prefill, TTFT, I/O,
  cache hit from the lines; no token rows, so no percentiles);
- nothing: a section without summary lines (listed as skipped).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from orchestrator.engines.bmoe_format import (
    match_summary_line,
    parse_kv_tokens,
    parse_summary_lines,
    split_sections,
)


@dataclass
class Section:
    name: str                  # the section's tag
    source: Path               # the stdout file
    lines: list[str]

    @property
    def generation(self) -> dict | None:
        return parse_summary_lines(self.lines).get("generation")


def sections(source: Path, text: str) -> tuple[list[Section], list[str]]:
    """(sections with summary lines, names of those without)."""
    found, empty = [], []
    for tag, body in split_sections(text):
        lines = body.splitlines()
        if any(match_summary_line(line) for line in lines):
            found.append(Section(tag or "(before the first section)", source, lines))
        elif tag:
            empty.append(tag)
    return found, empty


def trailer(csv_text: str) -> dict:
    """The last `# summary` trailer of a per-token CSV ({} when it has none)."""
    for line in reversed(csv_text.splitlines()):
        if line.startswith("# summary"):
            return parse_kv_tokens(line[len("# summary"):])
    return {}


def same_run(section: Section, stem: str, csv_trailer: dict) -> bool:
    """Whether the section is the stdout of the run of `<stem>.csv` (see the module doc)."""
    _, sep, rest = stem.partition("_")
    if section.name not in (stem, rest if sep else stem):
        return False
    gen = section.generation
    if not gen or not csv_trailer:
        return False
    return (gen.get("tokens") == csv_trailer.get("tokens")
            and gen.get("s_per_token") == csv_trailer.get("s/tok"))
