"""Flags in table cells wrap between options, never inside one (issue: the HTML Runs table
broke `--io-threads` as "--i o-threads")."""
from pathlib import Path

from orchestrator.report.format.markdown import md_flags

TEMPLATES = Path(__file__).resolve().parents[1] / "reports" / "templates"


def test_each_option_with_its_values_is_one_code_span():
    assert md_flags("--moe-stream --cache-mb 2000 --io-threads 4 --overlap") == (
        "`--moe-stream` `--cache-mb 2000` `--io-threads 4` `--overlap`")
    assert md_flags("-t 4 -p 'a b'") == "`-t 4` `-p 'a b'`"
    assert md_flags("model.gguf --x") == "`model.gguf` `--x`"     # a leading value keeps its span
    assert md_flags("") == "—" and md_flags(None) == "—"


def test_the_page_keeps_a_code_span_in_a_cell_whole():
    css = (TEMPLATES / "page.html.j2").read_text()
    assert "td code { white-space: nowrap; }" in css and "break-all" not in css


def test_a_history_without_a_model_is_named_by_its_config():
    from orchestrator.report.format.labels import series_title
    assert series_title("-", "pread-c0-t4", "local") == "pread-c0-t4 on local"
    assert series_title("qwen", "base", "phone") == "qwen base on phone"
