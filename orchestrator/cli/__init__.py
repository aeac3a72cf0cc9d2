"""The `orch` command line. Thin: each command parses its options and calls the library
layers; the commands live in this package's modules, one module per area.

Start-up is lazy (click's "lazy loading subcommands" pattern): COMMANDS maps each command's
name to the `module:attribute` that defines it and the start of its help, so `orch --help`
lists every command without importing one, and `orch runs` imports orchestrator/cli/run.py
only. A command imports the library layers it uses when it runs. tests/test_startup.py checks
that COMMANDS names every command with its own help, and what the short commands import.
"""
from __future__ import annotations

import importlib
from typing import Any

import click

from orchestrator import __version__

# name -> ("module:attribute" under orchestrator.cli, the first words of the command's help:
# `orch --help` shortens them as click shortens the help itself; tests/test_startup.py checks
# both against the loaded command)
COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("run:run",
            "Run MATRIX_FILE's cells on a device and store the results."),
    "runs": ("run:runs",
             "List past runs, newest first (id, session, device, matrix, config, status, tok/s)."),
    "show": ("run:show",
             "Print one run's statistics: tok/s distribution, I/O, cache, device pressure."),
    "devices": ("devices:devices",
                "List the inventory's devices; with --probe, collect and print their facts and "
                "the newest hardware ceilings"),
    "calibrate": ("calibrate:calibrate",
                  "Measure the device's idle baseline per sensor (CPU zones, battery) and store "
                  "it, for matrices with `cooldown:"),
    "import": ("data:import_cmd",
               "Import a study folder as ONE session, each run as it was measured: one run per "
               "per-token CSV, with its"),
    "table": ("data:table",
              "Print the per-run tables of a session (default: the newest), with the columns of "
              "the published summary"),
    "export": ("data:export",
               "Export a session's run, token and sample tables as csv, json or parquet files."),
    "engines": ("engines:engines",
                "Build the engines orch can run (llama.cpp from PyPI's llama-cpp-python sdist) "
                "and the ceiling probes (`orch"),
    "models": ("engines:models",
               "Make models for the engines to run (no model hub is needed)."),
    "report": ("report:report",
               "Render a benchmark document of a session (id or name; default: the newest) or "
               "of the latest session of"),
    "compare": ("report:compare",
                "Compare two or more sides (devices or sessions, two sessions of one device "
                "included) config by config: each"),
    "history": ("history:history",
                "The series of a metric over the sessions of MATRIX, one point per session and "
                "engine build with its 95%"),
    "note": ("regressions:note",
             "Note TEXT on a session or a run: `orch note session 3 \"firmware 16.0.2\"`, "
             "`orch note"),
    "notes": ("regressions:notes",
              "List the notes on sessions and runs and the acknowledged regressions, oldest "
              "first."),
    "ack": ("regressions:ack",
            "Acknowledge the regression CHANGEPOINT (its id as `orch history`, `orch feed` and "
            "the report's"),
    "feed": ("regressions:feed",
             "The regressions feed (Atom): every step down in the store's histories, newest "
             "first, with its id,"),
    "site": ("site:site",
             "Write the store as a static website into OUT: an index (latest regressions, "
             "devices, matrices, sessions), a"),
    "routes": ("routes:routes",
               "Expert routing of a traced run: experts touched per layer and their bytes, how "
               "well the previous token / a"),
    "ceilings": ("ceilings:ceilings",
                 "Measure DEVICE's hardware ceilings and store them (one row per device and "
                 "day):"),
    "quality": ("quality:quality",
                "Quality probes of a session (default: the newest): per config correct / "
                "answered, accuracy and its 95% Wilson"),
    "lab": ("lab:lab",
            "A lab of many devices: workers on the hosts the devices are plugged into, one "
            "queue per device on a Celery"),
    "serve": ("serve:serve",
              "Serve the store's pages live: the lab page (/lab: every device's state, running "
              "cell with its tokens and"),
    "tokens": ("tokens:tokens",
               "Print a run's chosen tokens: step, wall_ms, compute_ms, io_ms, stall_ms, cache "
               "hit % and read MiB (read_bytes"),
}


class LazyGroup(click.Group):
    """The `orch` group: its commands are imported when one is asked for (COMMANDS), and every
    command runs under handler.handle_errors (one line and an exit code for a user's error),
    with SIGINT given back to Python while it runs (handler.python_sigint)."""

    def __init__(self, *args: Any, lazy: dict[str, tuple[str, str]], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = lazy

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.commands or cmd_name not in self.lazy:
            return super().get_command(ctx, cmd_name)
        module, attr = self.lazy[cmd_name][0].split(":")
        command = getattr(importlib.import_module(f"{__name__}.{module}"), attr)
        if not isinstance(command, click.Command):
            raise TypeError(f"orchestrator.cli.{module}:{attr} is not a click command")
        self.commands[cmd_name] = command
        return command

    def listed_help(self, name: str, limit: int) -> str:
        """A command's line in `orch --help`, from COMMANDS (the command is not imported)."""
        command = self.commands.get(name) or click.Command(name, help=self.lazy[name][1])
        return command.get_short_help_str(limit)   # shortened as click shortens any help

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        names = self.list_commands(ctx)
        if not names:
            return
        limit = formatter.width - 6 - max(len(name) for name in names)
        with formatter.section("Commands"):
            formatter.write_dl([(name, self.listed_help(name, limit)) for name in names])

    def invoke(self, ctx: click.Context) -> Any:
        from orchestrator.cli.handler import handle_errors, python_sigint

        with python_sigint():
            return handle_errors(lambda: super(LazyGroup, self).invoke(ctx))


@click.group(cls=LazyGroup, lazy=COMMANDS,
             context_settings={"help_option_names": ["-h", "--help"]})
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
      orch serve                            # the lab page and /api/ on http://127.0.0.1:8700

    \b
    Exit codes:
      0    every run ok
      1    a run or device failed, or an unexpected error (one line; --debug for the traceback)
      2    bad input: matrix, inventory, options or --db (checked before anything is written)
      3    not found: no session, run or device of that id or name
      4    busy: the session, device or import folder is held by another running orch
      5    regression: `orch compare --fail-on` found a significant slowdown (CI gate)
      129  hung up (SIGHUP: terminal or ssh session closed); the run stops as on SIGTERM
      130  interrupted (Ctrl-C); 143: terminated (SIGTERM)
      141  the reader of the output went away (`| head`); a run stops as on SIGTERM
    """
    from orchestrator.cli.handler import DEBUG

    DEBUG["on"] = debug


if __name__ == "__main__":  # pragma: no cover
    main()
