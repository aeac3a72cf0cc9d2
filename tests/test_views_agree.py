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
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from cli_helpers import orch_ok
from test_report import md_tables as report_tables
from orchestrator.db.runs import Runs
from orchestrator.db.store import Store
from orchestrator.report.format.columns import SHOW
from orchestrator.report.format.columns import TABLES as COLUMNS
from orchestrator.report.format.formatters import STATS
from orchestrator.results.table_data import table_data
from orchestrator.stats.config_figures import RunResult, combine
from orchestrator.stats.figures import FIELDS, RunFigures
from orchestrator.stats.values import DASH

FIX = Path(__file__).resolve().parent / "fixtures" / "bigmoe"
# one-value figures: a cell of two keys (energy with its note, the steady state with the
# settle test's words) is not one figure's formatted text
ONE_VALUE = [k for k in STATS if k in FIELDS and k not in ("energy_j", "steady_mean")]



def serial_and_overlap(ws: Path) -> dict[str, Any]:
    """fake bmoe, a serial and an overlap config, two repeats each (each repeat slower)."""
    return {"name": "views", "engine": "bmoe", "binary": {"local": "fake_bmoe.sh"},
            "models": {"m": "/m.gguf"}, "prompt": "p", "tokens": 8, "repeat": 2,
            "cooldown": 0, "configs": {
                "serial": f"--delay 0 --slowdown {ws}/serial",
                "overlap": f"--delay 0 --overlap --slowdown {ws}/overlap"}}


FOLDERS = sorted(p.name for p in FIX.iterdir() if p.is_dir())
TABLES = "model,throughput,detail,latency,pressure,adaptive,variants,energy,ab"


@pytest.fixture(params=["live", *FOLDERS])
def session(request: pytest.FixtureRequest, workspace: Path) -> int:
    """A live session (fake bmoe, serial and overlap, two repeats each), or a fixture study
    folder imported, in ./orch.db."""
    if request.param == "live":
        (workspace / "m.yaml").write_text(yaml.safe_dump(serial_and_overlap(workspace)))
        orch_ok("run", "m.yaml")
    else:
        shutil.copytree(FIX / request.param, workspace / "study")
        orch_ok("import", "study")
    (only,) = {r.session_id for r in Runs(Store.open("orch.db")).current()}
    return only


def md_tables(text: str) -> Iterator[list[dict[str, str]]]:
    """Each markdown table of `text` as rows of header -> cell (test_report.py's parser)."""
    for table in report_tables(text):
        yield [dict(zip(table["headers"], row)) for row in table["rows"]]


def plain(cell: str) -> str:
    """A cell's figure: without bold, a run's dagger, a note mark or an appended interval."""
    cell = cell.replace("**", "").split(" [")[0]
    return cell.rstrip(" †‡").strip()


NUMBER = re.compile(r"[-−]?\d+(?:\.(\d*))?")


def agrees(cell: str, key: str, held: Any) -> bool:
    """Whether a printed cell is the held figure at the cell's printed precision (a table
    may print fewer digits than another: the published tables' own formats), "—" for a
    figure not measured."""
    text = plain(cell)
    if text == STATS[key].fmt(held):    # what the figure's own formatter prints
        return True
    if not measured(held):
        return text == DASH
    if isinstance(held, bool) or not isinstance(held, (int, float)):
        return text == STATS[key].fmt(held)
    found = NUMBER.search(text)
    if found is None:
        return False
    value, digits = float(found.group(0).replace("−", "-")), len(found.group(1) or "")
    return abs(value - held) <= 0.5 * 10.0 ** -digits * (1 + 1e-9) + 1e-12


def measured(value: Any) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def same_number(shown: Any, held: Any) -> bool:
    if not measured(held):
        return not measured(shown)
    if not isinstance(held, (int, float)) or isinstance(held, bool):
        return bool(shown == held)          # a note, a flag
    return shown == pytest.approx(held, rel=1e-12, abs=1e-12)


def table_kind(rows: list[dict[str, str]]) -> str | None:
    """Which of `orch table`'s per-run tables has these headers (None: another table)."""
    headers = set(rows[0]) - {"Config", "run ids"} if rows else set()
    kinds = [k for k, spec in COLUMNS.items() if headers and headers <= set(spec.headers)]
    return kinds[0] if len(kinds) == 1 else None


def run_figures(session: int) -> dict[int, RunFigures]:
    store = Store.open("orch.db")
    runs = Runs(store).current(session)
    return Runs(store).figures(runs)


def test_table_json_md_runs_export_and_show_print_the_runs_figures(session, tmp_path):
    figures = run_figures(session)
    assert figures
    store = Store.open("orch.db")
    configs = {r.id: r.config for r in Runs(store).current(session)}
    if "serial" in configs.values():
        # the live session, the case of the bug: a serial run's stall is not measured
        assert all(f.stall_ms_per_token is None
                   for i, f in figures.items() if configs[i] == "serial")
        assert all(f.stall_ms_per_token == 40.0
                   for i, f in figures.items() if configs[i] == "overlap")
    check_table_json(session, figures)
    groups = [[r.id for r in members] for _, members in table_data(store, session).groups]
    check_table_markdown(session, figures, groups)
    check_runs_json(session, figures)
    check_export(session, figures, tmp_path / "export")
    check_show(figures)


def check_table_json(session: int, figures: dict[int, RunFigures]) -> None:
    """orch table --format json: one record per (table, run), each figure's raw value."""
    checked = 0
    for rec in json.loads(orch_ok("table", str(session), "-t", TABLES, "--format", "json")):
        if "run_id" not in rec:     # the model and A/B tables: a model's, a config's rows
            continue
        held = figures[rec["run_id"]]
        for key in set(rec) & set(FIELDS):
            assert same_number(rec[key], held.get(key)), (rec["table"], rec["label"], key)
            checked += 1
    assert checked > 20


def check_table_markdown(session: int, figures: dict[int, RunFigures],
                         groups: list[list[int]]) -> None:
    """orch table (markdown): each cell is its row's run's figure. The n-th table of a kind
    is the n-th (model, device) group's, its rows the group's runs in order."""
    seen: dict[str, int] = {}
    cells = 0
    for rows in md_tables(orch_ok("table", str(session), "-t", TABLES)):
        kind = table_kind(rows)
        if kind is None:
            continue    # the model table (a row per model), the A/B table (per config)
        run_ids = groups[seen.setdefault(kind, 0)]
        seen[kind] += 1
        assert len(run_ids) == len(rows), kind
        for row, run_id in zip(rows, run_ids):
            assert row.get("run ids", str(run_id)) == str(run_id)
            for key in ONE_VALUE:
                if STATS[key].header in row:
                    assert agrees(row[STATS[key].header], key, figures[run_id].get(key)), \
                        (row["Config"], run_id, key, figures[run_id].get(key))
                    cells += 1
    assert cells > 20 and set(seen.values()) == {len(groups)}


def check_runs_json(session: int, figures: dict[int, RunFigures]) -> None:
    """orch runs --format json: the listing's mean and token count."""
    listing = {r["id"]: r for r in json.loads(orch_ok("runs", "-s", str(session), "-n", "500",
                                                      "--format", "json"))}
    assert set(listing) == set(figures)
    for run_id, held in figures.items():
        assert same_number(listing[run_id]["mean_tok_s"], held.mean)
        # generated tokens: the token rows, else the engine's count (a summary-only import)
        assert listing[run_id]["tokens"] == held.tokens
        assert held.tokens == held.n or (held.n == 0 and held.summary_only)


def check_export(session: int, figures: dict[int, RunFigures], out: Path) -> None:
    """orch export --format json: stat_<figure> for every figure of the run."""
    orch_ok("export", str(session), "--format", "json", "-o", str(out))
    for run in json.loads((out / "runs.json").read_text()):
        held = figures[run["id"]]
        for key in FIELDS:
            if f"stat_{key}" in run and key != "repetitions":
                assert same_number(run[f"stat_{key}"], held.get(key)), (run["id"], key)


def check_show(figures: dict[int, RunFigures]) -> None:
    """orch show: a line per measured figure, its formatted value; none for one not
    measured; the token count in the status line."""
    for run_id, held in figures.items():
        text = orch_ok("show", str(run_id))
        assert f", {held.tokens} tokens, " in text
        shown = dict(re.findall(r"│ (.+?)\s+│\s+(.+?) │", text))
        for key in ONE_VALUE:
            name = STATS[key].label or STATS[key].header
            if name in shown:
                # the figure's formatter (a summary-only run's: at the engine's digits)
                column = next(c for c in SHOW.columns if c.key == key)
                assert shown[name] == column.text(held), (run_id, key)
            elif key != "n":
                assert not measured(held.get(key)), (run_id, key, held.get(key))


def test_the_reports_config_rows_print_the_configs_figures(session, tmp_path):
    store = Store.open("orch.db")
    figures = run_figures(session)
    by_config: dict[str, list[Any]] = {}
    for run in Runs(store).current(session):
        by_config.setdefault(run.config, []).append(run)
    combined = {config: combine([RunResult(r.id, r.status, figures[r.id]) for r in runs])
                for config, runs in by_config.items()}
    if "serial" in combined:        # the live session
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
                    assert agrees(row[header], key, combined[config].get(key)), (config, key)
                    cells += 1
    assert cells > 0
