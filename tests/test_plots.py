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
              failed: bool = False, trim: int = 0) -> tuple[SimpleNamespace, SimpleNamespace]:
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
                                  row=SimpleNamespace(id=rid, config=name, status=status,
                                                      session_id=1))
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
                                       values={"mean": mean}, label=LONG if i == 0 else name))
    group = SimpleNamespace(model="m", device="phone", engine=None, slug="1-m-phone", runs=runs, configs=configs)
    data = SimpleNamespace(groups=[group], matrices={1: {"labels": {"c00": LONG}}},
                           tokens=pd.DataFrame(tok), samples=pd.DataFrame(smp), trim=trim,
                           designs={})
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


def collection_colors(ax) -> dict[str, str]:
    """The colour of each config's run lines in a device panel (gid "CONFIG repeat K" or
    "CONFIG"), one per config: a config whose repeats differ in colour fails here."""
    from matplotlib.collections import LineCollection
    from matplotlib.colors import to_hex

    out: dict[str, str] = {}
    for c in ax.collections:
        if isinstance(c, LineCollection):
            config = c.get_gid().split(" repeat ")[0]
            color = to_hex(c.get_colors()[0])
            assert out.setdefault(config, color) == color, config
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
        colors = collection_colors(ax)
        assert len(colors) == 13 and len(set(colors.values())) == 13   # 12 configs + † runs
    assert "runs left out (†)" in dev_caption
    for fig, _ in figs.values():
        fig.clf()


def test_few_configs_share_one_panel_with_the_warm_up_unsmoothed_and_the_mean_marked():
    data, group = fake_data(3)
    figs = by_kind(data, group)
    traj, caption = figs["trajectory"]
    assert "16 tokens" in caption and "one panel per config" not in caption
    warm, run = traj.axes
    lines = [line for line in warm.get_lines() if line.get_gid() in ("c00", "c01", "c02")]
    assert len(lines) == 3 and len({line.get_color() for line in lines}) == 3
    for line in lines:
        assert line.get_markevery() == slice(0, 32)       # the first 32 tokens one by one
        # warm-up (5 tokens at a quarter of the rate) shows unsmoothed
        y = line.get_ydata()
        assert y[0] < 0.5 * y[-1]
    for line in [line for line in run.get_lines() if line.get_gid() in ("c00", "c01", "c02")]:
        y = line.get_ydata()                              # the rolling rate after it: steady
        assert np.ptp(y[16:]) < 0.2 * y[16]
    assert_legends_outside(traj)
    first = run.get_legend().get_texts()[0]
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


# ---- plots a reader can read (issue 36, item 7) ------------------------------------------

def legend_texts(ax) -> list[str]:
    legend = ax.get_legend()
    return [" ".join(t.get_text().split()) for t in legend.get_texts()] if legend else []


def trim_spans(ax) -> list[tuple[float, float]]:
    """(start, end) in data x of each shaded trim span of an axes."""
    out = []
    for patch in ax.patches:
        if patch.get_gid() == "trim":
            xs = patch.get_path().transformed(patch.get_patch_transform()).vertices[:, 0] \
                if hasattr(patch, "get_patch_transform") else patch.get_xy()[:, 0]
            out.append((float(min(xs)), float(max(xs))))
    return out


def test_device_figure_gives_each_repeat_its_own_marker_and_line_style_in_its_configs_colour():
    data, group = fake_data(3, repeats=3)
    fig, caption = by_kind(data, group)["device"]
    for ax in fig.axes:
        colors = collection_colors(ax)           # one colour per config, whatever the repeat
        assert len(colors) == 3 and len(set(colors.values())) == 3
        for config in ("c00", "c01", "c02"):
            marks = {line.get_gid(): line.get_marker() for line in ax.get_lines()
                     if line.get_gid() and line.get_gid().startswith(f"{config} repeat")}
            assert len(marks) == 3 and len(set(marks.values())) == 3, marks
            styles = {str(c.get_linestyle()) for c in ax.collections
                      if c.get_gid().startswith(f"{config} repeat")}
            assert len(styles) == 3
    assert {"repeat 1", "repeat 2", "repeat 3"} <= set(legend_texts(fig.axes[0]))
    assert "each repeat its own marker" in caption
    # without repeats no repeat markers, no repeat legend
    data, group = fake_data(3, repeats=1)
    fig, caption = by_kind(data, group)["device"]
    assert not [t for t in legend_texts(fig.axes[0]) if t.startswith("repeat")]
    assert "repeat" not in caption


def test_many_configs_keep_one_colour_each_and_neighbours_far_apart():
    styles = plots.styles(16)
    colors = [s.color for s in styles]
    assert len(set(colors)) == 16
    # configs listed next to each other (the ones compared) differ in hue, not by a shade
    gaps = [np.abs(np.subtract(a[:3], b[:3])).sum() for a, b in zip(colors, colors[1:])]
    assert min(gaps) > 0.3


def test_legends_and_panels_name_configs_by_their_labels_key_only_without_one():
    data, group = fake_data(3, tokens=60, repeats=1)
    design = SimpleNamespace(configs={"c01": SimpleNamespace(label="design label of c01"),
                                      "c00": SimpleNamespace(label="not this: the matrix's")})
    data.designs = {1: design}
    figs = by_kind(data, group)
    want = [LONG, "design label of c01", "c02"]     # matrix label, design label, key
    traj = figs["trajectory"][0]
    assert legend_texts(traj.axes[-1])[:3] == want
    dist = figs["distribution"][0]
    assert [" ".join(t.get_text().split()) for t in dist.axes[0].get_yticklabels()] == want
    assert legend_texts(figs["device"][0].axes[0])[:3] == want


def test_the_trim_is_shaded_in_every_token_axis_and_stated_in_every_caption():
    data, group = fake_data(3, tokens=80, trim=40)
    figs = by_kind(data, group)
    warm, run = figs["trajectory"][0].axes
    # the trim spans both panels of the broken axis, each panel keeps its own range
    assert trim_spans(warm) == [(0.5, 40.5)] and trim_spans(run) == [(0.5, 40.5)]
    assert warm.get_xlim() == (0.5, 32.5) and run.get_xlim()[0] == 32.5
    assert "shaded: first 40 tokens left out (trim 40)" in legend_texts(run)
    for kind, (fig, caption) in figs.items():
        assert "trim 40: the first 40 tokens of each run are left out of the statistics" \
            in caption, kind
    # the distribution leaves out what the tables leave out: its first box's median is that
    # of the tokens after the trim
    dist = figs["distribution"][0].axes[0]
    ids = group.configs[0].ids
    whole = plots.plot_data.per_token_tps(data.tokens, ids)
    cut = plots.plot_data.per_token_tps(data.tokens, ids, 40)
    assert len(cut) == len(whole) - 2 * 40            # two repeats, 40 tokens each
    caps = {round(float(x), 6) for line in dist.get_lines() for x in line.get_xdata()}
    assert round(float(np.median(cut)), 6) in caps
    assert round(float(np.median(whole)), 6) not in caps
    # no trim: nothing shaded, and the caption says so
    data, group = fake_data(3, tokens=80)
    figs = by_kind(data, group)
    assert not any(trim_spans(ax) for ax in figs["trajectory"][0].axes)
    for kind, (_, caption) in figs.items():
        assert "trim 0: every token is in the statistics" in caption, kind


def test_the_trim_is_shaded_per_token_on_small_multiples_and_on_per_token_memory():
    data, group = fake_data(8, tokens=70, repeats=1, trim=20)
    traj, caption = by_kind(data, group)["trajectory"]
    panels = [ax for ax in traj.axes if ax.get_visible()]
    assert all(trim_spans(ax) == [(0.5, 20.5)] for ax in panels)
    assert "trim 20" in traj.get_suptitle() and "trim 20" in caption
    # an import's memory per token: the x axis is the token, so the trim is drawn there too
    tok = data.tokens.assign(extra=[{"rss_mib": 2000.0 + s, "mem_available_mib": 5000.0 - s}
                                    for s in data.tokens["seq"]])
    data = SimpleNamespace(**{**vars(data), "tokens": tok, "samples": None})
    dev, dev_caption = by_kind(data, group)["device"]
    assert dev.axes[-1].get_xlabel() == "token"
    assert all(trim_spans(ax) == [(0.5, 20.5)] for ax in dev.axes)
    assert "trim 20" in dev_caption and "(shaded)" in dev_caption


def test_the_warm_up_gets_room_a_broken_axis_up_to_six_configs_a_log_axis_past_them():
    data, group = fake_data(6, tokens=120, repeats=1)
    traj, caption = by_kind(data, group)["trajectory"]
    warm, run = traj.axes
    assert warm.get_xlim() == (0.5, 32.5)            # the first 32 tokens on an axis of their own
    for line in warm.get_lines():
        if line.get_gid() in {a.config for a in group.configs}:
            assert list(line.get_xdata()) == list(range(1, 33))
    for line in run.get_lines():
        if line.get_gid() in {a.config for a in group.configs}:
            assert min(line.get_xdata()) == 33
    assert warm.bbox.width > 0.25 * (warm.bbox.width + run.bbox.width)
    assert "axis of its own" in caption
    data, group = fake_data(7, tokens=120, repeats=1)
    traj, caption = by_kind(data, group)["trajectory"]
    panels = [ax for ax in traj.axes if ax.get_visible()]
    assert len(panels) == 7 and all(ax.get_xscale() == "log" for ax in panels)
    assert "logarithmic" in caption
    # a run too short for a rolling rate: one panel, every token a marker
    data, group = fake_data(3, tokens=30, repeats=1)
    traj, caption = by_kind(data, group)["trajectory"]
    assert len(traj.axes) == 1 and "every token, unsmoothed" in caption


@pytest.mark.slow
def test_imported_studies_plot_design_labels_repeats_and_the_trim(db, tmp_path):
    design = FIX.parent / "designs" / "2026-07-21-pinned-dense-ab.yaml"
    orch("import", str(FIX / "2026-07-21-pinned-dense-ab"), "--design", str(design), "--db", db)
    orch("import", str(FIX / "2026-07-20-cache-replay"), "--db", db)  # qwen-lru/-lfu: 2 each
    store = Store.open(db)
    data = context.build(store, Runs(store).current(1), trim=50)
    for group in data.groups:
        figs = by_kind(data, group)
        labels = {a.config: a for a in group.configs}
        legend = legend_texts(figs["trajectory"][0].axes[-1])
        assert legend[:len(labels)] == [
            " ".join(plots.plot_data.config_names(data, group)[c].split()) for c in labels]
        assert "ahwb-long" not in legend and "anon-long" not in legend   # labels, not keys
        for kind, (_, caption) in figs.items():
            assert "trim 50: the first 50 tokens" in caption, kind
        for fig, _ in figs.values():
            fig.clf()
    assert any("ahwb, long generation" in t for g in data.groups
               for t in plots.plot_data.config_names(data, g).values())
    data = context.build(store, Runs(store).current(2))
    (qwen,) = [g for g in data.groups if "qwen" in g.model.lower()]
    dev, caption = by_kind(data, qwen)["device"]
    for ax in dev.axes:
        assert set(collection_colors(ax)) == {"qwen-lru", "qwen-lfu"}
        marks = {line.get_gid(): line.get_marker() for line in ax.get_lines()
                 if " repeat " in (line.get_gid() or "")}
        assert {m for g, m in marks.items() if g.startswith("qwen-lru")} == {"o", "s"}
    assert "each repeat its own marker" in caption and "trim 0" in caption
