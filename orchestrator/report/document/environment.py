"""The document's Environment and Method sections (environment.md.j2, method.md.j2): what
the runs ran on and with (device facts and notes, engine build, threads, decoding, and the
design file's own `environment:` rows in the author's order), and how they were measured and
summarised (tokens, trim, repeats, order, cooldown; how each column is computed: the
template's words). Each fact says where it came from."""
from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import Any

from orchestrator.report.document.request import SectionRequest
from orchestrator.report.format import markdown as md
from orchestrator.report.format.device_facts import facts_source, ram_text
from orchestrator.results.report_data import ReportData, RunView
from orchestrator.stats.status import Status

TEMPLATE = "environment.md.j2"


def context(data: ReportData, request: SectionRequest) -> dict[str, Any]:
    return {"environment": environment_rows(data), "method": method_rows(data)}


# ---- Environment -------------------------------------------------------------------------

def device_line(name: str, dev: Any) -> str:
    """"OnePlus 15R (Snapdragon 8 Elite, 8 cores, 11.4 GiB RAM, UFS 4.0, Android 16; given by
    the design file)": the RAM with the precision it was given."""
    f = dict(dev.facts or {})
    ram = ram_text(f).split(" (")[0] if f.get("mem_total_kb") or f.get("ram_gib") else ""
    bits = [" ".join(x for x in (f.get("prop.ro.product.manufacturer"),
                                 f.get("prop.ro.product.model")) if x),
            f.get("prop.ro.soc.model") or f.get("cpu_model") or "",
            f"{f['cores']} cores" if f.get("cores") else "",
            f"{ram} RAM" if ram else "",
            f.get("storage") or "",      # a design file's (config/design.py) or a probe's
            f.get("os") or ""]
    detail = ", ".join(str(b) for b in bits if b)
    source = facts_source(dev) if dev.facts else ""
    if detail and source:
        detail += f"; {source}"
    return md.md_escape(f"{name} ({detail})" if detail else name)


def engine_builds(runs: Sequence[RunView]) -> str:
    builds = list(dict.fromkeys((r.row.engine or "?", r.row.binary_sha256, r.row.engine_build)
                                for r in runs))
    parts = []
    for engine, sha, build in builds:
        text = md.md_escape(engine) + (f" {md.md_code(build)}" if build else "")
        text += f" sha256 {md.md_code(sha[:16])}…" if sha else " (no binary hash recorded)"
        parts.append(text)
    return "; ".join(dict.fromkeys(parts))


def _flag(flags: str | None, *names: str) -> str | None:
    """The value of the first of `names` in a command-line flag string (`-t 4`, `--temp=0`)."""
    try:
        words = shlex.split(flags or "")
    except ValueError:
        words = (flags or "").split()
    for i, word in enumerate(words):
        for name in names:
            if word == name and i + 1 < len(words):
                return words[i + 1]
            if word.startswith(name + "="):
                return word.split("=", 1)[1]
    return None


def _setting(r: RunView, key: str) -> Any:
    settings = r.row.settings or {}
    return settings.get(key)


def threads(runs: Sequence[RunView]) -> str | None:
    """The compute threads the runs used: the engine's resolved `threads=` (an import's
    preamble), else the flags' `-t`/`--threads`; None when nothing says."""
    seen: dict[str, str] = {}
    for r in runs:
        value = _setting(r, "threads")
        if value is not None:
            seen.setdefault(str(value), f"engine setting `threads={value}`")
            continue
        value = _flag(r.row.flags, "-t", "--threads")
        if value is not None:
            seen.setdefault(value, f"flag `-t {value}`")
    if not seen:
        return None
    return "; ".join(f"{v} ({how})" for v, how in seen.items())


def decoding(runs: Sequence[RunView]) -> str | None:
    """Greedy or sampled, from the flags' `--temp` (or the engine's `temp=` setting)."""
    seen: list[str] = []
    for r in runs:
        value = _setting(r, "temp")
        value = str(value) if value is not None else _flag(r.row.flags, "--temp")
        if value is None:
            continue
        try:
            text = "greedy" if float(value) == 0 else f"sampled, temperature {value}"
        except ValueError:
            text = f"temperature {value}"
        seen.append(f"{text} (`--temp {value}`)")
    return "; ".join(dict.fromkeys(seen)) or None


def environment_rows(data: ReportData) -> list[tuple[str, str]]:
    """(label, markdown) rows: what orch knows, then the design files' `environment:` rows in
    the author's order; a design row whose label is one of orch's replaces it in place."""
    rows: list[tuple[str, str]] = []
    devices = "; ".join(device_line(n, d) for n, d in data.devices.items())
    rows.append(("Device" + ("s" if len(data.devices) > 1 else ""), devices or "—"))
    notes = [f"{md.md_escape(n)}: {md.md_escape(d.facts['notes'])}" if len(data.devices) > 1
             else md.md_escape(d.facts["notes"]) for n, d in data.devices.items()
             if (d.facts or {}).get("notes")]
    if notes:
        rows.append(("Device notes", "; ".join(notes)))
    rows.append(("Engine build", engine_builds(data.runs)))
    for label, value in (("Compute threads", threads(data.runs)),
                         ("Decoding", decoding(data.runs))):
        if value is not None:
            rows.append((label, value))
    for design in data.designs.values():
        for label, text in (design.environment.items() if design is not None else ()):
            row = (md.md_escape(label), md.md_escape(text))
            same = [i for i, (have, _) in enumerate(rows) if have.lower() == label.lower()]
            if same:
                rows[same[0]] = row
            elif row not in rows:
                rows.append(row)
    return rows


# ---- Method ------------------------------------------------------------------------------

def _tokens(data: ReportData) -> str:
    asked = sorted({m["tokens"] for m in data.matrices.values() if isinstance(m.get("tokens"), int)})
    made = [r.figures.tokens for r in data.runs if r.ok and r.figures.tokens]
    text = f"{', '.join(f'{t:,}' for t in asked)} asked per run" if asked else ""
    if made:
        low, high = min(made), max(made)
        got = f"{low:,}" if low == high else f"{low:,} to {high:,}"
        text += ("; " if text else "") + f"{got} generated per run (each run's count is in the " \
            "Runs table under Provenance)"
    return text or "—"


def _repeats(data: ReportData) -> str:
    # a run that did not end ok was an attempt at a repeat; a warm-up run was none
    counts = [len(a.runs) + sum(r.row.status != Status.WARMUP for r in a.bad)
              for g in data.groups for a in g.configs]
    if not counts:
        return "—"
    low, high = min(counts), max(counts)
    text = f"{low}" if low == high else f"{low} to {high}"
    return text + " run(s) per config"


def _order(data: ReportData) -> str:
    orders = [str(m.get("order") or "as-written") for m in data.matrices.values() if m]
    if orders:
        return ", ".join(dict.fromkeys(f"`order: {o}` (the matrix)" for o in orders))
    designs = [d for d in data.designs.values() if d is not None and d.order]
    if designs:
        return "as the design file's `order:` lists the files"
    return "as the runs' recorded start times (or the files' order) say"


def _cooldown(data: ReportData) -> str:
    texts = []
    for m in data.matrices.values():
        cooldown = m.get("cooldown") if m else None
        if cooldown not in (None, 0, "0", "0s"):
            texts.append(f"`cooldown: {cooldown}` (the matrix)")
    waited = sorted({r.row.cooldown_s for r in data.runs if r.row.cooldown_s is not None})
    if waited:
        shown = f"{waited[0]:g}" if len(waited) == 1 else f"{waited[0]:g}–{waited[-1]:g}"
        texts.append(f"{shown} s before a run, as recorded (the Runs table's cooldown column)")
    return "; ".join(texts) or "none recorded"


def method_rows(data: ReportData) -> list[tuple[str, str]]:
    """(label, markdown) rows of how the runs were measured; the columns' definitions follow
    them in method.md.j2."""
    trim = (f"the first {data.trim} tokens of each run are left out of the per-token "
            f"statistics" if data.trim else "none: every token counts")
    rows = [("Tokens", _tokens(data)), ("Trim", trim), ("Repeats", _repeats(data)),
            ("Order", _order(data)), ("Cooldown", _cooldown(data))]
    # adaptive repeats and the decision rule: the rule, each config's rounds and why it
    # stopped, as run/adaptive.py or run/decided.py worded it when the session ran
    stops = [f"session {s.id}: {s.repeat_stop}" for s in data.sessions if s.repeat_stop]
    if stops:
        rows.append(("Stopping rule", "<br>".join(md.md_escape(t) for t in stops)))
    return rows
