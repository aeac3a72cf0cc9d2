"""`orch ceilings`: measure and store a device's hardware ceilings, or list the stored ones."""
from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from orchestrator.cli.handler import friendly
from orchestrator.cli.options import console, db_option, errors, inventory_option

if TYPE_CHECKING:
    from orchestrator.run.ceilings import CeilingOptions


def _int_list(ctx: click.Context, param: click.Parameter, value: str) -> tuple[int, ...]:
    try:
        items = tuple(int(x) for x in value.split(",") if x.strip())
    except ValueError:
        raise click.BadParameter("expected comma-separated integers, e.g. 1,2,4,8") from None
    if not items or any(x <= 0 for x in items):
        raise click.BadParameter("expected positive integers")
    return items


def ceiling_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """The measurement's options (--path ... --tokens), handed to `func` as one
    run/ceilings.py CeilingOptions, `options`: each option's name is a field's."""
    @functools.wraps(func)
    def gathered(*args: Any, **kwargs: Any) -> Any:
        from orchestrator.run.ceilings import CeilingOptions

        fields = {f.name: kwargs.pop(f.name) for f in dataclasses.fields(CeilingOptions)}
        return func(*args, options=CeilingOptions(**fields), **kwargs)

    for option in reversed(_MEASURE_OPTIONS):
        gathered = option(gathered)
    return gathered


_MEASURE_OPTIONS = (
    click.option("--path", metavar="DIR", help="Directory on the file system that holds the "
                 "models (default: the device's workdir); the test file is written there."),
    click.option("--size", "size_mib", type=click.IntRange(4), default=256, show_default=True,
                 help="Test file size in MiB (several times the device's page cache is not "
                      "needed: reads bypass it with O_DIRECT)."),
    click.option("--samples", type=click.IntRange(1, 20), default=3, show_default=True,
                 help="Sequential read samples, at offsets spread over the file."),
    click.option("--seconds", type=click.FloatRange(0.05), default=2.0, show_default=True,
                 help="Upper bound per lanes x read-size cell."),
    click.option("--lanes", default="1,2,4,8", show_default=True, callback=_int_list,
                 help="Read lanes (threads) to sweep."),
    click.option("--sizes", "sizes_kib", default="64,256,1024,4096", show_default=True,
                 callback=_int_list, help="Read sizes in KiB to sweep (multiples of 4)."),
    click.option("--mem-mib", type=click.IntRange(1), default=256, show_default=True,
                 help="membench buffer (well above the last-level cache)."),
    click.option("--mem-passes", type=click.IntRange(1, 100), default=5, show_default=True),
    click.option("--dense-model", metavar="PATH", help="A dense model on the device, fully "
                 "RAM-resident, whose decode rate is the compute ceiling."),
    click.option("--engine", type=click.Choice(["llama-bench"]),
                 help="Engine for --dense-model."),
    click.option("--binary", metavar="PATH", help="The engine on the device (default on "
                 "`local`: orch's llama.cpp build)."),
    click.option("--engine-flags", default="", metavar="FLAGS",
                 help="Extra engine flags (default `-r 2`), e.g. '-t 4 -r 3'."),
    click.option("--tokens", type=click.IntRange(1), default=32, show_default=True,
                 help="Tokens decoded for the compute ceiling."),
)


@click.command()
@click.option("--device", "-d", "name", metavar="NAME",
              help="The device to measure (default: local).")
@ceiling_options
@click.option("--list", "list_only", is_flag=True,
              help="Print the stored ceilings (all devices, or --device's); measure nothing.")
@inventory_option
@db_option
@friendly
def ceilings(name: str | None, options: CeilingOptions, list_only: bool,
             inventory: str | None, db: str | None) -> None:
    """Measure DEVICE's hardware ceilings and store them (one row per device and day):

    \b
    storage  sequential O_DIRECT read MiB/s (samples at several offsets, their median) and
             read MiB/s against lanes x read size, with the knee (fewest lanes within 95%
             of the best);
    memory   DRAM read bandwidth (GiB/s);
    compute  a dense model's decode tok/s with --dense-model PATH --engine llama-bench,
             else left empty with the reason.

    The probes are static C programs built for the device's ABI (`orch engines build
    probes`; needs a C compiler, and for arm64 gcc-aarch64-linux-gnu) and pushed once per
    version. Reports then set each config against these ceilings.
    """
    from orchestrator.config.inventory import load_inventory, open_transport
    from orchestrator.db.store import Store
    from orchestrator.errors import ConfigError
    from orchestrator.report.terminal.ceilings import print_ceilings
    from orchestrator.results.ceilings import latest
    from orchestrator.run.agent_client import AgentClient
    from orchestrator.run.ceilings import measure, save

    inv = load_inventory(inventory)
    if list_only:
        store = Store.open(db, create=False)
        names = inv.names() if name is None else [name]
        print_ceilings(console, latest(store, names), names)
        return
    name = name or "local"
    if (options.dense_model is None) != (options.engine is None):
        raise ConfigError("--dense-model and --engine go together (e.g. --dense-model "
                          "/data/local/tmp/qwen2.5-0.5b-q8_0.gguf --engine llama-bench)")
    if any(s % 4 for s in options.sizes_kib):
        raise ConfigError("--sizes: read sizes must be multiples of 4 KiB (O_DIRECT alignment)")
    entry = inv.get(name)
    store = Store.open(db)
    with console.status(f"{name}: measuring ceilings") as status, \
            open_transport(inv, name) as transport:
        def event(line: str) -> None:
            status.update(f"{name}: {line}")
            errors.print(line, highlight=False, soft_wrap=True)

        # a ProbeBuildError or ProbeOutputError is the handler's one line (exit 1)
        facts = AgentClient(transport).facts()
        measured = measure(transport, options, event)
    device_id = store.upsert_device(name, entry.kind, facts)
    save(store, device_id, measured)
    print_ceilings(console, latest(store, [name]), [name])
