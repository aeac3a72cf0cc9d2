"""`orch compare --fail-on/--summary/--junit`: the CI gate's verdict (results/gate.py)
written down (report/document/gate.py) and turned into the exit code."""
from __future__ import annotations

import shlex
import sys
from pathlib import Path

from orchestrator.cli.options import console, errors
from orchestrator.errors import Regression
from orchestrator.report.document.gate import case_text, summary_markdown, write_junit
from orchestrator.results.comparison import SideComparison
from orchestrator.results.gate import gate


def run_gate(comp: SideComparison, threshold_pct: float, gating: bool, summary: str | None,
             junit: str | None) -> None:
    """Judge `comp`, write the summary (`-`: stdout) and the JUnit file, and raise
    Regression (exit 5) when `gating` (--fail-on) and a config regressed."""
    result = gate(comp, threshold_pct)
    # with the summary on stdout, the "wrote" lines go to stderr: stdout stays the markdown
    say = errors if summary == "-" else console
    if summary:
        text = summary_markdown(comp, result, "orch " + shlex.join(sys.argv[1:]))
        if summary == "-":
            sys.stdout.write(text)
        else:
            Path(summary).parent.mkdir(parents=True, exist_ok=True)
            Path(summary).write_text(text, encoding="utf-8")
            say.print(f"wrote {summary}", highlight=False)
    if junit:
        write_junit(result, Path(junit))
        say.print(f"wrote {junit}", highlight=False)
    if gating and result.regressions:
        regs = result.regressions
        raise Regression(f"{len(regs)} of {len(result.cases)} comparisons slower "
                         f"(Holm p < 0.05, beyond {threshold_pct:g}%): "
                         + "; ".join(case_text(c) for c in regs))
