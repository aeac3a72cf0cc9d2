"""The Findings section (findings.md.j2): in words, per model, each difference the data
support, the exact ones, and the ones they do not (results/findings.py sorts the A/B rows;
the figures are results/ab.py's, worded with the A/B table's own cells), so that an author
edits prose instead of writing it. A difference is called real only where the
Holm-corrected test says so; cache hit and flash read differences are stated as exact."""
from __future__ import annotations

from typing import Any

from orchestrator.report.document.request import SectionRequest
from orchestrator.report.format.ab_rows import decision_words, noise_floor_text, p_cell, pp
from orchestrator.report.format.formatters import pct
from orchestrator.report.format.labels import model_on_device
from orchestrator.report.format.markdown import md_escape
from orchestrator.results.ab import ABRow, Verdict
from orchestrator.results.findings import GroupFindings, findings
from orchestrator.results.report_data import ReportData
from orchestrator.stats.uncertainty import ALPHA
from orchestrator.stats.values import is_missing

TEMPLATE = "findings.md.j2"

INTRO = ("What the A/B rows above support, in words: a difference is called real only where "
         f"the Holm-corrected test finds it (p below {ALPHA:g}); cache hit and flash read per "
         "token are exact (they follow from the routing and the cache, not from timing).")


def context(data: ReportData, request: SectionRequest) -> dict[str, Any]:
    groups = findings([g.ab for g in data.groups if g.ab is not None])
    several_devices = len({g.device for g in data.groups}) > 1
    return {"findings": [_section(f, data, several_devices) for f in groups],
            "findings_intro": INTRO}


def _model_label(data: ReportData, model: str) -> str:
    """The model as its group's heading names it (the design's or matrix's label)."""
    return next((g.facts.label for g in data.groups
                 if g.model == model and g.facts is not None and g.facts.label), model)


def _section(f: GroupFindings, data: ReportData, several_devices: bool) -> dict[str, Any]:
    title = _model_label(data, f.model)
    if several_devices:
        title = model_on_device(title, f.device, None)
    exact_rows = {id(r) for r in f.exact}

    def line(row: ABRow, words: str) -> str:
        return words + (f"; {exact(row)}" if id(row) in exact_rows else "") + "."

    return {"title": md_escape(title),
            "supported": [line(r, supported(r)) for r in f.supported],
            "not_supported": [line(r, not_supported(r)) for r in f.not_supported]}


def pair_name(row: ABRow) -> str:
    """"k=6 vs default": the config against its baseline, by their labels (escaped)."""
    return f"{md_escape(row.label)} vs {md_escape(row.against_label or row.against)}"


def _test(row: ABRow) -> str:
    c = row.comparison
    assert c is not None
    if row.decision is not None:       # the decision rule's: its looks are its test
        return f"decision rule, decided after {row.decision.n} rounds"
    n = f"{c.n_cand} rounds, paired" if c.method == "paired" else \
        f"n={c.n_base}/{c.n_cand}, Welch"
    p = p_cell(c.p_adjusted)
    return f"p{'' if p.startswith('<') else ' = '}{p}, Holm; {n}"


def _ci(row: ABRow) -> str:
    c = row.comparison
    assert c is not None
    if is_missing(c.ci_low_pct) or is_missing(c.ci_high_pct):
        return ""
    kind = "95% CI" if row.decision is None else "repeated interval"
    return f"{kind} {pct(c.ci_low_pct)} to {pct(c.ci_high_pct)}, "


def supported(row: ABRow) -> str:
    """"k=6 vs default: +24.3% decode tok/s, faster (95% CI +20.1% to +28.6%, p = 0.003,
    Holm; 5 rounds, paired)"."""
    c = row.comparison
    assert c is not None
    return (f"**{pair_name(row)}**: {pct(c.delta_pct)} decode tok/s, {row.verdict} "
            f"({_ci(row)}{_test(row)})")


def exact(row: ABRow) -> str:
    """"cache hit +0.2 pp and flash read per token −26.8% (exact)"; equal ones said so."""
    parts = []
    if not is_missing(row.cache_hit_delta_pp):
        parts.append("the same cache hit" if pp(row.cache_hit_delta_pp) == "0.0 pp"
                     else f"cache hit {pp(row.cache_hit_delta_pp)}")
    if not is_missing(row.read_delta_pct):
        parts.append("the same flash read per token" if pct(row.read_delta_pct) == "0.0%"
                     else f"flash read per token {pct(row.read_delta_pct)}")
    return f"{' and '.join(parts)} (exact)"


def not_supported(row: ABRow) -> str:
    """"ahwb vs anon, short pair: not tested (n=1/1, one run a side)" with the change as
    measured and what it would have to beat; "no significant difference" only where a test
    ran."""
    c, verdict = row.comparison, row.verdict
    name = pair_name(row)
    if verdict is Verdict.NO_OK_RUN or c is None:
        return f"{name}: no run ended ok, nothing to compare"
    if verdict is Verdict.NOT_TESTED:
        floor = noise_floor_text(row)
        return (f"{name}: not tested (n={c.n_base}/{c.n_cand}, too few runs for a test): "
                f"{pct(c.delta_pct)} decode tok/s is one measurement against another"
                + (f", {floor}" if floor else ""))
    if row.decision is not None:
        return f"{name}: {decision_words(row)}, {pct(c.delta_pct)} decode tok/s ({_ci(row)}" \
               f"decision rule)"
    return (f"{name}: no significant difference in decode tok/s ({pct(c.delta_pct)}, "
            f"{_ci(row)}{_test(row)})")
