"""`orch site`: the static site of a store. Built from stores made here with the store API
(tests/test_history.py's sessions: a known 15% step at a known session, plus a config named
like a script), then loaded from file:// in the real browser (the system Chromium driven by
Playwright): every page type draws with no console error and no request leaving the machine,
the history chart marks the step, the hostile name shows as text; and a re-run rewrites only
the pages whose inputs changed."""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET
import os
import re
from pathlib import Path

import pytest
from cli_helpers import orch, orch_ok
from test_history import STEP_AT, add_session, noisy_history
from waiting import wait_until

from orchestrator.db.store import Store

XSS = "<script>alert(1)</script>"
CHROMIUM = "/usr/bin/chromium"
pytestmark = pytest.mark.extra("site")


def stepped_store(path: Path) -> tuple[Store, list[int]]:
    """A history with a step at STEP_AT on device `d`, then one session on device `other`
    and one more on `d`, both with the hostile config: a comparison of `d` and `other`."""
    store = Store.open(str(path))
    sids = noisy_history(store, 0, step=True)
    sids.append(add_session(store, 40, {"t1": [19.0, 19.5, 19.2], XSS: [10.0, 10.2]},
                            device="other"))
    sids.append(add_session(store, 41, {"t1": [17.0, 17.5, 17.2], XSS: [11.0, 11.2]}))
    return store, sids


def build(folder: Path) -> tuple[Store, list[int], Path, object]:
    from orchestrator.site import build_site

    folder.mkdir(exist_ok=True)
    store, sids = stepped_store(folder / "orch.db")
    out = folder / "site"
    # two rendering processes, as `orch site` on a 2-CPU machine (render_page: one)
    return store, sids, out, build_site(store, out, plots=False, jobs=2)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """One site for the tests that only read it (building takes a few seconds)."""
    return build(tmp_path_factory.mktemp("site"))


def pages_of(out: Path, folder: str) -> list[Path]:
    return sorted((out / folder).glob("*.html"))


def history_page(out: Path, device: str, config: str) -> Path:
    title = f"history: m {config} on {device}".replace("<", "&lt;").replace(">", "&gt;")
    return next(p for p in pages_of(out, "history") if f"<title>{title}</title>"
                in p.read_text())


def test_every_page_type_written(built):
    store, sids, out, result = built
    assert result.written[0] == "index.html" and not result.unchanged
    assert {p.name for p in pages_of(out, "sessions")} == {f"{s}.html" for s in sids}
    assert len(pages_of(out, "history")) == 4      # t1 and XSS on each of two devices
    assert len(pages_of(out, "compare")) == 1
    assert (out / "assets" / "plotly.min.js").stat().st_size > 1_000_000
    manifest = json.loads((out / "manifest.json").read_text())
    assert set(manifest["pages"]) == set(result.written)
    for page in out.rglob("*.html"):               # nothing fetched from elsewhere
        assert not re.search(r"""(src|href)=["']?(https?:)?//""", page.read_text()), page


def test_hostile_names_are_escaped_in_html_and_chart_data(built):
    _, _, out, _ = built
    for page in out.rglob("*.html"):
        text = page.read_text()
        assert XSS not in text, page
        assert "alert(1)" not in text or "&lt;script&gt;alert(1)&lt;/script&gt;" in text \
            or "\\u003c" in text, page
    page = history_page(out, "d", XSS).read_text()
    data = re.search(r'<script type="application/json" id="history-chart">(.*?)</script>',
                     page, re.S).group(1)
    spec = json.loads(data)
    # Plotly reads text as HTML: the name reaches it escaped, so it draws the characters
    assert spec["layout"]["title"]["text"] == "m &lt;script&gt;alert(1)&lt;/script&gt; on d"


def test_history_page_marks_the_change_point(built):
    _, sids, out, _ = built
    page = history_page(out, "d", "t1").read_text()
    spec = json.loads(re.search(r'id="history-chart">(.*?)</script>', page, re.S).group(1))
    [note] = spec["layout"]["annotations"]
    assert note["text"].startswith("Δ -1") and "p=" in note["text"]
    [trace] = spec["data"]
    assert trace["customdata"][STEP_AT] == f"../sessions/{sids[STEP_AT]}.html"
    assert f'<a href="../sessions/{sids[STEP_AT]}.html">{sids[STEP_AT]}</a>' in page
    index = (out / "index.html").read_text()
    assert "change point" in index and "0.3.30 → 0.3.36" in index


def test_history_page_offers_each_metric_as_orch_computes_it(built):
    """The metric choice: one figure per metric of `orch history --metric` that has values,
    each point the value results/history.py computed (the browser only swaps figures)."""
    from orchestrator.results.history import history

    store, _, out, _ = built
    page = history_page(out, "d", "t1").read_text()
    offered = re.findall(r'<option value="history-chart-([^"]+)"', page)
    assert offered[:3] == ["median", "p5", "p95"] and "prefill_tps" not in offered
    for metric in ["mean", *offered]:
        element = "history-chart" if metric == "mean" else f"history-chart-{metric}"
        spec = json.loads(re.search(rf'id="{element}">(.*?)</script>', page, re.S).group(1))
        [series] = history(store, "hist", "t1", "d", metric=metric)
        assert spec["data"][0]["y"] == [p.interval.mean for p in series.points
                                        if p.interval.mean is not None]
        assert spec["layout"]["yaxis"]["title"]["text"] == f"{metric} (tok/s)"
        assert len([a for a in spec["layout"]["annotations"] if "Δ" in a["text"]]) \
            == len(series.change_points)


def test_the_regressions_feed_is_in_the_site_and_links_history_pages(built):
    _, sids, out, _ = built
    feed = ET.parse(out / "regressions.xml").getroot()
    atom = "{http://www.w3.org/2005/Atom}"
    entries = feed.findall(f"{atom}entry")
    assert entries, "the change point built into the store is in the feed"
    links = {link.get("href") for e in entries for link in e.findall(f"{atom}link")}
    assert str(history_page(out, "d", "t1").relative_to(out)) in links
    assert '<a href="regressions.xml">' in (out / "index.html").read_text()
    assert "application/atom+xml" in (out / "index.html").read_text()
    # the site's feed takes the site's histories: the entries `orch feed` reads from the store
    from orchestrator.results.regression_feed import regression_entries
    from orchestrator.results.site_data import site_data

    store = built[0]
    data = site_data(store)
    by_matrix: dict = {}
    for key, series in data.series.items():
        by_matrix.setdefault(key[1], []).append(series)
    assert regression_entries(store, series=by_matrix) == regression_entries(store)


@pytest.mark.slow
def test_rerun_rewrites_only_what_changed(tmp_path):
    from orchestrator.site import build_site

    store, sids, out, _ = build(tmp_path)
    again = build_site(store, out, plots=False)
    assert again.written == [] and len(again.unchanged) == again.total
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*.html")}
    new = add_session(store, 50, {"t1": [17.1, 17.3, 17.2]})
    result = build_site(store, out, plots=False)
    # the index, the new session, the history of t1 on d and the comparison (d's newest
    # session changed); every other page is left as it was
    # (and the feed, which changes only when the regressions do)
    assert sorted(set(result.written) - {"regressions.xml"}) == sorted([
        "index.html", f"sessions/{new}.html",
        str(history_page(out, "d", "t1").relative_to(out)),
        str(pages_of(out, "compare")[0].relative_to(out))])
    for page, mtime in before.items():
        if str(page.relative_to(out)) not in result.written:
            assert page.stat().st_mtime_ns == mtime, page


@pytest.mark.slow
def test_a_note_and_an_acknowledgement_reach_their_pages(tmp_path):
    from orchestrator.results.annotations import acknowledge, add_note
    from orchestrator.results.history import history
    from orchestrator.site import build_site

    store, sids, out, _ = build(tmp_path)
    add_note(store, "session", sids[3], "firmware <16.0.2>", "tester")
    [step] = [c for s in history(store, "hist", "t1", "d") for c in s.change_points]
    acknowledge(store, step.id, "new build expected slower", "tester", [step.id])
    result = build_site(store, out, plots=False)
    page = history_page(out, "d", "t1")
    assert str(page.relative_to(out)) in result.written and "index.html" in result.written
    text = page.read_text()
    assert "firmware &lt;16.0.2&gt;" in text and "new build expected slower" in text
    spec = json.loads(re.search(r'id="history-chart">(.*?)</script>', text, re.S).group(1))
    assert any(a["text"].endswith("(acknowledged)") for a in spec["layout"]["annotations"])
    assert "note: firmware &lt;16.0.2&gt;" in spec["data"][0]["hovertext"][3]
    assert "new build expected slower" in (out / "index.html").read_text()


def test_render_page_is_the_written_page(built):
    from orchestrator.site import render_page

    store, sids, out, _ = built
    assert render_page(store, "index.html", plots=False) == (out / "index.html").read_bytes()
    generated = re.compile(rb"Generated by orch \S+ at [^<]*")    # the report's clock
    assert generated.sub(b"", render_page(store, f"sessions/{sids[0]}.html", plots=False)) \
        == generated.sub(b"", (out / "sessions" / f"{sids[0]}.html").read_bytes())
    assert render_page(store, "sessions/999.html") is None


@pytest.mark.slow
def test_cli_writes_the_site_and_refuses_a_missing_store(tmp_path):
    stepped_store(tmp_path / "orch.db")
    out = orch_ok("site", "--db", str(tmp_path / "orch.db"), "-o", str(tmp_path / "s"),
                  "--no-plots")
    assert "pages written" in out and (tmp_path / "s" / "index.html").is_file()
    code, out = orch("site", "--db", str(tmp_path / "nope.db"), "-o", str(tmp_path / "t"))
    assert code == 2 and len(out.strip().splitlines()) == 1


# ---- in the browser ------------------------------------------------------------------------

@pytest.fixture
def browser_page(tmp_path):
    """A Chromium page (the system browser: never a downloaded one) that fails every request
    not to a file:// address, and records console errors, page errors and dialogs; the
    browser's processes are gone after the test."""
    if not os.access(CHROMIUM, os.X_OK):
        from ci import unavailable
        unavailable(f"{CHROMIUM} (the Debian chromium package) is not installed")
    from playwright.sync_api import sync_playwright

    profile = tmp_path / "chromium-profile"
    seen = {"errors": [], "outside": [], "dialogs": []}
    with sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            str(profile), executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        try:
            def route(r):
                if r.request.url.startswith(("file://", "data:")):
                    r.continue_()
                else:
                    seen["outside"].append(r.request.url)
                    r.abort()
            context.route("**/*", route)
            page = context.new_page()
            page.on("console", lambda m: m.type == "error" and seen["errors"].append(m.text))
            page.on("pageerror", lambda e: seen["errors"].append(str(e)))
            page.on("dialog", lambda d: (seen["dialogs"].append(d.message), d.dismiss()))
            yield page, seen
        finally:
            context.close()
    assert wait_until(lambda: not _processes_with(str(profile)), 30), \
        "a Chromium process outlived the test"


def _processes_with(text: str) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if text.encode() in cmdline:
            found.append(int(pid))
    return found


@pytest.mark.slow
def test_every_page_type_in_the_browser(built, browser_page):
    page, seen = browser_page
    _, sids, out, _ = built
    page.goto((out / "index.html").as_uri())
    assert page.get_by_role("heading", name="Latest regressions").is_visible()
    # the CSP holds the page to its own files (the errors seen would show a violation)
    assert page.locator('meta[http-equiv="Content-Security-Policy"]').count() == 1
    # the hostile config is text: a link's words, never a script
    assert page.get_by_role("link", name=f"m {XSS} on d").count() == 1
    # sort and filter work
    page.get_by_role("columnheader", name="session").last.click()
    first = page.locator("#sessions + table tbody tr").first
    assert first.locator("td").first.inner_text() == str(min(sids))
    page.locator("input.row-filter").fill("s41")
    assert wait_until(lambda: page.locator("#sessions + table tbody tr:visible").count() == 1, 10)

    page.goto(history_page(out, "d", "t1").as_uri())
    page.wait_for_selector("#history-plot .annotation-text")
    note = page.locator("#history-plot .annotation-text").text_content()
    assert note.startswith("Δ -1") and "p=" in note
    assert page.locator("#history-plot .scatterlayer .point").count() == len(sids) - 1
    # another metric: the same chart redrawn from that metric's figure
    page.locator("select.chart-choice").select_option(label="p5")
    assert wait_until(lambda: page.locator("#history-plot .ytitle").text_content()
                      == "p5 (tok/s)", 10)

    page.goto(history_page(out, "d", XSS).as_uri())
    page.wait_for_selector("#history-plot .gtitle")
    assert page.locator("#history-plot .gtitle").text_content() == f"m {XSS} on d"

    page.goto(pages_of(out, "compare")[0].as_uri())
    page.wait_for_selector("#compare-plot .ytick")
    ticks = page.locator("#compare-plot .ytick text").all_text_contents()
    assert f"m {XSS}" in ticks and "m t1" in ticks

    page.goto((out / "sessions" / f"{sids[-1]}.html").as_uri())
    assert page.get_by_role("heading", name="Benchmark report: hist").is_visible()
    table = page.locator("table", has=page.get_by_role("columnheader", name="decode mean"))
    assert table.first.get_by_role("cell", name=XSS, exact=True).count() == 1
    page.locator("input.row-filter").fill("t1")
    assert wait_until(lambda: table.first.locator("tbody tr:visible").count() == 1, 10)

    assert seen == {"errors": [], "outside": [], "dialogs": []}
