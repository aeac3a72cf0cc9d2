"""A run's row label as every view prints it: its config (its matrix's `labels:` entry, else
its design file's `label:`, else its name: results/rows.py), its repeat, and a dagger when it
did not end ok (in no figure of its config); a group's title; the line that says why a run is
in no aggregate (failure_line), and why one was left out on purpose (excluded_line)."""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from orchestrator.stats.status import Status
from orchestrator.stats.values import DAGGER

if TYPE_CHECKING:
    from orchestrator.config.design import Design
    from orchestrator.config.matrix import Matrix
    from orchestrator.results.exclude import Excluded
    from orchestrator.results.listings import RunRow
    from orchestrator.results.report_data import Group, ReportData, RunView


def repeat_shown(index: int) -> str:
    """A run's repeat as shown: 1-based, or "warm-up" for a warm-up run (repeat -1,
    run/decisions.py)."""
    return "warm-up" if index < 0 else str(index + 1)


def repeat_suffix(index: int) -> str:
    """What a run's label adds for its repeat: nothing for the first, " #N" for the others,
    " (warm-up)" for a warm-up run."""
    if index < 0:
        return " (warm-up)"
    return f" #{index + 1}" if index else ""


def labelled(rows: Iterable[RunRow]) -> dict[int, str]:
    """Row labels: the config name (and repeat), with a dagger on runs that did not end ok."""
    out = {}
    for row in rows:
        label = row.config + repeat_suffix(row.repeat_index)
        out[row.id] = label if row.status == Status.OK else f"{label} {DAGGER}"
    return out


def row_labels(rows: Sequence[RunRow], matrix: Matrix | None,
               design: Design | None = None) -> dict[int, str]:
    """`labelled`'s labels (repeat, dagger) with the config's label (the matrix's `labels:`
    entry, else the design file's `label:`) for its name."""
    base = labelled(rows)
    if matrix is None and design is None:
        return base
    from orchestrator.results.rows import config_label   # pydantic: not for `orch show`

    return {r.id: config_label(r.config, matrix, design) + base[r.id][len(r.config):]
            for r in rows}


def run_label(run: RunView) -> str:
    """A report run's label: its config's label (#repeat), with a dagger when it did not end
    ok."""
    row = run.row
    label = run.config_label + repeat_suffix(row.repeat_index)
    return label if run.ok else f"{label} {DAGGER}"


def group_title(group: Group) -> str:
    """`model on device`, the model by its label (a design's `models.NAME.label`, a matrix's
    `labels:` entry) where it has one; the engine stands in for a run without a model."""
    facts = getattr(group, "facts", None)        # a group drawn alone (a test's) may have none
    label = facts.label if facts is not None else None
    return model_on_device(label or group.model, group.device, group.engine)


def series_title(model: str, config: str, device: str) -> str:
    """A config's history as a title: "MODEL CONFIG on DEVICE"; a run without a model (the
    store's "-": moe-probe, a generic engine) is named by its config alone."""
    return f"{model} {config} on {device}" if model and model != "-" else f"{config} on {device}"


def model_on_device(model: str, device: str, engine: str | None) -> str:
    return f"{model if model != '-' else engine or 'engine'} on {device}"


def baseline_line(data: ReportData) -> str | None:
    """The baselines (their labels) as one line for the header: one name when every model
    shares it."""
    chosen = data.baselines
    if len(set(chosen.values())) <= 1:
        return next(iter(chosen.values()), None)
    names = {g.model: g.facts.label for g in data.groups if g.facts is not None and g.facts.label}
    return "; ".join(f"{names.get(model, model)}: {label}" for model, label in chosen.items())


def left_out_line(run: RunView) -> str:
    """Plain text (escaped by the caller) saying why a run is in no figure of its config."""
    tokens = run.figures.tokens if run.figures.tokens is not None else run.figures.n
    return (f"{run_label(run)} run {run.id} on {run.row.device}: {run.row.status}"
            + (f" — {run.row.cause}" if run.row.cause else "")
            + f"; {tokens} token(s) recorded; left out of every aggregate")


def failure_line(row: RunRow) -> str:
    """Why a run that did not end ok is in no aggregate (the terminal and `orch table`)."""
    return (f"{DAGGER} {row.config}: {row.status}" + (f" ({row.cause})" if row.cause else "")
            + f", run {row.id}; left out of every aggregate")


def excluded_line(e: Excluded) -> str:
    """Markdown: a run left out on purpose, why, and who said so (the data escaped)."""
    run = e.run
    from orchestrator.report.format.markdown import md_code, md_escape

    where = f" ({md_code(run.source_file)})" if run.source_file else ""
    source = (f"design file, `exclude:` {md_code(e.pattern)}" if e.from_design
              else md_code(f"--exclude {e.pattern}"))
    return (f"{md_escape(run.config)} {DAGGER} run {run.id}{where} on {md_escape(run.device)}: "
            f"excluded — {md_escape(e.reason)} ({source}); in no table, interval, A/B row, "
            f"finding or plot")
