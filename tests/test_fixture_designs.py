"""Each acceptance study folder imported with the design file its author would write
(tests/fixtures/designs/, issue 36): the report reads like the folder's summary.md /
findings.md: the author's title, an Environment, a Method, each model headed by its label
with its facts, rows named by the author's labels in the author's order, Δ rows, Findings and
a Reproduce section with the flags per config. One test per folder; each imports its folder
once into its own store."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from cli_helpers import orch_ok as orch

FIX = Path(__file__).parent / "fixtures"
FOLDERS = ["2026-07-12-pr23", "2026-07-13", "2026-07-14", "2026-07-14-warmup", "2026-07-17",
           "2026-07-20-cache-replay", "2026-07-21-pinned-dense-ab"]


def _headings(text: str, level: str) -> list[str]:
    return re.findall(rf"^{level} (.+)$", text, flags=re.M)


def _row_names(text: str, table_start: str) -> list[str]:
    """The first column of the first table after `table_start`."""
    block = text[text.index(table_start):]
    lines = block.split("\n\n", 2)[1].splitlines()
    return [line.split(" | ")[0].lstrip("| ").strip() for line in lines[2:]]


@pytest.mark.parametrize("folder", FOLDERS)
def test_the_report_reads_like_the_write_up(tmp_path: Path, folder: str) -> None:
    design_path = FIX / "designs" / f"{folder}.yaml"
    design = yaml.safe_load(design_path.read_text(encoding="utf-8"))
    db = str(tmp_path / "s.db")
    orch("import", str(FIX / "bigmoe" / folder), "--design", str(design_path), "--db", db)
    text = orch("report", "--db", db, "--no-plots")

    assert text.startswith(f"# {design['title']}\n")
    assert _headings(text, "##")[:3] == ["Environment", "Method", "Results"]
    assert {"Findings", "Reproduce", "Provenance"} <= set(_headings(text, "##"))
    env = text[text.index("## Environment"):text.index("## Method")]
    assert "given by the design file" in env                  # where the facts came from
    for label, value in design.get("environment", {}).items():
        assert f"- **{label}:** {value}" in env
    # a date-only `measured:` prints no time of day anywhere
    if "measured" in design and "T" not in str(design["measured"]):
        assert "00:00:00" not in text
    # each model headed by its label
    groups = _headings(text, "###")
    labels = [m["label"] for m in design["models"].values() if m and m.get("label")]
    assert any(g.startswith(tuple(labels)) for g in groups)
    # rows named by the configs' labels, in the design's order
    legend = _row_names(text, "**Configs**")
    listed = [c.get("label") or name for name, c in design["configs"].items()]
    assert legend[:len(listed)] == listed
    assert "\n| Δ " in text                                   # Δ rows under each config
    # Reproduce: the import command and every labelled config's flags
    reproduce = text[text.index("## Reproduce"):text.index("## Left out")]
    assert "orch import" in reproduce
    for config in design["configs"].values():
        if config.get("flags"):
            assert f"`{config['flags']}`" in reproduce


def test_the_adaptive_cache_table_is_the_summarys(tmp_path: Path) -> None:
    """2026-07-13's summary.md has a third table per model (cache budget, resizes, resident,
    spec recall / useful / read, auto-off): the report has it where it says something, with
    the published figures; a group of fixed, equal budgets and no speculation has none."""
    db = str(tmp_path / "s.db")
    orch("import", str(FIX / "bigmoe" / "2026-07-13"), "--design",
         str(FIX / "designs" / "2026-07-13.yaml"), "--db", db)
    text = orch("report", "--db", db, "--no-plots")
    assert ("| fixed cache + overlap + speculative gating | 2000 MiB | 0 | 1996 MiB | 63% | yes |"
            in text)                                                       # Gemma
    assert ("| fixed cache + overlap + speculative gating | 4000 MiB | 0 | 3998 MiB | 88% | 87% "
            "| 22 MiB | no |") in text                                      # Qwen
    assert "| adaptive cache (--cache-mb auto) + overlap | 4675 MiB | 0 | 4675 MiB |" in text
    db = str(tmp_path / "p.db")
    orch("import", str(FIX / "bigmoe" / "2026-07-21-pinned-dense-ab"), "--design",
         str(FIX / "designs" / "2026-07-21-pinned-dense-ab.yaml"), "--db", db)
    text = orch("report", "--db", db, "--no-plots")
    qwen = text[text.index("### Qwen3.6"):text.index("### gpt-oss")]
    assert "Adaptive cache" not in qwen                    # one fixed budget, no speculation
