"""Commands that publish results: `orch report` (a benchmark document) and `orch compare`."""
from __future__ import annotations

import sys
from pathlib import Path

import click

from orchestrator.cli.data import COLUMNS_HELP, PROVENANCE_HELP, column_keys
from orchestrator.cli.handler import friendly
from orchestrator.cli.options import console, db_option, exclude_option, trim_option


@click.command()
@click.argument("session", required=False)
@click.option("--matrix", "-m", help="The latest session of this matrix (per device).")
@click.option("--device", "-d", "devices", multiple=True,
              help="Only these devices (repeatable).")
@click.option("--out", "-o", type=click.Path(dir_okay=False),
              help="Write the document here; figures go to <name>_files/ beside it "
                   "(default: print to stdout, no figures).")
@click.option("--format", "fmt", type=click.Choice(["md", "html"]), default=None,
              help="Markdown, or the same document as a standalone HTML page (default: html "
                   "for an -o file ending .html or .htm, else md).")
@click.option("--template", "-t", type=click.Path(exists=True),
              help="A template file (the main document) or a directory whose templates "
                   "replace the built-in ones of the same name (report.md.j2, header.md.j2, "
                   "group.md.j2, left_out.md.j2, provenance.md.j2, page.html.j2).")
@click.option("--baseline", "-b", "baselines", multiple=True, metavar="[MODEL:]CONFIG",
              help="The config the A/B tables compare against: CONFIG for every model that "
              "ran it (or a unique prefix of it), MODEL:CONFIG for one model; repeatable: two for one model give each "
              "its own A/B rows (default: the "
              "matrix's `baseline:`; for an import, its design file's `baseline:`, else a "
              "config named with the word `base` or `baseline`, else the first config run). "
              "An unknown config or model exits 2.")
@click.option("--no-plots", is_flag=True, help="Skip the figures.")
@click.option("--quantile", type=click.Choice(["linear", "lower"]), default="linear",
              show_default=True, help="p5/p95 method (see `orch table --help`).")
@click.option("--compare", "with_comparison", is_flag=True,
              help="Add a comparison section (as `orch compare`) of the sides: SESSION and "
                   "every --session, then every --device (its newest session of --matrix); "
                   "the first is the reference. The document covers all their runs.")
@click.option("--session", "-s", "sessions", multiple=True,
              help="With --compare: a session (id or name) to compare; repeatable.")
@click.option("--columns", help=COLUMNS_HELP)
@click.option("--provenance", type=click.Choice(["share", "full"]), default="share",
              show_default=True, help=PROVENANCE_HELP)
@exclude_option
@trim_option
@db_option
@friendly
def report(session: str | None, matrix: str | None, devices: tuple[str, ...], out: str | None,
           fmt: str | None, template: str | None, baselines: tuple[str, ...], no_plots: bool,
           quantile: str, with_comparison: bool, sessions: tuple[str, ...],
           columns: str | None, provenance: str, excludes: tuple[str, ...], trim: int | None,
           db: str | None) -> None:
    """Render a benchmark document of a session (id or name; default: the newest) or of the
    latest session of --matrix on each device: what was measured, per model and device the
    throughput, device pressure and A/B tables, figures, the runs left out (†) and the
    provenance of every number. With --compare, of two or more sides and their comparison."""
    from orchestrator.db.store import Store
    from orchestrator.errors import ConfigError
    from orchestrator.cli.documents import ReportOptions, compared_report, report_text
    from orchestrator.results.report_data import select_runs
    from orchestrator.report.format.outputs import check_out_file
    from orchestrator.results.ab import parse_baselines, runs_where

    if out:
        check_out_file(Path(out))   # before rendering: no <name>_files/ left by a refusal
    if fmt is None:    # `-o report.html` means an HTML page, not markdown in an .html file
        fmt = "html" if out and Path(out).suffix.lower() in (".html", ".htm") else "md"
    store = Store.open(db, create=False)
    options: ReportOptions = {"out": Path(out) if out else None, "fmt": fmt,
                              "template": template, "plots": not no_plots, "quantile": quantile,
                              "columns": column_keys(columns, "report"),
                              "provenance_full": provenance == "full", "trim": trim,
                              "exclude": excludes}
    if with_comparison:
        text = compared_report(store, ([session] if session else []) + list(sessions), devices,
                        matrix, baselines=baselines, **options)
    elif sessions:
        raise ConfigError("--session is for --compare (a report of one session: SESSION)")
    else:
        rows = select_runs(store, session, matrix, devices)
        chosen = parse_baselines(baselines, rows, runs_where(rows))
        text = report_text(store, rows, baseline=chosen or None, **options)
    if out:
        console.print(f"wrote {out}", highlight=False)
    else:
        sys.stdout.write(text)


@click.command()
@click.option("--session", "-s", "sessions", multiple=True,
              help="A session (id or name) to compare; repeatable. Sessions come first: the "
                   "first side given is the reference.")
@click.option("--device", "-d", "devices", multiple=True,
              help="A device to compare (repeatable): its newest session of --matrix, or its "
                   "newest session.")
@click.option("--matrix", "-m", help="For --device: the newest session of this matrix.")
@click.option("--builds", "builds", nargs=2, metavar="A B", help="Compare two engine builds "
              "(a llama.cpp cache version such as 0.3.30, an engine build, a commit prefix, or a "
              "unique prefix of one; none or several: exit 2 listing the builds): "
              "each build's runs in the newest session that has them (of --matrix, on "
              "--device when given); A is the reference.")
@click.option("--format", "fmt", type=click.Choice(["md", "csv", "json"]),
              help="Print markdown, csv or json instead of the terminal table.")
@click.option("--out", "-o", type=click.Path(dir_okay=False),
              help="Write the comparison here (markdown unless --format says otherwise).")
@click.option("--template", "-t", type=click.Path(exists=True),
              help="A template file or directory replacing compare.md.j2 / compare_table.md.j2.")
@click.option("--match", "matches", multiple=True, metavar="A=B",
              help="Compare config A of the first side with config B of the others (their "
                   "names differ); repeatable. Names may hold `=`: the split is the one that "
                   "names a config on each side.")
@click.option("--columns", "columns", metavar="KEY,...",
              help="The table's columns, by key, in that order (default model,config,tps,"
                   "runs,ratio,ci,p_holm,verdict; `p` adds the raw p-value); an unknown key "
                   "exits 2 listing the valid ones.")
@click.option("--fail-on", "fail_on", metavar="regression[:PCT]",
              help="The CI gate: exit 5 when a config is significantly slower than on the "
                   "reference (the table's Holm-corrected verdict) by more than PCT percent "
                   "(default 0: any significant slowdown). docs/ci-gate.md.")
@click.option("--summary", "summary", type=click.Path(dir_okay=False, allow_dash=True),
              metavar="FILE", help="Write the gate's markdown summary (a pull-request comment) "
                                   "here; `-`: to stdout, instead of the table.")
@click.option("--junit", "junit", type=click.Path(dir_okay=False), metavar="FILE",
              help="Write a JUnit XML file: one testcase per compared config, a failure per "
                   "regression (needs orch's `ci` extra).")
@exclude_option
@trim_option
@db_option
@friendly
def compare(sessions: tuple[str, ...], devices: tuple[str, ...], matrix: str | None,
            builds: tuple[str, ...] | None, fmt: str | None, out: str | None,
            template: str | None, matches: tuple[str, ...], columns: str | None,
            fail_on: str | None, summary: str | None, junit: str | None,
            excludes: tuple[str, ...],
            trim: int | None, db: str | None) -> None:
    """Compare two or more sides (devices or sessions, two sessions of one device included)
    config by config: each side's mean tok/s with its 95% interval, and each side's ratio to
    the first (the reference) with its 95% interval, Welch p-value, Holm-corrected p-value
    and verdict, plus a geometric-mean summary. Configs are matched by model and config;
    those on one side only are listed with why the other has none (its runs failed, or it
    never ran). A row whose two sides ran the config differently (settings, tokens, model,
    build) is marked ≠ and what differs is listed under the table. Beside the table: each
    side's device facts and where they came from, the other headline figures (prefill,
    TTFT, p95, p99 latency, peak RSS, temperatures) against the reference with their
    intervals, and with -o a figure of those ratios. --builds A B: the sides are two engine
    builds. Sides with no config in common exit 2, listing each side's configs: pair them
    with --match.

    There is no --baseline here: each config is compared with the same config (or its
    --match) on the first side, not with another config; for A/B rows against a baseline
    config use `orch table -b` or `orch report -b`.

    The CI gate: --fail-on regression[:PCT] exits 5 on a significant slowdown beyond PCT;
    --summary FILE and --junit FILE write its verdict for a pull request and a CI's test
    view (docs/ci-gate.md)."""
    from orchestrator.db.store import Store
    from orchestrator.cli.documents import comparison_of
    from orchestrator.report.document.compare import compare as run_compare
    from orchestrator.report.format.outputs import check_out_file
    from orchestrator.results.gate import parse_fail_on

    for path in (out, junit, summary if summary != "-" else None):
        if path:
            check_out_file(Path(path))
    threshold = parse_fail_on(fail_on) if fail_on else 0.0
    keys = compare_column_keys(columns)
    comp = comparison_of(Store.open(db, create=False), sessions, devices, matrix,
                         builds=builds or (), matches=matches, trim=trim, exclude=excludes)
    if summary != "-" or out:      # `--summary -`: stdout is the summary's
        text = run_compare(comp, fmt=fmt, out=Path(out) if out else None, console=console,
                           template=template, keys=keys)
        if out:
            console.print(f"wrote {out}", highlight=False)
        elif text is not None:
            sys.stdout.write(text)
    if fail_on or summary or junit:
        from orchestrator.cli.gate import run_gate

        run_gate(comp, threshold, gating=bool(fail_on), summary=summary, junit=junit)


def compare_column_keys(columns: str | None) -> list[str] | None:
    """`orch compare --columns a,b`: the keys (None without it); an unknown key is a usage
    error (exit 2) listing the valid ones with what each holds."""
    if columns is None:
        return None
    from orchestrator.report.document.compare_columns import COLUMN_KEYS

    keys = [k.strip() for k in columns.split(",") if k.strip()]
    bad = [k for k in keys if k not in COLUMN_KEYS]
    if bad or not keys:
        valid = "; ".join(f"{k} ({what})" for k, what in COLUMN_KEYS.items())
        raise click.BadParameter(f"unknown column(s) {', '.join(bad) or '(none given)'}; "
                                 f"valid: {valid}", param_hint="--columns")
    return keys
