"""`orch table`: a stored session's per-run tables as markdown, csv or json.

Each (model, device) group opens with the model's facts (results/model_facts.py), then the
tables asked for; rows carry the matrix's labels (`labels:`), imported runs their file stem
or their design file's config name. An import's design file (config/design.py) adds, in
markdown only, its session note and a Configs legend (label, flags, files) at the top and its
model and config notes under each group's tables.
Table kinds: "model" (the facts), the specs of report/format/columns.py (TABLES: their columns and
captions), and "ab" (results/ab.py).
"""
from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

import pandas as pd

from orchestrator.report.format import ab_rows as ab_table
from orchestrator.report.format import design_notes, grid
from orchestrator.report.table import runs as tables
from orchestrator.report.format import turn_tables
from orchestrator.report.format.formatters import PAGE_CACHE_NOTE, records
from orchestrator.report.format.labels import excluded_line, failure_line, row_labels
from orchestrator.report.format.markdown import md_escape, md_prose
from orchestrator.report.format.markdown import render as md_render
from orchestrator.report.format.within_cells import with_trim
from orchestrator.results.drift import Caveat
from orchestrator.results.model_facts import ModelFacts
from orchestrator.results.table_data import RunRow, TableData
from orchestrator.stats.figures import frame as figures_frame
from orchestrator.stats.status import Status


def _without_name(facts: ModelFacts) -> dict[str, Any]:
    return {k: v for k, v in facts.as_dict().items() if k != "name"}


def _markdown(data: TableData, kinds: list[str], columns: Sequence[str] | None = None) -> str:
    matrix = data.matrix
    rows, groups = data.rows, data.groups
    labels = row_labels(rows, matrix, data.design)
    parts = []
    stats = figures_frame(data.figures)
    designs = [data.design]     # an import's design file: its notes and labels
    parts += [note + "\n" for note in design_notes.session_notes(designs)]
    legend = design_notes.markdown_block(designs, data.order)
    if legend:
        parts.append(legend)
    for (model, device), members in groups:
        if len(groups) > 1 or model != "-":
            parts.append(f"### {tables.group_title(model, device, members[0].engine)}\n")
        facts = data.facts[model, device].line()
        if facts:
            parts.append(f"Model: {md_escape(facts)}\n")
        ids = [r.id for r in members]
        for kind in kinds:
            if kind == "model":
                continue                       # the facts line above
            if kind == "ab":     # each model against its own baseline (results/ab.py)
                parts.append(ab_table.group_markdown(data.ab_groups, model, device))
                continue
            if kind == "turns":  # session runs only: nothing for one-shot runs
                combined = [(c, f) for c, f in data.configs[model, device].items()]
                text = turn_tables.markdown([(i, labels.get(i, str(i))) for i in ids],
                                            data.figures, combined)
                if text:
                    parts.append(text)
                continue
            caption = tables.spec_of(kind, columns).caption
            if kind in PER_TOKEN_TABLES:
                caption = with_trim(caption, data.trim)
            if caption:
                parts.append(caption + "\n")
            # the throughput table names each row's run (the json/csv `run_id`)
            parts.append(tables.markdown(stats.loc[ids], kind, labels, columns=columns,
                                         run_ids=kind == "throughput", trim=data.trim))
            if kind == "throughput" and (stats.loc[ids, "streaming"] == False).any():  # noqa: E712
                parts.append(PAGE_CACHE_NOTE + "\n")
            means = {c: f.mean.mean for c, f in data.configs[model, device].items()}
            pivot = grid.pivot(matrix, means) if kind == "throughput" else None
            if pivot is not None and matrix is not None:     # a grid implies its matrix
                parts.append(grid.pivot_caption(matrix) + "\n")
                parts.append(md_render(pivot) + "\n")
        parts += [n + "\n" for n in _group_notes(data, model, members)]
        # warnings next to the group's rows they concern (drift.py)
        warnings = markdown_block(c for c in data.caveats
                                  if (c.model, c.device) == (model, device))
        if warnings:
            parts.append(warnings)
    note = "".join(failure_line(r) + "\n" for r in rows if r.status != Status.OK)
    note += "".join(excluded_line(e) + "\n" for e in data.excluded)
    return "\n".join(parts) + ("\n" + note if note else "")


def _group_notes(data: TableData, model: str, members: Sequence[RunRow]) -> list[str]:
    """Under a group's tables: the configs its design left out on purpose, the design's note
    on the model, then on each of the group's configs (a MODEL:CONFIG note under its model's
    group only)."""
    designs = [data.design]
    note = design_notes.model_note(designs, model)
    labels = {c: data.label(c) for c in dict.fromkeys(r.config for r in members)}
    return (design_notes.left_out_notes(data.left_out.get(model, []))
            + ([note] if note else [])
            + design_notes.config_notes(designs, list(labels), model, labels))


def session_tables(data: TableData | None, session_id: int, kinds: list[str],
                   fmt: str = "md", columns: Sequence[str] | None = None) -> str:
    """The tables `kinds` of a session's data (results/table_data.py; None: it has no runs);
    `columns`: the throughput table's columns by key (`--columns`, tables.spec_of)."""
    if data is None:
        return f"session {session_id} has no runs\n"
    if fmt == "md":
        return _markdown(data, kinds, columns)
    rows, trim = data.rows, data.trim
    # the groups' rows in the author's order, as the markdown lays them out
    stats = figures_frame(data.figures).loc[[r.id for _, members in data.groups
                                              for r in members]]
    labels = row_labels(rows, data.matrix, data.design)
    by_id = {r.id: r for r in rows}
    ordered = [by_id[i] for i in stats.index]
    frames = []
    for kind in kinds:
        if kind == "ab":
            frames.append(ab_table.frame(data.ab_groups))
            continue
        if kind == "turns":
            found = turn_tables.rows([(r.id, labels.get(r.id, str(r.id))) for r in ordered],
                                     data.figures)
            if found:
                frames.append(pd.DataFrame(found).assign(table="turns"))
            continue
        if kind == "model":
            frames.append(pd.DataFrame([
                {"table": "model", "device": device, "model": model,
                 **_without_name(data.facts[model, device])}
                for (model, device), _ in data.groups]))
            continue
        # one row per run: the config's name, its label, and the statistics
        frame = tables.values(stats, kind, labels, columns=columns).rename(
            columns={"config": "label"})
        frame.insert(0, "table", kind)
        frame.insert(1, "run_id", list(stats.index))
        frame.insert(2, "device", [r.device for r in ordered])
        frame.insert(3, "model", [r.model for r in ordered])
        frame.insert(4, "config", [r.config for r in ordered])
        frame.insert(5, "repeat", [r.repeat_index + 1 for r in ordered])
        frame.insert(6, "status", [r.status for r in ordered])
        frame.insert(7, "trim", trim)       # the tokens left out of the per-token figures
        frames.append(frame)
    frames = [f.astype({c: "Int64" for c in _COUNTS if c in f}) for f in frames]
    if fmt == "csv":      # one header over every table: a table's rows leave the others' empty
        return pd.concat(frames, ignore_index=True).to_csv(index=False)
    # json: each row with its own table's keys only
    rows_out = [r for f in frames for r in records(f.to_dict("records"))]
    return json.dumps(rows_out, ensure_ascii=False, indent=1) + "\n"


# whole numbers, kept whole in csv/json where a table has rows without them (NaN would make
# them floats)
# the tables whose figures are over the tokens after the trim (their captions say so)
PER_TOKEN_TABLES = ("throughput", "latency", "variants")
_COUNTS = ("run_id", "repeat", "trim", "n", "size_bytes", "layers", "experts", "ram_kb",
           "steady_from_token", "cache_resizes", "spec_experts", "spec_useful")


def markdown_block(found: Iterable[Caveat]) -> str:
    """The caveats of one group as markdown lines (`orch table`), or "" when there are none."""
    return "".join(f"⚠ {md_prose(c.message)}; {md_prose(c.advice)} "
                   f"(runs {', '.join(map(str, c.run_ids))})\n\n" for c in found)
