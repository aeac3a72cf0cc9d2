"""`orch routes RUN`: the expert-routing figures of a traced run (docs/routes.md §3), and with
--replay what expert caches of given sizes would have hit on its trace (docs/routes.md §5)."""
from __future__ import annotations

import json

import click

from orchestrator.cli.handler import friendly
from orchestrator.cli.options import db_option

DEFAULT_POLICIES = "belady,lru,lfu,layer,layerlfu"


def _numbers(text: str, hint: str) -> list[float]:
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise click.BadParameter(f"expected numbers separated by commas, got {text!r}",
                                 param_hint=hint) from None
    if not values or any(v <= 0 for v in values):
        raise click.BadParameter("budgets must be positive MiB values", param_hint=hint)
    return values


@click.command()
@click.argument("run_id", type=int, metavar="RUN")
@click.option("--format", "fmt", type=click.Choice(["md", "json"]), default="md",
              show_default=True)
@click.option("--replay", "budgets", metavar="LIST",
              help="Replay the trace through expert caches of these sizes, MiB, "
                   "comma-separated (e.g. 250,500,1000,2000,4000,8000).")
@click.option("--policies", default=DEFAULT_POLICIES, show_default=True,
              help="Cache policies to replay: belady, lru, lfu, layer, layerlfu, random.")
@click.option("--seed", default=0, show_default=True, help="Seed of the random policy.")
@db_option
@friendly
def routes(run_id: int, fmt: str, budgets: str | None, policies: str, seed: int,
           db: str | None) -> None:
    """Expert routing of a traced run: experts touched per layer and their bytes, how well the
    previous token / a static hot list / the prompt predict the next token's experts, the
    overlap by lag, popularity skew, major faults by quarter, and the run's summary figures.

    RUN is a run id (orch runs). A run without a route trace exits 2."""
    from orchestrator.db.store import Store
    from orchestrator.report.table.routes import figures_markdown, replay_markdown
    from orchestrator.results.routes import replay_trace, run_figures

    store = Store.open(db, create=False)
    figures, trace = run_figures(store, run_id)
    replayed = None
    if budgets is not None:
        try:
            replayed = replay_trace(trace, _numbers(budgets, "--replay"),
                                    [p.strip() for p in policies.split(",") if p.strip()], seed)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--policies") from None
    if fmt == "json":
        click.echo(json.dumps({"run_id": run_id, **figures, **(replayed or {})}, indent=2))
        return
    click.echo(f"## Expert routing, run {run_id}\n\n{figures_markdown(figures)}")
    if replayed is not None:
        click.echo(f"\n{replay_markdown(replayed)}")
