"""Text from devices, files and users is escaped for where it lands (docs/report.md, "Text
from devices and users"; docs/reliability.md, "Text from devices in reports and terminals"):
a report whose device facts, labels, notes, design title and environment hold an image, a
link, an autolink, a bare URL, `<script>`, `" onerror=` and a bidi override shows them
literally in markdown and in HTML, the HTML page loads nothing from another host (a scan of
src/href/url(), and the real Chromium recording every request), and its Content-Security-
Policy allows nothing but its inline style and data: figures. On a terminal the bidi controls
print as `\\u202e`.
"""
from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
import yaml
from cli_helpers import orch

from orchestrator.escape import bidi_visible, visible
from orchestrator.report.format.markdown import md_author, md_escape

ROOT = Path(__file__).resolve().parents[1]
FOLDER = ROOT / "tests" / "fixtures" / "bigmoe" / "2026-07-21-pinned-dense-ab"
DESIGN = ROOT / "tests" / "fixtures" / "designs" / "2026-07-21-pinned-dense-ab.yaml"
CHROMIUM = "/usr/bin/chromium"
HOST = "evil.example"
BIDI = "\u202e"


def hostile(where: str) -> str:
    """One text that tries every way out, named by where it was put."""
    return (f"{where} ![x](https://{HOST}/{where}.png) [l](https://{HOST}/{where}) "
            f"<https://{HOST}/auto> www.{HOST}/bare https://{HOST}/bare2 "
            f"<script>alert('{where}')</script> <img src=\"https://{HOST}/i.png\" "
            f"onerror=\"alert(1)\"> \" onerror=\"alert(2)\" *em* _u_ &amp; {BIDI}gnp.exe")


@pytest.fixture(scope="module")
def study(tmp_path_factory) -> tuple[str, Path]:
    """The pinned-dense-ab study imported with a design whose every text is hostile, and a
    hostile `orch note` on its session: (store, folder to write reports into)."""
    tmp = tmp_path_factory.mktemp("hostile")
    design = yaml.safe_load(DESIGN.read_text())
    design["title"] = hostile("title")
    design["label"] = hostile("label")
    design["device"].update(soc=hostile("soc"), os=hostile("os"), storage=hostile("storage"),
                            notes=hostile("devnotes"))
    design["environment"] = {"Decoding": hostile("environment")}
    for name, model in design["models"].items():
        model["label"] = hostile(f"model-{name[:4]}")
    for name, config in design["configs"].items():
        config["label"] = hostile(f"config-{name}")
    design["notes"]["session"] = hostile("session-note")
    design["notes"]["configs"]["ahwb-long"] = hostile("config-note")
    design["left_out"] = {"anon-huge": hostile("left-out")}
    path = tmp / "design.yaml"
    path.write_text(yaml.safe_dump(design, allow_unicode=True))
    db = str(tmp / "orch.db")
    code, out = orch("import", str(FOLDER), "--db", db, "--design", str(path))
    assert code == 0, out
    code, out = orch("note", "session", "1", hostile("user-note"), "--db", db)
    assert code == 0, out
    return db, tmp


def _report(study: tuple[str, Path], suffix: str) -> Path:
    db, tmp = study
    out = tmp / f"report{suffix}"
    if not out.exists():
        plots = ["--no-plots"] if suffix == ".md" else []   # the HTML embeds its figures
        code, text = orch("report", "--db", db, "-o", str(out), *plots)
        assert code == 0, text
    return out


def _markdown_html(text: str) -> str:
    """The markdown as the project's markdown library renders it (HTML disabled as the report
    does), and with raw HTML allowed, as GitHub or another viewer might."""
    from markdown_it import MarkdownIt

    strict = MarkdownIt("commonmark", {"html": False}).enable("table").render(text)
    lax = MarkdownIt("commonmark", {"html": True}).enable("table").render(text)
    return strict + lax


class _Tags(HTMLParser):
    """The page's elements as a browser parses them: (tag, attributes), and the text of its
    <style> elements."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.styles: list[str] = []
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        if self.tags and self.tags[-1][0] == "style":
            self.styles.append(data)


def _outside(page: _Tags) -> list[str]:
    """Every address in an attribute or a url() that is not a data: PNG nor an anchor."""
    found = [value or "" for _tag, attrs in page.tags for name, value in attrs.items()
             if name in ("src", "href", "srcset", "action", "poster", "data", "formaction")]
    found += re.findall(r"url\(\s*['\"]?([^'\")]+)", "".join(page.styles) + "".join(
        attrs.get("style") or "" for _tag, attrs in page.tags))
    return [url for url in found if not url.startswith(("#", "data:image/png;base64,"))]


def test_markdown_shows_every_hostile_text_literally(study) -> None:
    text = _report(study, ".md").read_text(encoding="utf-8")
    for where in ("title", "label", "soc", "os", "storage", "devnotes", "environment",
                  "session-note", "config-note", "left-out", "user-note", "config-ahwb-long"):
        assert where in text, f"{where}: not in the report"
    html = _markdown_html(text)
    assert "<img" not in html and "<script" not in html.lower()
    assert not re.search(r"<a [^>]*href=\"https?://", html), re.findall(r"<a [^>]*>", html)
    assert "onerror=" not in re.sub(r"&[a-z]+;|&#\d+;", "", "".join(re.findall(r"<[^>]+>", html)))
    assert BIDI not in text and "\\u202egnp.exe" in text
    # GitHub autolinks a bare URL: none is left outside a code span (where nothing links)
    prose = re.sub(r"(`+).*?\1", "", text)
    assert f"://{HOST}" not in prose and f"www.{HOST}" not in prose


def test_the_html_page_loads_nothing_from_another_host(study) -> None:
    html = _report(study, ".html").read_text(encoding="utf-8")
    assert "default-src 'none'" in html and 'http-equiv="Content-Security-Policy"' in html
    page = _Tags(html)
    assert _outside(page) == []
    assert not [(t, a) for t, a in page.tags if any(n.startswith("on") for n in a)]
    assert not [t for t, _ in page.tags if t in ("script", "iframe", "object", "embed", "link",
                                                 "base", "form")]
    assert [a["content"] for t, a in page.tags if t == "meta" and a.get("http-equiv")] == [
        "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; "
        "form-action 'none'"]
    assert "![x](https://evil.example/title.png)" in html.replace("&quot;", '"')
    assert BIDI not in html


@pytest.mark.slow
@pytest.mark.extra("site")
def test_the_html_page_in_chromium_requests_nothing(study, tmp_path: Path) -> None:
    """The real browser, offline: every request it makes is recorded; only the page's own
    file:// and data: figures are allowed, and the CSP is the page's."""
    if not os.access(CHROMIUM, os.X_OK):
        from ci import unavailable
        unavailable(f"{CHROMIUM} (the Debian chromium package) is not installed")
    from playwright.sync_api import sync_playwright

    page_path = _report(study, ".html")
    requests: list[str] = []
    dialogs: list[str] = []
    profile = tmp_path / "chromium-profile"
    with sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            str(profile), executable_path=CHROMIUM, headless=True, offline=True,
            args=["--no-sandbox"])
        try:
            context.on("request", lambda r: requests.append(r.url))
            page = context.new_page()
            page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
            page.goto(page_path.as_uri(), wait_until="load")
            csp = page.eval_on_selector(
                'meta[http-equiv="Content-Security-Policy"]', "m => m.content")
            images = page.eval_on_selector_all("img", "els => els.map(e => e.src)")
            links = page.eval_on_selector_all("a[href]", "els => els.map(e => e.href)")
            scripts = page.eval_on_selector_all("script", "els => els.length")
        finally:
            context.close()
    assert csp.startswith("default-src 'none'")
    assert [u for u in requests if not u.startswith(("file://", "data:"))] == []
    assert images and all(src.startswith("data:image/png") for src in images)
    assert all(href.startswith(page_path.as_uri() + "#") for href in links), links
    assert scripts == 0 and dialogs == []
    from test_site import _processes_with
    from waiting import wait_until
    assert wait_until(lambda: not _processes_with(str(profile)), 30), "Chromium outlived it"


def test_escapes_for_markdown() -> None:
    assert md_escape("![x](https://h/b.png)") == "![x\\](https:\\/\\/h/b.png)"
    assert md_escape("[r]: https://h [a][r] tok/s [95% CI]") == \
        "[r\\]: https:\\/\\/h [a\\][r] tok/s [95% CI]"
    assert md_escape("qwen_kdef _u_ a&b &amp;") == "qwen_kdef \\_u\\_ a&b \\&amp;"
    assert md_escape("see www.h.io") == "see www\\.h.io"
    assert md_escape("# title") == "\\# title" and md_escape("> q") == "\\> q"
    assert md_escape("<b> & *x*") == "&lt;b> & \\*x\\*"
    assert md_escape("a\u202eb") == "a\\u202eb"
    # an author's markdown keeps its emphasis and code, not its links nor images
    assert md_author("**b** `a[0]` [l](http://h)") == "**b** `a[0]` [l\\](http:\\/\\/h)"
    assert md_author("```\n[k](v)\n```") == "```\n[k](v)\n```"


def test_bidi_controls_are_shown_escaped() -> None:
    assert visible("a\u202eb\u2066c\u200fd") == "a\\u202eb\\u2066c\\u200fd"
    assert bidi_visible("\x1b[1ma\u202eb") == "\x1b[1ma\\u202eb"   # rich's styles pass


def test_a_bidi_label_on_the_terminal_prints_escaped(study, tmp_path: Path) -> None:
    """`orch runs` and `orch table` on a terminal (a pty): the labels' U+202E as `\\u202e`."""
    db, _ = study
    for argv in (["runs"], ["table"], ["notes"]):
        out = _on_a_terminal([*argv, "--db", db], tmp_path)
        assert BIDI not in out, argv
    assert "\\u202e" in _on_a_terminal(["notes", "--db", db], tmp_path)


def _on_a_terminal(argv: list[str], cwd: Path) -> str:
    primary, secondary = pty.openpty()
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORCH_")}
    env.update(COLUMNS="400", LINES="50")
    orch_bin = Path(sys.executable).parent / "orch"
    proc = subprocess.Popen([str(orch_bin), *argv], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                            stdout=secondary, stderr=secondary)
    os.close(secondary)
    chunks = []
    while True:
        try:
            chunk = os.read(primary, 65536)
        except OSError:   # EIO: the terminal's other end closed
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(primary)
    assert proc.wait(timeout=60) == 0
    return b"".join(chunks).decode("utf-8", errors="replace")

