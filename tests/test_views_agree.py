"""Every view prints the one value the result model holds (docs/architecture.md, "The result
model"): for each run of a live session with a serial and an overlap config, and of an
imported study folder, `orch show`, `orch table` (markdown and json), `orch runs --format
json`, `orch export` and the report print, figure by figure, what RunFigures holds for the run
(ConfigFigures for a report's config row), formatted by that figure's one formatter; a figure
that was not measured is "—" or left out, never a number. The bug this guards: `orch show`
printed a serial run's stall as 40.0 while `orch table -t detail` printed —."""
from __future__ import annotations

import json
import math
import re
import shutil
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cli_helpers import orch_ok
from orchestrator.db.runs import Runs
from orchestrator.db.store import Store
from orchestrator.report.formatting import STATS
from orchestrator.stats.config_figures import RunResult, combine
from orchestrator.stats.figures import FIELDS, RunFigures
from orchestrator.stats.values import DASH

FIX = Path(__file__).resolve().parent / "fixtures" / "bigmoe"
# one-value figures: a cell of two keys (energy with its note, the steady state with the
# settle test's words) is not one figure's formatted text
ONE_VALUE = [k for k in STATS if k in FIELDS and k not in ("energy_j", "steady_mean")]

SERIAL_AND_OVERLAP = """\
    name: views
    engine: bmoe
    binary: {{local: fake_bmoe.sh}}
    models: {{m: /m.gguf}}
    prompt: p
    tokens: 8
    repeat: 2
    cooldown: 0
    configs:
      serial: --delay 0 --slowdown {ws}/serial
      overlap: --delay 0 --overlap --slowdown {ws}/overlap
    """


@pytest.fixture
def sessions(workspace: Path) -> dict[str, int]:
    """A live session (fake bmoe, serial and overlap, two repeats each) and an imported study
    folder, in one store (./orch.db)."""
    (workspace / "m.yaml").write_text(textwrap.dedent(SERIAL_AND_OVERLAP.format(ws=workspace)))
    orch_ok("run", "m.yaml")
    shutil.copytree(FIX / "2026-07-14", workspace / "study")
    orch_ok("import", "study")
    store = Store.open("orch.db")
    live, imported = sorted({r.session_id for r in store.runs()})
    return {"live": live, "imported": imported}


def md_tables(text: str) -> Iterator[list[dict[str, str]]]:
    """Each markdown table of `text` as rows of header -> cell."""
    lines = text.splitlines()
    for i, line in enumerate(lines[:-1]):
        if line.startswith("|") and re.fullmatch(r"\|(\s*:?-+:?\s*\|)+", lines[i + 1].strip()):
            headers = [h.strip() for h in line.strip("|").split("|")]
            rows = []
            for body in lines[i + 2:]:
                if not body.startswith("|"):
                    break
                rows.append(dict(zip(headers, (c.strip() for c in body.strip("|").split("|")))))
            yield rows


def plain(cell: str) -> str:
    """A cell's figure: without bold, a run's dagger, a note mark or an appended interval."""
    cell = cell.replace("**", "").split(" [")[0]
    return cell.rstrip(" †‡").strip()


def expected(key: str, value: Any) -> str:
    return STATS[key].fmt(value)


def measured(value: Any) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def same_number(shown: Any, held: Any) -> bool:
    if not measured(held):
        return not measured(shown)
    if not isinstance(held, (int, float)) or isinstance(held, bool):
        return bool(shown == held)          # a note, a flag
    return shown == pytest.approx(held, rel=1e-12, abs=1e-12)


def run_figures(session: int) -> dict[int, RunFigures]:
    store = Store.open("orch.db")
    runs = store.runs(session)
    return Runs(store).figures(runs)


@pytest.mark.parametrize("which", ["live", "imported"])
def test_table_json_md_runs_export_and_show_print_the_runs_figures(sessions, which, tmp_path):
    session = sessions[which]
    figures = run_figures(session)
    assert figures
    if which == "live":     # the case of the bug: a serial run's stall is not measured
        store = Store.open("orch.db")
        serial = [r.id for r in store.runs(session) if r.config == "serial"]
        overlap = [r.id for r in store.runs(session) if r.config == "overlap"]
        assert all(figures[i].stall_ms_per_token is None for i in serial)
        assert all(figures[i].stall_ms_per_token == 40.0 for i in overlap)

    # orch table --format json: one record per (table, run), the figure's raw value
    records = json.loads(orch_ok("table", str(session), "-t", "throughput,detail,latency,pressure",
                                 "--format", "json"))
    labels: dict[str, int] = {}
    checked = 0
    for rec in records:
        labels[rec["label"]] = rec["run_id"]
        held = figures[rec["run_id"]]
        for key in set(rec) & set(FIELDS):
            assert same_number(rec[key], held.get(key)), (rec["table"], rec["label"], key)
            checked += 1
    assert checked > 40

    # orch table (markdown): each cell is the formatted figure of its row's run
    md = orch_ok("table", str(session), "-t", "throughput,detail,latency,pressure")
    cells = 0
    for rows in md_tables(md):
        for row in rows:
            run_id = labels[plain(row["Config"])]
            for key in ONE_VALUE:
                header = STATS[key].header
                if header in row:
                    assert plain(row[header]) == expected(key, figures[run_id].get(key)), \
                        (row["Config"], key)
                    cells += 1
    assert cells > 40

    # orch runs --format json: the listing's mean and token count
    listing = {r["id"]: r for r in json.loads(orch_ok("runs", "-s", str(session), "-n", "500",
                                                      "--format", "json"))}
    assert set(listing) == set(figures)
    for run_id, held in figures.items():
        assert same_number(listing[run_id]["mean_tok_s"], held.mean)
        assert listing[run_id]["tokens"] == held.n

    # orch export --format json: stat_<figure> for every figure of the run
    out = tmp_path / f"export-{which}"
    orch_ok("export", str(session), "--format", "json", "-o", str(out))
    for run in json.loads((out / "runs.json").read_text()):
        held = figures[run["id"]]
        for key in FIELDS:
            if f"stat_{key}" in run and key != "repetitions":
                assert same_number(run[f"stat_{key}"], held.get(key)), (run["id"], key)

    # orch show: a row per measured figure, its formatted value; none for one not measured
    for run_id, held in figures.items():
        shown = dict(re.findall(r"│ (.+?)\s+│\s+(.+?) │", orch_ok("show", str(run_id))))
        for key in ONE_VALUE:
            name = STATS[key].label or STATS[key].header
            if name in shown:
                assert shown[name] == expected(key, held.get(key)), (run_id, key)
            elif key not in ("n", "steady_mean"):     # printed in words above the table
                assert not measured(held.get(key)) or expected(key, held.get(key)) == DASH, \
                    (run_id, key, held.get(key))


def test_the_reports_config_rows_print_the_configs_figures(sessions, tmp_path):
    session = sessions["live"]
    store = Store.open("orch.db")
    figures = run_figures(session)
    by_config: dict[str, list[Any]] = {}
    for run in store.runs(session):
        by_config.setdefault(run.config, []).append(run)
    combined = {config: combine([RunResult(r.id, r.status, figures[r.id]) for r in runs])
                for config, runs in by_config.items()}
    assert combined["serial"].get("stall_ms_per_token") is None
    assert combined["overlap"].get("stall_ms_per_token") == 40.0

    document = tmp_path / "report.md"
    orch_ok("report", str(session), "--no-plots", "-o", str(document))
    cells = 0
    for rows in md_tables(document.read_text()):
        for row in rows:
            config = plain(row.get("Config", ""))
            if config not in combined or "run ids" not in row:
                continue
            for key in ONE_VALUE:
                header = STATS[key].header
                if header in row:
                    assert plain(row[header]) == expected(key, combined[config].get(key)), \
                        (config, key)
                    cells += 1
    assert cells > 20
