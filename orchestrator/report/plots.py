"""The report's figures (matplotlib, Agg): PNG files in `<name>_files/` next to the document.

Per (model, device) group: the per-token tok/s over the run for each config (warm-up
trajectory), the tok/s distribution per config, and CPU temperature / free RAM over time for
each run. A figure is drawn only where there is data for it; runs that did not end ok are left
out of the throughput figures (they are in no aggregate) but drawn dashed in the resource one.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np
import pandas as pd

from orchestrator.record import KIB_PER_GIB
from orchestrator.report.context import Group, ReportData


@dataclass
class Plot:
    caption: str
    path: Path          # the PNG written
    link: str           # relative to the document, URL-quoted


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")         # no display; also safe when called from a worker thread
    import matplotlib.pyplot as plt

    return plt


def _label(text: str, width: int = 28) -> str:
    # mathtext would read "$...$" in a config name as a formula (and may fail to parse it)
    text = " ".join(str(text).split()).replace("$", r"\$")
    return text if len(text) <= width else text[: width - 1] + "…"


def _tps(tokens: pd.DataFrame) -> pd.DataFrame:
    wall = pd.to_numeric(tokens["wall_ms"], errors="coerce")
    # speculative groups put the cost on one row and 0 on the others: no rate for those rows
    out = tokens.loc[wall > 0, ["run_id", "seq"]].copy()
    out["tps"] = 1000.0 / wall[wall > 0]
    return out


def _save(fig: Any, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=96)
    _pyplot().close(fig)


def _throughput(group: Group, tps: pd.DataFrame, out: Path, plt: Any) -> list[Path]:
    config_of = {r.id: agg.config for agg in group.configs for r in agg.runs}
    rows = tps[tps["run_id"].isin(config_of.keys())]
    if rows.empty:
        return []
    rows = rows.assign(config=rows["run_id"].map(config_of))
    present = set(rows["config"].unique())
    order = [a.config for a in group.configs if a.config in present]
    written = []
    # warm-up trajectory: per config the mean over its repeats at each token (thin), and a
    # rolling mean over 16 tokens (thick) once runs are long enough for one to mean anything:
    # single tokens swing 2-3x, which hides the warm-up the figure is for
    fig, ax = plt.subplots(figsize=(8, 4))
    per_step = rows.groupby(["config", "seq"], sort=False)["tps"].mean()
    for config in order:
        s = per_step.loc[config].sort_index()
        x = s.index.to_numpy() + 1
        if len(s) >= 64:
            line, = ax.plot(x, s.to_numpy(), lw=0.6, alpha=0.35)
            ax.plot(x, s.rolling(16, min_periods=4).mean().to_numpy(), lw=1.8,
                    color=line.get_color(), label=_label(config))
        else:
            ax.plot(x, s.to_numpy(), lw=1.2, marker=".", ms=3, label=_label(config))
    ax.set_xlabel("token")
    ax.set_ylabel("tok/s (1000 / wall_ms)")
    ax.set_title(_label(f"Per-token decode rate: {group.title}", 80))
    ax.grid(alpha=0.3)
    # a fixed corner: "best" searches every line's points, seconds for 1,000 runs
    ax.legend(fontsize="small", ncol=2 if len(order) > 6 else 1, loc="lower right")
    path = out / f"{group.slug}-trajectory.png"
    _save(fig, path)
    written.append(path)
    # distribution of the per-token rate, all ok repeats of a config pooled
    fig, ax = plt.subplots(figsize=(min(12, max(6, 0.6 * len(order) + 2)), 4))
    data = [rows.loc[rows["config"] == c, "tps"].to_numpy() for c in order]
    # whiskers at p5/p95, the table's columns; single fast tokens (1000/wall of a tiny wall)
    # would otherwise set the scale and flatten every box
    ax.boxplot(data, whis=(5, 95), showfliers=False)
    ax.set_xticks(np.arange(1, len(order) + 1), [_label(c, 18) for c in order],
                  rotation=30 if len(order) > 4 else 0, ha="right" if len(order) > 4 else "center")
    ax.set_ylabel("tok/s per token")
    ax.set_title(_label(f"Per-token rate distribution: {group.title}", 80))
    ax.grid(alpha=0.3, axis="y")
    path = out / f"{group.slug}-distribution.png"
    _save(fig, path)
    written.append(path)
    return written


def _resources(group: Group, samples: pd.DataFrame, out: Path, plt: Any) -> list[Path]:
    ids = {r.id: r for r in group.runs}
    s = samples[samples["run_id"].isin(ids.keys())]
    if s.empty or "t_ms" not in s:
        return []
    panels = [(col, label, scale) for col, label, scale in (
        ("cpu_temp_mC", "CPU temperature (°C)", 1000.0),
        ("mem_avail_kb", "free RAM (GiB)", float(KIB_PER_GIB)))
        if col in s and pd.to_numeric(s[col], errors="coerce").notna().any()]
    if not panels:
        return []
    fig, axes = plt.subplots(len(panels), 1, figsize=(8, 2.6 * len(panels) + 0.6), sharex=True,
                             squeeze=False)
    from matplotlib.collections import LineCollection

    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    config_color = {a.config: colors[i % len(colors)] for i, a in enumerate(group.configs)}
    s = s.sort_values(["run_id", "t_ms"], kind="stable")
    t = pd.to_numeric(s["t_ms"], errors="coerce").to_numpy() / 1000.0
    run_ids = s["run_id"].to_numpy()
    bounds = np.flatnonzero(np.diff(run_ids)) + 1          # rows of each run: one segment
    starts, ends = np.r_[0, bounds], np.r_[bounds, len(run_ids)]
    named: set[str] = set()
    for ax, (col, _, scale) in zip(axes[:, 0], panels):
        y = pd.to_numeric(s[col], errors="coerce").to_numpy() / scale
        # one LineCollection per panel, not one plot() per run: 1,000 runs draw in a blink
        segs, cols, styles, point_cols = [], [], [], []
        for a, b in zip(starts, ends):
            run = ids[run_ids[a]]
            keep = ~np.isnan(y[a:b])
            segs.append(np.column_stack([t[a:b][keep], y[a:b][keep]]))
            cols.append(config_color.get(run.row.config, "k"))
            styles.append("solid" if run.ok else "dashed")
            point_cols += [cols[-1]] * int(keep.sum())
        ax.add_collection(LineCollection(segs, colors=cols, linestyles=styles, linewidths=1))
        pts = np.concatenate(segs) if segs else np.empty((0, 2))
        ax.scatter(pts[:, 0], pts[:, 1], s=4, c=point_cols)
        ax.autoscale_view()
    present = {ids[r].row.config for r in run_ids[starts]}
    for a in group.configs:        # legend entries: one per config that has samples
        if a.config in present:
            axes[0, 0].plot([], [], color=config_color[a.config], label=_label(a.config))
            named.add(a.config)
    for ax, (_, ylabel, _) in zip(axes[:, 0], panels):
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    axes[0, 0].set_title(_label(f"CPU temperature and free RAM over each run: {group.title}", 80))
    axes[0, 0].legend(fontsize="small", loc="upper right", ncol=2 if len(named) > 6 else 1)
    axes[-1, 0].set_xlabel("seconds since the run started (dashed: † runs)")
    path = out / f"{group.slug}-device.png"
    _save(fig, path)
    return [path]


CAPTIONS = {"trajectory": "Per-token tok/s over the run (warm-up trajectory; mean of the "
                          "repeats; thick: 16-token rolling mean)",
            "distribution": "Per-token tok/s distribution per config (ok runs pooled; box = "
                            "quartiles, whiskers = p5–p95)",
            "device": "CPU temperature and free RAM over each run (from the agent's samples)"}


def draw(data: ReportData, doc: Path) -> dict[str, list[Plot]]:
    """Write the figures for `doc` (the report file); group slug -> its plots."""
    plt = _pyplot()
    out = doc.parent / f"{doc.stem}_files"
    out.mkdir(parents=True, exist_ok=True)
    tps = _tps(data.tokens) if data.tokens is not None and len(data.tokens) else None
    result: dict[str, list[Plot]] = {}
    for group in data.groups:
        paths: list[Path] = []
        if tps is not None:
            paths += _throughput(group, tps, out, plt)
        if data.samples is not None and len(data.samples):
            paths += _resources(group, data.samples, out, plt)
        result[group.slug] = [
            Plot(CAPTIONS[p.stem.rsplit("-", 1)[1]], p, quote(f"{out.name}/{p.name}"))
            for p in paths]
    return result
