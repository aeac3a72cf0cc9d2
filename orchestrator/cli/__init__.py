"""The `orch` command line. Thin: each command parses its options and calls the library
layers; the commands live in this package's modules, one module per area."""
from __future__ import annotations

import click

from orchestrator import __version__
from orchestrator.cli import (
    calibrate,
    ceilings,
    data,
    devices,
    engines,
    history,
    lab,
    quality,
    report,
    routes,
    run,
    tokens,
)
from orchestrator.cli.options import DEBUG, OrchGroup


@click.group(cls=OrchGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="orch")
@click.option("--debug", is_flag=True, help="Show the Python traceback of an unexpected error.")
def main(debug: bool) -> None:
    """orch: run LLM inference benchmark matrices on local, SSH and adb devices, store every
    token and sample in SQLite, and report the numbers.

    \b
    Typical session:
      orch run matrices/local.yaml          # run a matrix on the built-in `local` device
      orch runs                             # list past runs
      orch show 3                           # statistics of run 3
      orch tokens 3 --steps 1-5,-1          # run 3's first five and last tokens
      orch table                            # the newest session as published tables
      orch report -o docs/bench.md          # a benchmark document with provenance
      orch devices --probe                  # list devices and their facts
      orch import DIR --engine bmoe         # existing engine artifacts into the store
      orch calibrate -d phone               # idle temperature baseline for cooldowns
      orch ceilings -d phone                # storage, memory (and compute) ceilings
      orch lab submit M.yaml -d A -d B      # a lab: devices on many hosts (orch lab --help)

    \b
    Exit codes:
      0    every run ok
      1    a run or device failed, or an unexpected error (one line; --debug for the traceback)
      2    bad input: matrix, inventory, options or --db (checked before anything is written)
      130  interrupted (Ctrl-C); 143: terminated (SIGTERM)
    """
    DEBUG["on"] = debug


for command in (run.run, run.runs, run.show, devices.devices, calibrate.calibrate, data.import_cmd,
                data.table, data.export, engines.engines, engines.models, report.report,
                report.compare, history.history, routes.routes, ceilings.ceilings, quality.quality,
                lab.lab, tokens.tokens):
    main.add_command(command)

if __name__ == "__main__":  # pragma: no cover
    main()
