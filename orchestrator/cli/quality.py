"""`orch quality [SESSION]`: the quality probes of a session (matrix `quality:`): accuracy per
config with its Wilson 95% interval, and the questions whose graded answers differ."""
from __future__ import annotations

import sys

import click

from orchestrator.cli.handler import friendly
from orchestrator.cli.options import db_option


@click.command()
@click.argument("session", required=False)
@click.option("--matrix", "-m", help="The latest session of this matrix name.")
@click.option("--model", help="Only this model's probes (default: every model's).")
@click.option("--format", "fmt", type=click.Choice(["md", "csv", "json"]), default="md",
              show_default=True)
@db_option
@friendly
def quality(session: str | None, matrix: str | None, model: str | None, fmt: str,
            db: str | None) -> None:
    """Quality probes of a session (default: the newest): per config correct / answered,
    accuracy and its 95% Wilson interval, how large an accuracy drop against the baseline the
    sample rules out, and each question whose graded answers differ between configs.

    \b
    SESSION is a session id or name. JSON:
      {"configs": [{"config", "correct", "total", "accuracy_pct", "ci_low_pct", "ci_high_pct"}],
       "differ": [{"id", "expected", "answers": {config: answer}}]}
    (with several models, configs and ids read MODEL/NAME). CSV: one row per config."""
    from orchestrator.db.runs import Sessions
    from orchestrator.db.store import Store
    from orchestrator.report.table.quality import to_csv, to_json, to_markdown
    from orchestrator.results.quality import summarise

    store = Store.open(db, create=False)
    sid = Sessions(store).resolve(session, matrix)
    models = summarise(store, sid, model)
    writer = {"md": to_markdown, "csv": to_csv, "json": to_json}[fmt]
    sys.stdout.write(writer(models))
