"""`orch history`: a config's figure over the sessions of a matrix, with its change points."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from orchestrator.cli.handler import friendly
from orchestrator.cli.options import console, db_option

_METRICS = ("mean", "median", "p5", "p95", "min", "max", "prefill_tps", "steady_mean")


@click.command()
@click.option("--matrix", "-m", required=True, help="The matrix (its name) whose sessions to "
                                                    "follow.")
@click.option("--config", "-c", help="Only this config (default: every config).")
@click.option("--device", "-d", help="Only this device (default: every device).")
@click.option("--metric", type=click.Choice(_METRICS), default="mean", show_default=True,
              help="The per-run figure (tok/s unless the name says otherwise).")
@click.option("--order", type=click.Choice(["time", "build"]), default="time",
              show_default=True, help="Order the points by session start, or by engine "
                                      "build (versions numerically), then start.")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table",
              show_default=True)
@click.option("--plot", type=click.Path(dir_okay=False), metavar="FILE",
              help="Also draw the series (PNG, or SVG/PDF by the name's suffix; needs "
                   "matplotlib, orch's `plots` extra).")
@db_option
@friendly
def history(matrix: str, config: str | None, device: str | None, metric: str, order: str,
            fmt: str, plot: str | None, db: str | None) -> None:
    """The series of a metric over the sessions of MATRIX, one point per session and engine
    build with its 95% interval (over the session's runs, or one run's repetitions), and the
    change points found in it: PELT (the `ruptures` package) on the log figures with a penalty
    scaled to the series' noise, each step confirmed by Welch's test between the two segments
    (docs/history.md). Each change point names the first session after the step, the step's
    size and the builds on each side."""
    from orchestrator.db.store import Store
    from orchestrator.results.history import history as series_of
    from orchestrator.results.history import records

    series = series_of(Store.open(db, create=False), matrix, config, device, metric, order)
    if plot:
        draw(series, Path(plot))
    if fmt == "json":
        sys.stdout.write(json.dumps(records(series), indent=1, default=str) + "\n")
        return
    for s in series:
        print_series(s)
    if plot:
        console.print(f"wrote {plot}", highlight=False)


def print_series(s: Any) -> None:
    from rich.table import Table
    from rich.text import Text

    from orchestrator.report.format.formatters import when

    table = Table(title=f"{s.metric}: {s.model} {s.config} on {s.device}", title_justify="left")
    for name, right in (("session", True), ("started (UTC)", False), ("build", False),
                        (s.metric, True), ("95% CI", True), ("n", True), ("", False),
                        ("notes", False)):
        table.add_column(name, justify="right" if right else "left")
    starts = {c.session for c in s.change_points}
    for p in s.points:
        iv = p.interval
        ci = f"{iv.low:.2f}–{iv.high:.2f}" if iv.low is not None else "-"
        mark = "◀ step" if p.session in starts else ""
        notes = "; ".join(n.text for n in p.notes)
        table.add_row(Text(str(p.session)), Text(when(p.started_at)), Text(p.build or "-"),
                      Text(f"{iv.mean:.2f}" if iv.mean is not None else "-"), Text(ci),
                      Text(f"{iv.n} {p.basis}" + (f", {p.failed} failed" if p.failed else "")),
                      Text(mark), Text(notes))
    console.print(table)
    if not s.change_points:
        console.print("no change point", highlight=False)
    for c in s.change_points:
        ack = (f"; acknowledged: {c.ack.text}, {when(c.ack.created_at)[:10]}" if c.ack else "")
        console.print(Text(
            f"change point at session {c.session}: {c.step.before:.2f} -> "
            f"{c.step.after:.2f} ({c.step.delta_pct:+.1f}%, p={c.step.p_value:.2g}); builds "
            f"{c.build_before or '-'} -> {c.build_after or '-'}; id {c.id}{ack}"))


def index_of(s: Any, session: int) -> int:
    return next(i for i, p in enumerate(s.points) if p.session == session)


def draw(series: list[Any], out: Path) -> None:
    """One panel per series: the points with their intervals, the fitted levels, and a dashed
    line at each change point."""
    try:
        import matplotlib
    except ImportError:
        raise click.ClickException("--plot needs matplotlib (pip install 'orch[plots]')") \
            from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(series), 1, figsize=(8, 2.6 * len(series)), squeeze=False)
    for ax, s in zip(axes[:, 0], series):
        xs = list(range(len(s.points)))
        known = [(x, p.interval) for x, p in zip(xs, s.points) if p.interval.mean is not None]
        err = [[iv.mean - iv.low if iv.low is not None else 0 for _, iv in known],
               [iv.high - iv.mean if iv.high is not None else 0 for _, iv in known]]
        ax.errorbar([x for x, _ in known], [iv.mean for _, iv in known], yerr=err, fmt="o",
                    ms=3, capsize=2)
        cuts = [index_of(s, c.session) for c in s.change_points]
        bounds = [0, *cuts, len(xs)]
        for j, c in enumerate(s.change_points):     # the fitted levels on each side of a step
            ax.hlines([c.step.before, c.step.after], [bounds[j] - 0.3, cuts[j] - 0.5],
                      [cuts[j] - 0.5, bounds[j + 2] - 0.7], color="tab:red", lw=1)
        for c in s.change_points:
            ax.axvline(index_of(s, c.session) - 0.5, ls="--", color="tab:red")
        ax.set_xticks(xs, [f"{p.session}\n{p.build or ''}" for p in s.points], fontsize=6)
        ax.set_title(f"{s.model} {s.config} on {s.device}", fontsize=9)
        ax.set_ylabel(s.metric)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)
