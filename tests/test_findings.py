"""The report's Findings (issue 36, Build 2): per model, in words, each difference the data
support and those they do not, from the A/B rows (results/ab.py: one owner of the figures),
labels where configs have them; a difference is called real only where the Holm-corrected
test says so, and exact differences (cache hit, flash read) carry no caveat."""
from __future__ import annotations

from pathlib import Path

from cli_helpers import orch
from test_ab import figures_of, interleaved, runs_of

from orchestrator.report.document import findings as words
from orchestrator.report.format.formatters import pct
from orchestrator.results import ab
from orchestrator.results.findings import findings

FIXTURES = Path(__file__).parent / "fixtures"
REPLAY = FIXTURES / "bigmoe" / "2026-07-20-cache-replay"
REPLAY_DESIGN = FIXTURES / "designs" / "2026-07-20-cache-replay.yaml"


def report(tmp_path: Path) -> str:
    db = str(tmp_path / "orch.db")
    code, out = orch("import", str(REPLAY), "--design", str(REPLAY_DESIGN), "--db", db)
    assert code == 0, out
    code, text = orch("report", "--db", db, "--no-plots")
    assert code == 0, text
    return text


def section(text: str) -> str:
    return text[text.index("## Findings"):text.index("## Left out")]


def test_findings_follow_the_results_and_say_what_the_data_do_not_support(tmp_path):
    text = report(tmp_path)
    found = section(text)
    assert text.index("## Results") < text.index("## Findings") < text.index("## Left out")
    # per model, by its design label; configs by theirs
    assert "**gpt-oss-120b Q4_K_M**" in found and "**Qwen3-30B-A3B Q4_K_M**" in found
    # two paired rounds, not significant: named as such, with the A/B row's own figures
    assert ("- layer-LFU vs LRU: no significant difference in decode tok/s (−27.1%, 95% CI "
            "−74.3% to +107.0%, p = 0.162, Holm; 2 rounds, paired); cache hit +2.0 pp and "
            "flash read per token −7.1% (exact).") in found
    # single runs: not tested, said so; the exact figures stated without a caveat
    assert ("- 8 I/O lanes, k=2 vs 4 I/O lanes, k=2 (ran first, cold): not tested (n=1/1, "
            "too few runs for a test): +9.7% decode tok/s is one measurement against "
            "another; the same cache hit and the same flash read per token (exact).") in found
    assert "faster" not in found and "slower" not in found     # nothing claimed here


def test_a_difference_is_called_real_only_when_the_corrected_test_finds_it():
    spec = interleaved("m", {"a": [10.0, 10.1, 9.9, 10.05, 9.95],
                             "fast": [12.0, 12.2, 11.9, 12.1, 11.95],
                             "same": [10.1, 9.9, 10.0, 10.2, 9.85]})
    rows, stats = runs_of(spec)
    for rid in stats:
        stats[rid].update(cache_hit_pct=50.0, read_mib_per_token=100.0)
    groups = ab.ab_groups(rows, figures_of(stats), {1: None})
    (found,) = findings(groups)
    assert [r.config for r in found.supported] == ["fast"]
    assert [r.config for r in found.not_supported] == ["same"]
    fast, same = found.supported[0], found.not_supported[0]
    text = words.supported(fast)
    # the A/B row's figures, worded: not recomputed
    assert text.startswith(f"**fast vs a**: {pct(fast.comparison.delta_pct)} decode tok/s, "
                           f"faster (95% CI {pct(fast.comparison.ci_low_pct)} to ")
    assert "Holm; 5/5" not in text and "Holm; n=5/5, Welch" in text
    assert words.not_supported(same).startswith("same vs a: no significant difference")
    assert words.exact(fast) == "the same cache hit and the same flash read per token (exact)"


def test_no_finding_without_a_comparison():
    rows, stats = runs_of([("m", "a", 0, 10.0, "ok")])
    assert findings(ab.ab_groups(rows, figures_of(stats), {1: None})) == []
    rows, stats = runs_of([("m", "a", 0, 10.0, "ok"), ("m", "b", 0, 3.0, "failed")])
    (found,) = findings(ab.ab_groups(rows, figures_of(stats), {1: None}))
    assert words.not_supported(found.not_supported[0]) == \
        "b vs a: no run ended ok, nothing to compare"
