"""The report's figures: what each shows, legends outside, one colour per line, the mean
marked, captions that name only what was measured, and HTML with its images inside."""
from __future__ import annotations

import base64
import re
import textwrap
from types import SimpleNamespace

from orchestrator.stats.figures import NOT_MEASURED

import numpy as np
import pandas as pd
import pytest
from cli_helpers import orch_ok as orch
from click.testing import CliRunner
from test_analysis_oracle import FIX

from orchestrator.cli import main
from orchestrator.db.runs import Runs
from orchestrator.db.store import Store
from orchestrator.report.document import plots
from orchestrator.results import report_data as context

pytestmark = pytest.mark.extra("plots")   # every test here draws with matplotlib

PNG = b"\x89PNG\r\n\x1a\n"
LONG = "mmap+top-k-expert-cache with the adaptive budget and eight reader threads"


# ---- helpers -----------------------------------------------------------------------------

def fake_data(n_configs: int, tokens: int = 80, repeats: int = 2, temperature: bool = False,
              failed: bool = False) -> tuple[SimpleNamespace, SimpleNamespace]:
    """(report data, its one group) as plots reads them: configs c00.. with `repeats` ok runs
    of `tokens` tokens (config i decodes at about 10 + i tok/s after a slow warm-up), agent
    samples every 0.5 s, and one failed run of c00 when `failed`."""
    rng = np.random.default_rng(3)
    runs, configs, tok, smp = [], [], [], []
    rid = 0
    for i in range(n_configs):
        name = f"c{i:02d}"
        ok = []
        for rep in range(repeats + (1 if failed and i == 0 else 0)):
            rid += 1
            status = "ok" if rep < repeats else "timeout"
            # one-shot runs: their figures have no turns (no session figure)
            run = SimpleNamespace(id=rid, ok=status == "ok", figures=NOT_MEASURED,
                                  row=SimpleNamespace(id=rid, config=name, status=status))
            runs.append(run)
            if run.ok:
                ok.append(run)
            steady = 1000.0 / (10 + i)
            for s in range(tokens if run.ok else tokens // 3):
                wall = steady * (4.0 if s < 5 else 1.0) * rng.uniform(0.8, 1.2)
                tok.append({"run_id": rid, "seq": s, "wall_ms": wall, "extra": None})
            for s in range(12):
                smp.append({"run_id": rid, "seq": s, "t_ms": 500 * s,
                            "rss_kb": 2_000_000 + 10_000 * s + 1000 * i, "hwm_kb": None,
                            "mem_avail_kb": 6_000_000 - 20_000 * s,
                            "cpu_temp_mC": 45_000 + 300 * s if temperature else None,
                            "batt_temp_dC": None})
        mean = len(ok) * tokens / sum(t["wall_ms"] for t in tok if t["run_id"] in
                                      {r.id for r in ok}) * 1000.0
        configs.append(SimpleNamespace(config=name, runs=ok, ids=[r.id for r in ok],
                                       values={"mean": mean}))
    group = SimpleNamespace(model="m", device="phone", engine=None, slug="1-m-phone", runs=runs, configs=configs)
    data = SimpleNamespace(groups=[group], matrices={1: {"labels": {"c00": LONG}}},
                           tokens=pd.DataFrame(tok), samples=pd.DataFrame(smp))
    return data, group


def by_kind(data, group) -> dict[str, tuple]:
    return {kind: (fig, caption) for kind, fig, caption in plots.figures(data, group)}


def series_colors(ax) -> list[str]:
    """The colour of every data series of an axes: config lines and run collections (not the
    sample points drawn over a collection, nor the warm-up mark)."""
    from matplotlib.collections import LineCollection
    from matplotlib.colors import to_hex

    out = [to_hex(line.get_color()) for line in ax.get_lines()
           if line.get_gid() and not line.get_gid().endswith(" samples")
           and line.get_gid() not in ("warm-up", "mean")]
    out += [to_hex(c.get_colors()[0]) for c in ax.collections if isinstance(c, LineCollection)]
    return out


def assert_legends_outside(fig) -> None:
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        legend = ax.get_legend()
        if legend is not None:
            assert not legend.get_window_extent(renderer).overlaps(ax.get_window_extent(renderer))


def texts(fig) -> str:
    """Every piece of text of a figure: titles, tick labels, axis labels, legends."""
    return " ".join(t.get_text() for t in fig.findobj(lambda a: hasattr(a, "get_text")))


# ---- figures of synthetic data -----------------------------------------------------------

@pytest.mark.slow
def test_many_configs_get_small_multiples_distinct_colours_and_whole_labels():
    data, group = fake_data(12, temperature=True, failed=True)
    figs = by_kind(data, group)
    assert set(figs) == {"trajectory", "distribution", "device"}
    traj, caption = figs["trajectory"]
    panels = [ax for ax in traj.axes if ax.get_visible()]
    assert len(panels) == 12                               # one panel per config
    assert len({ax.get_ylim() for ax in panels}) == 1      # shared y axis
    colors = [c for ax in panels for c in series_colors(ax)]
    assert len(colors) == 12 and len(set(colors)) == 12    # never one colour for two configs
    assert "first 32 tokens" in caption and "one panel per config" in caption
    for kind, (fig, _) in figs.items():
        assert_legends_outside(fig)
        words = " ".join(texts(fig).split())
        assert "…" not in words, kind                      # wrapped, never cut
    assert LONG in " ".join(texts(figs["distribution"][0]).split())
    dev, dev_caption = figs["device"]
    ylabels = [ax.get_ylabel() for ax in dev.axes]
    assert any("CPU temperature" in y for y in ylabels) and "CPU temperature" in dev_caption
    for ax in dev.axes:
        colors = series_colors(ax)
        assert len(colors) == 13 and len(set(colors)) == 13   # 12 configs + the † runs
    assert "runs left out (†)" in dev_caption
    for fig, _ in figs.values():
        fig.clf()


def test_few_configs_share_one_panel_with_the_warm_up_unsmoothed_and_the_mean_marked():
    data, group = fake_data(3)
    figs = by_kind(data, group)
    traj, caption = figs["trajectory"]
    assert "16 tokens" in caption and "one panel per config" not in caption
    (ax,) = traj.axes
    lines = [line for line in ax.get_lines() if line.get_gid() in ("c00", "c01", "c02")]
    assert len(lines) == 3 and len({line.get_color() for line in lines}) == 3
    for line in lines:
        assert line.get_markevery() == slice(0, 32)       # the first 32 tokens one by one
        y = line.get_ydata()
        # warm-up (5 tokens at a quarter of the rate) shows unsmoothed, the rolling rate
        # after it is steady
        assert y[0] < 0.5 * y[40] and np.ptp(y[48:]) < 0.2 * y[48]
    assert_legends_outside(traj)
    first = ax.get_legend().get_texts()[0]
    assert first.get_text().replace("\n", " ") == LONG
    dist, dist_caption = figs["distribution"]
    (ax,) = dist.axes
    (mean,) = [line for line in ax.get_lines() if line.get_gid() == "mean"]
    assert list(mean.get_xdata()) == pytest.approx([c.values["mean"] for c in group.configs])
    assert "mean" in dist_caption and "median" in dist_caption
    assert_legends_outside(dist)
    dev, dev_caption = figs["device"]
    assert "temperature" not in dev_caption.lower()        # no sensor: no word of one
    assert "temperature" not in " ".join(ax.get_ylabel() for ax in dev.axes).lower()
    assert [ax.get_ylabel() for ax in dev.axes] == ["process RSS (GiB)", "free RAM (GiB)"]
    assert dev.axes[-1].get_xlabel() == "seconds since the run started"


# ---- imported sessions: per-token memory columns -----------------------------------------

@pytest.fixture
def db(tmp_path):
    return str(tmp_path / "orch.db")


@pytest.mark.slow
def test_imported_sessions_plot_memory_per_token_where_the_csv_has_it(db, tmp_path):
    orch("import", str(FIX / "2026-07-17"), "--db", db)      # v1 CSVs: rss_mib, mem_available_mib
    orch("import", str(FIX / "2026-07-13"), "--db", db)      # 9 columns: no memory per token
    store = Store.open(db)
    for session, memory in ((1, True), (2, False)):
        data = context.build(store, Runs(store).current(session))
        for group in data.groups:
            figs = by_kind(data, group)
            assert {"trajectory", "distribution"} <= set(figs)
            assert ("device" in figs) == memory
            if memory:
                fig, caption = figs["device"]
                assert fig.axes[-1].get_xlabel() == "token"
                assert "rss_mib" in caption and "temperature" not in caption.lower()
                for ax in fig.axes:
                    colors = series_colors(ax)
                    assert len(colors) == len(group.configs) == len(set(colors))
                assert_legends_outside(fig)
            for fig, _ in figs.values():
                fig.clf()
    out = tmp_path / "imp.md"
    orch("report", "1", "--db", db, "-o", str(out))
    pngs = sorted((tmp_path / "imp_files").glob("*-device.png"))
    assert len(pngs) == 3 and all(p.read_bytes().startswith(PNG) for p in pngs)


# ---- a real run: markdown with files, HTML self-contained --------------------------------

@pytest.mark.slow
def test_run_report_markdown_links_files_and_html_embeds_them(workspace):
    (workspace / "m.yaml").write_text(textwrap.dedent("""\
        name: plots
        engine: bmoe
        binary: {local: fake_bmoe.sh}
        models: {m: /m.gguf}
        prompt: p
        tokens: 40
        repeat: 2
        timeout: 2s
        sample_interval: 0.1s
        configs:
          base: --delay 0.005
          stuck: --hang --delay 0.01
        """))
    result = CliRunner().invoke(main, ["run", "m.yaml"], catch_exceptions=False)
    assert result.exit_code in (0, 1), result.output
    orch("report", "-o", "r.md")
    text = (workspace / "r.md").read_text(encoding="utf-8")
    pngs = sorted((workspace / "r_files").glob("*.png"))
    assert {p.name.rsplit("-", 1)[1] for p in pngs} == {"trajectory.png", "distribution.png",
                                                        "device.png"}
    for p in pngs:
        assert p.read_bytes().startswith(PNG) and f"](r_files/{p.name})" in text
    # captions say temperature only where a sensor was read
    store = Store.open("orch.db")
    samples = store.frame("sample", [r.id for r in Runs(store).current()])
    measured = samples[["cpu_temp_mC", "batt_temp_dC"]].notna().any().any()
    captions = re.findall(r"^\*(.+)\.\*$|^\*\*Device pressure\*\* (.+)$", text, re.MULTILINE)
    assert captions
    assert any("temperature" in c.lower() for pair in captions for c in pair) == measured
    # HTML: one file, every image inside it
    orch("report", "--format", "html", "-o", "x.html")
    page = (workspace / "x.html").read_text(encoding="utf-8")
    assert not (workspace / "x_files").exists()
    sources = re.findall(r'src="([^"]*)"', page)
    assert len(sources) == 3
    for src in sources:
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1]).startswith(PNG)
