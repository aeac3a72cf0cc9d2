"""`orch report` and `orch compare`: published numbers, real runs, failures, escaping, bench.

Over 400 lines on purpose: the document's sections against published numbers, sharing the
imported fixtures.
"""
from __future__ import annotations

import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from cli_helpers import orch_ok as orch
from click.testing import CliRunner
from test_analysis_oracle import (
    FIX,
    JUL13_SECTIONS,
    JUL13_SUFFIX_LABEL,
    md_cells,
    published,
)

from orchestrator.report.format.markdown import md_flags
from orchestrator.cli import main
from orchestrator.db.store import Store
from orchestrator.report.format.ab_rows import delta_cell
from orchestrator.db.runs import Runs, Sessions
from orchestrator.stats.figures import frame
from orchestrator.stats.uncertainty import compare

REPO = Path(__file__).resolve().parent.parent
PNG = b"\x89PNG\r\n\x1a\n"
CELL_SPLIT = re.compile(r"(?<!\\)\|")     # GFM: a pipe after a backslash is content




def expand_ids(cell: str) -> list[int]:
    """The inverse of report.cells.id_list: the run ids of a "3, 5–9" cell."""
    ids: list[int] = []
    for part in re.findall(r"\d+(?:–\d+)?", cell):
        a, _, b = part.partition("–")
        ids.extend(range(int(a), int(b or a) + 1))
    return ids

def split_row(line: str) -> list[str]:
    inner = line.strip()
    assert inner.startswith("|") and inner.endswith("|") and not inner.endswith("\\|"), line
    return [c.strip() for c in CELL_SPLIT.split(inner[1:-1])]


def md_tables(text: str) -> list[dict]:
    """Every markdown table: {title (last heading), headers, rows}. Asserts that every row has
    as many cells as the header: the property escaping must keep."""
    out, title, lines = [], "", text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("#"):
            title = line.lstrip("#").strip()
        if line.startswith("|") and i + 1 < len(lines) and lines[i + 1].startswith("|--"):
            headers = split_row(line)
            assert len(split_row(lines[i + 1])) == len(headers)
            rows, i = [], i + 2
            while i < len(lines) and lines[i].startswith("|"):
                row = split_row(lines[i])
                assert len(row) == len(headers), (headers, lines[i])
                rows.append(row)
                i += 1
            out.append({"title": title, "headers": headers, "rows": rows})
            continue
        i += 1
    return out


def find(tables: list[dict], header: str, title: str | None = None) -> list[dict]:
    return [t for t in tables if header in t["headers"] and (title is None or t["title"] == title)]


def by_label(table: dict) -> dict[str, dict[str, str]]:
    return {r[0]: dict(zip(table["headers"], r)) for r in table["rows"]}


def all_rows(tables: list[dict]) -> dict[str, dict[str, str]]:
    """The rows of several tables (one per model group) by label."""
    return {label: row for table in tables for label, row in by_label(table).items()}


def table_ids(tables: list[dict]) -> set[int]:
    """Run ids in every `run ids` column outside Provenance."""
    ids: set[int] = set()
    for t in tables:
        if "run ids" in t["headers"] and t["headers"][0] not in ("Engine", "Model"):
            for row in t["rows"]:
                ids.update(expand_ids(dict(zip(t["headers"], row))["run ids"]))
    return ids


# ---- imported fixtures: the published numbers --------------------------------------------

@pytest.fixture
def db(tmp_path):
    return str(tmp_path / "orch.db")


@pytest.fixture(scope="module")
def jul13(tmp_path_factory) -> tuple[str, Path, str]:
    """(database, document, its text): the 2026-07-13 session imported, its report written
    with figures where matplotlib is installed (the `plots` extra)."""
    root = tmp_path_factory.mktemp("jul13")
    db = str(root / "orch.db")
    orch("import", str(FIX / "2026-07-13"), "--db", db)
    out = root / "docs" / "bench.md"
    orch("report", "--db", db, "-o", str(out))
    return db, out, out.read_text(encoding="utf-8")


def test_jul13_report_has_the_published_numbers_and_provenance(jul13):
    db, _, text = jul13
    tables = md_tables(text)
    # the throughput table and its detail table (prefill, stall) side by side
    thr = {label: {**row, **all_rows(find(tables, "prefill tok/s"))[label]}
           for label, row in all_rows(find(tables, "decode mean")).items()}
    prs = all_rows(find(tables, "free-RAM floor"))
    want = md_cells(published("2026-07-13"))        # memory in GiB, as orch writes it
    compared = 0
    for (section, label, header), cell in want.items():
        if cell == "—" or label not in JUL13_SUFFIX_LABEL.values():
            continue
        prefix = next(p for t, p in JUL13_SECTIONS if t == section)
        suffix = next(s for s, lab in JUL13_SUFFIX_LABEL.items() if lab == label)
        stem = f"{prefix}_{suffix}"
        if header in thr[stem]:
            assert thr[stem][header] == cell, (stem, header)
        elif header in ("peak RSS", "free-RAM floor", "battery max"):
            assert prs[stem][header] == cell, (stem, header)
        elif header in ("CPU start", "CPU max"):
            start, peak = prs[stem]["CPU start → max"].removesuffix(" °C").split(" → ")
            assert (start if header == "CPU start" else peak) + " °C" == cell, (stem, header)
        else:
            continue          # the adaptive-cache table is not part of the report
        compared += 1
    # 8 runs x (10 throughput + 5 pressure) published cells
    assert compared == 8 * 15
    assert "spread of means" not in find(tables, "prefill tok/s")[0]["headers"]   # single runs
    # provenance the files allow: file names, their digest, the imported session
    store = Store.open(db)
    runs = Runs(store).current()
    files = by_label(find(tables, "per-token CSV")[0])
    for run in runs:
        row = files[str(run.id)]
        assert row["per-token CSV"] == f"`{run.config}.csv`"
        assert f"`{run.config}.metrics`, `{run.config}.log`" == row["sidecars"]
    runs_table = by_label(find(tables, "flags", "Provenance")[0])
    assert set(map(int, runs_table)) == {r.id for r in runs} == table_ids(tables)


@pytest.mark.extra("plots")
def test_jul13_report_figures_are_linked_pngs(jul13):
    _, out, text = jul13
    png = sorted((out.parent / "bench_files").glob("*.png"))
    # one distribution and one trajectory figure per model group (gemma, qwen)
    assert sorted(p.name.rsplit("-", 1)[-1] for p in png) == \
        ["distribution.png"] * 2 + ["trajectory.png"] * 2
    for p in png:
        assert p.read_bytes().startswith(PNG) and f"bench_files/{p.name}" in text


def test_jul17_provenance_has_settings_flags_and_model_files(db):
    orch("import", str(FIX / "2026-07-17"), "--db", db, "--name", "topk", "--device", "phone")
    text = orch("report", "topk", "--db", db)     # on stdout: no figures, a note says why
    tables = md_tables(text)
    assert "Figures are written only with `-o FILE`" in text and ".png)" not in text
    store = Store.open(db)
    runs = {r.id: r for r in Runs(store).current()}
    prov = by_label(find(tables, "flags", "Provenance")[0])
    for rid, run in runs.items():
        assert prov[str(rid)]["flags"] == f"`{run.flags}`" and "cache_mb=" in run.flags
    models = find(tables, "file", "Provenance")[0]
    assert "`Qwen3-30B-A3B-Q4_K_M.gguf`" in [r[1] for r in models["rows"]]
    titles = {t["title"] for t in find(tables, "decode mean")}
    assert "Qwen3-30B-A3B-Q4_K_M on phone" in titles and len(titles) == 3


# ---- real runs ---------------------------------------------------------------------------


PROBE = """\
    name: probe-ab
    description: two I/O paths of a tiny expert file
    engine: moe-probe
    prompt: hello experts
    tokens: 32
    repeat: 2
    baseline: pread
    cooldown: 0
    sample_interval: 0.1s
    configs:
      pread: --io pread --cache-mb 0 --layers 4 --experts 8 --expert-mb 0.0625 --top-k 2
      mmap: --io mmap --cache-mb 1 --layers 4 --experts 8 --expert-mb 0.0625 --top-k 2
    """


def run_matrix(workspace: Path, body: str, *devices: str) -> None:
    (workspace / "m.yaml").write_text(textwrap.dedent(body))
    args = ["run", "m.yaml"] + [a for d in devices for a in ("--device", d)]
    result = CliRunner().invoke(main, args, catch_exceptions=False)
    assert result.exit_code in (0, 1), result.output


def mean_of_means(stats, runs, config: str, device: str | None = None) -> tuple[float, list[float]]:
    xs = [stats.loc[r.id, "mean"] for r in runs
          if r.config == config and r.status == "ok" and (device is None or r.device == device)]
    return statistics.fmean(xs), xs


@pytest.mark.extra("plots")   # every section: its figures too
@pytest.mark.slow
def test_report_of_a_real_run_has_every_section(workspace):
    run_matrix(workspace, PROBE)
    out = workspace / "docs" / "bench.md"
    orch("report", "--matrix", "probe-ab", "-o", str(out))
    text = out.read_text(encoding="utf-8")
    for heading in ("# Benchmark report: probe-ab", "## Results", "### moe-probe on local",
                    "**Throughput**", "**Device pressure**", "**A/B against the baseline**",
                    "## Left out", "## Provenance", "**Devices**", "**Engine builds:**",
                    "**Runs**", "**Prompt**", "**Matrix**"):
        assert heading in text, heading
    assert "two I/O paths of a tiny expert file" in text
    store = Store.open("orch.db")
    runs = Runs(store).current()
    assert len(runs) == 4 and all(r.status == "ok" for r in runs)
    stats = frame(Runs(store).figures(runs))
    tables = md_tables(text)
    thr = by_label(find(tables, "decode mean", "moe-probe on local")[0])
    ab = by_label(find(tables, "verdict")[0])
    base, base_xs = mean_of_means(stats, runs, "pread")
    other, other_xs = mean_of_means(stats, runs, "mmap")
    assert thr["pread"]["decode mean"] == "**%.2f**" % base
    detail = by_label(find(tables, "spread of means", "moe-probe on local")[0])
    assert detail["mmap"]["spread of means"] == "±%.2f, %.2f–%.2f (n=2)" % (
        statistics.stdev(other_xs), min(other_xs), max(other_xs))
    assert ab["pread"]["verdict"] == "baseline"
    # as-written order: Welch; the document's only comparison, so Holm leaves p as it is
    c = compare(base_xs, other_xs)
    delta = ab["Δ pread vs mmap"]
    assert c.method == "welch" and list(delta.values())[1] == delta_cell(c)
    assert delta["verdict"] == (("faster" if c.ratio > 1 else "slower") if c.p_value < 0.05
                                     else "no significant difference (n=2/2)")
    # device facts and engine build
    facts = store.device_by_name("local").facts
    dev = by_label(find(tables, "cores", "Provenance")[0])["local"]
    assert dev["cores"] == facts["cores"] and dev["kernel"] == facts["kernel"]
    assert runs[0].binary_sha256 in text
    session = Sessions(store).get(runs[0].session_id)
    assert session.matrix_sha256 in text and "`m.yaml`" in text
    # every run id of a figure is in provenance, with its exact flags
    prov = by_label(find(tables, "flags", "Provenance")[0])
    assert table_ids(tables) == {int(i) for i in prov} == {r.id for r in runs}
    for r in runs:
        # one code span per option with its values, so an HTML cell wraps between options
        assert prov[str(r.id)]["flags"] == md_flags(r.flags) and \
            prov[str(r.id)]["cooldown (s)"] == "0"
    # figures: valid PNGs, linked relatively
    import matplotlib.image
    pngs = sorted((workspace / "docs" / "bench_files").glob("*.png"))
    assert {p.name.split("-", 2)[-1] for p in pngs} == {"trajectory.png", "distribution.png",
                                                        "device.png"}
    for p in pngs:
        assert p.read_bytes().startswith(PNG) and p.stat().st_size > 1000
        assert matplotlib.image.imread(p).shape[0] > 100
        assert f"](bench_files/{p.name})" in text
    # the same document as HTML; --no-plots leaves the figures out
    html = workspace / "bench.html"
    orch("report", "--format", "html", "-o", str(html), "--no-plots")
    page = html.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and "<table>" in page and "<img" not in page
    assert '<h2 id="provenance">' in page and "**" not in page


@pytest.mark.slow
def test_timed_out_run_is_daggered_and_in_no_aggregate(workspace):
    run_matrix(workspace, """\
        name: hangs
        engine: bmoe
        binary: {local: fake_bmoe.sh}
        models: {m: /m.gguf}
        prompt: p
        tokens: 6
        repeat: 2
        timeout: 1s
        baseline: base
        sample_interval: 0.1s
        configs:
          base: --delay 0.01
          fast: --delay 0.005
          stuck: --hang --delay 0.01
        """)
    store = Store.open("orch.db")
    runs = Runs(store).current()
    stuck = [r for r in runs if r.config == "stuck"]
    assert [r.status for r in stuck] == ["timeout", "timeout"]
    # one more left-out run: a repeat of `fast` marked interrupted (as a lost device would)
    cut = next(r for r in runs if r.config == "fast" and r.repeat_index == 1)
    store.update_run(cut.id, status="interrupted", cause="device unreachable for 120 s")
    text = orch("report", "--no-plots")
    tables = md_tables(text)
    bad = {r.id for r in stuck} | {cut.id}
    thr = by_label(find(tables, "decode mean", "m on local")[0])
    assert "stuck †" in thr and "stuck #2 †" in thr and "fast #2 †" in thr
    assert "stuck" not in thr                       # no aggregate row for a config with no ok run
    assert expand_ids(thr["fast"]["run ids"]) == [r.id for r in runs if r.config == "fast"
                                               and r.id != cut.id]
    for t in find(tables, "verdict") + find(tables, "spread of means"):
        for label, row in by_label(t).items():
            if "†" not in label:
                assert not bad & set(expand_ids(row["run ids"])), (label, row)
    ab = by_label(find(tables, "verdict")[0])
    mean = next(h for h in find(tables, "verdict")[0]["headers"] if h.startswith("decode mean"))
    assert ab["stuck"][mean] == "—"
    assert "no run ended ok" in ab["stuck"]["verdict"]
    stats = frame(Runs(store).figures(Runs(store).current()))
    runs = Runs(store).current()
    base, _ = mean_of_means(stats, runs, "base")
    fast, xs = mean_of_means(stats, runs, "fast")
    assert len(xs) == 1 and ab["fast"][mean] == "**%.2f**" % fast
    # 2 runs: the interval's half-width, not a range that may run below 0 tok/s
    assert ab["base"][mean].startswith("**%.2f** [n = 2: ±" % base)
    assert mean != "decode mean [95% CI]"        # not every interval is over 3+ runs
    # one run a side is not tested; the baseline's repeats give the noise floor to beat
    assert ab["Δ base vs fast"]["verdict"].startswith("not tested (n=2/1); noise floor ±")
    left = text.split("## Left out", 1)[1].split("## Provenance", 1)[0]
    for r in stuck:
        assert f"† run {r.id} on local: timeout — exceeded the cell timeout" in left
    assert f"† run {cut.id} on local: interrupted — device unreachable for 120 s" in left
    assert "left out of every aggregate" in left
    prov = by_label(find(tables, "flags", "Provenance")[0])
    assert prov[str(stuck[0].id)]["status"] == "† timeout: exceeded the cell timeout"


@pytest.mark.slow
def test_compare_two_devices_prints_ratios_from_the_store(workspace):
    run_matrix(workspace, PROBE, "local", "other")
    result = CliRunner().invoke(main, ["compare", "-d", "local", "-d", "other", "--matrix",
                                       "probe-ab", "-o", "cmp.md"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    store = Store.open("orch.db")
    runs = Runs(store).current()
    assert {r.device for r in runs} == {"local", "other"}
    stats = frame(Runs(store).figures(runs))
    table = by_label(md_tables(Path("cmp.md").read_text(encoding="utf-8"))[0])
    for config in ("pread", "mmap"):
        a, xs = mean_of_means(stats, runs, config, "local")
        b, ys = mean_of_means(stats, runs, config, "other")
        # the ratio of geometric means (Welch on the logs: tests/test_compare.py)
        logs = [statistics.fmean(map(math.log, v)) for v in (xs, ys)]
        want = "%.2f×" % math.exp(logs[1] - logs[0])
        assert table[config]["other/local ratio"] == want
        assert table[config]["local tok/s [95% CI]"].startswith("%.2f [" % a)
        line = next(l for l in result.output.splitlines() if f" {config} " in l)
        assert want in line and "%.2f" % a in line
    text = orch("report", "--matrix", "probe-ab", "-d", "local", "-d", "other", "--no-plots")
    titles = [t["title"] for t in find(md_tables(text), "p95")]      # the throughput tables
    assert titles == ["moe-probe on local", "moe-probe on other"]


# ---- escaping, templates -----------------------------------------------------------------

EVIL = "evil | name\nsecond line <script>alert(1)</script> `tick` *star*"


def test_pipes_newlines_and_tags_cannot_break_tables(db, tmp_path):
    folder = tmp_path / "odd"
    folder.mkdir()
    for suffix in (".csv", ".metrics", ".log"):
        shutil.copy(FIX / "2026-07-13" / f"qwen_base_ov{suffix}", folder / f"a|b{suffix}")
    shutil.copy(FIX / "2026-07-13" / "gemma_base_ov.csv", folder)
    orch("import", str(folder), "--db", db)
    store = Store.open(db)
    gemma = next(r for r in Runs(store).current() if r.config == "gemma_base_ov")
    store.update_run(gemma.id, config=EVIL, flags="--x 'a|b'\n--y ``z``", status="failed",
                     cause="exit | code\n7")
    text = orch("report", "--db", db, "--no-plots", "--baseline", "a|b")
    tables = md_tables(text)       # asserts equal cell counts in every row of every table
    thr = all_rows(find(tables, "decode mean"))
    assert r"a\|b" in thr and thr[r"a\|b"]["decode mean"] == "**5.02**"
    evil = next(label for label in thr if "evil" in label)
    assert "\n" not in evil and "<script>" not in text and "&lt;script>" in evil
    assert "``` --x 'a\\|b' --y ``z`` ```" in text        # a code span longer than `` inside
    html_path = tmp_path / "r.html"
    orch("report", "--db", db, "--no-plots", "--format", "html", "-o", str(html_path))
    page = html_path.read_text(encoding="utf-8")
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    rows = re.findall(r"<tr>(.*?)</tr>", page, re.S)
    assert any("evil | name second line" in r for r in rows)
    assert any("<td>a|b</td>" in r for r in rows)
    assert "<code>--x 'a|b' --y ``z``</code>" in page
    # `orch table` uses the same cell escape
    assert r"| a\|b |" in orch("table", "--db", db)


def test_template_directory_and_file_override(db, tmp_path):
    orch("import", str(FIX / "2026-07-13"), "--db", db)
    mine = tmp_path / "tpl"
    mine.mkdir()
    (mine / "header.md.j2").write_text("# Our numbers: {{ header.title }}\n")
    text = orch("report", "--db", db, "--no-plots", "--template", str(mine))
    assert text.startswith("# Our numbers: 2026-07-13") and "## Provenance" in text
    single = tmp_path / "short.md.j2"
    single.write_text("{% for g in groups %}{{ g.throughput | table }}\n{% endfor %}")
    text = orch("report", "--db", db, "--no-plots", "--template", str(single))
    assert text.startswith("| Config | decode mean |") and "Provenance" not in text
    page = tmp_path / "page.html"
    page.write_text("<html><h1>{{ data.title }} {{ '<b>' }}</h1>{{ body }}</html>")
    out = tmp_path / "x.html"
    orch("report", "--db", db, "--no-plots", "--format", "html", "--template", str(page),
         "-o", str(out))
    html = out.read_text(encoding="utf-8")
    assert html.startswith("<html><h1>2026-07-13 &lt;b&gt;</h1>") and "<table>" in html
    single.write_text("{{ no_such_thing }}")
    result = CliRunner().invoke(main, ["report", "--db", db, "--no-plots", "-t", str(single)])
    assert result.exit_code == 2 and "template: 'no_such_thing' is undefined" in result.output


@pytest.mark.slow
def test_bench_report_quick_runs():
    proc = subprocess.run([sys.executable, str(REPO / "bench" / "report"), "--runs", "40"],
                          capture_output=True, text=True, timeout=240,
                          env={**os.environ, "MPLBACKEND": "Agg"})
    assert proc.returncode == 0, proc.stderr
    # bench/run interleaves rounds: the median ratio, with its range over the rounds
    assert re.search(r"report  orch [\d.]+ s  read_sql [\d.]+ s  ratio [\d.]+  "
                     r"(range [\d.]+\.\.[\d.]+  rounds \d+  )?goal <=3  (MET|NOT MET)",
                     proc.stdout), proc.stdout
