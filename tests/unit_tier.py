"""The `unit` tier: the tests of pure modules (statistics, the run record, config, formatting,
parsers) that start no process and open no socket or database, so that `pytest -m unit` runs
in seconds (README, the test paragraph).

UNIT below is the tier, whole, in one place: a test file -> the tests of that file that are
*not* unit tests (they run orch end to end, start the agent, open a store). Every other test
of a listed file is marked `unit` at collection (tests/conftest.py), unless it is marked
`slow` or uses a fixture of tests/ shared between tests (module or session scope: an
imported store, a server) that SHARED_PURE does not name. Why a table and not `pytestmark`
in each file: most of these files mix pure tests with a few end-to-end ones, so a per-file
mark would not do and per-test marks would scatter the tier over twenty files; here a reader
sees the tier whole, and a new pure test in a listed file joins it by itself.

The table cannot rot silently. A unit test that starts a process, connects a socket or opens
a SQLite database, in its own code or in a fixture set up for it, fails, naming this file
(`guard_on`, in every run, the full suite included); an exception that names no test of its
file, or a file that does not exist, is an error at collection.
"""
from __future__ import annotations

import os
import re
import socket
import sqlite3
import sqlite3.dbapi2
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, NoReturn

import pytest

TESTS = Path(__file__).resolve().parent

# Fixtures shared between tests (module or session scope) that do pure work: a unit test may
# use them. Any other shared fixture of tests/ keeps a test out of the tier.
SHARED_PURE = {"gemma"}   # tests/test_replay.py: a routing trace read with pandas

# file -> its tests that are not unit tests: a function name (all its parameters) or a
# parametrized id (`test_x[param]`). Slow tests are never unit tests and need no entry.
UNIT: dict[str, tuple[str, ...]] = {
    # statistics
    "test_serve.py": ("test_a_store_it_cannot_open_is_one_line_and_exit_2",
                      "test_a_non_loopback_host_is_said_before_listening"),
    "test_decision_rule.py": (),
    "test_decision_run.py": (),
    "test_uncertainty.py": (),
    "test_lab_store_retry.py": (),
    "test_store_fault_kinds.py": (),
    "test_analysis_oracle.py": (),
    "test_results.py": (),
    "test_replay.py": (),
    "test_within_run.py": (),     # its tests of an imported study use a shared store: out
    "test_result_model.py": (),
    "test_ab.py": ("test_orch_table_ab_json_csv_md_and_default",
                   "test_orch_table_leaves_ab_out_by_default_for_single_runs"),
    "test_compare_confounds.py": ("test_matched_configs_that_differ_are_marked_and_listed",
                                  "test_headers_by_session_name_in_nine_columns_and_columns_option",
                                  "test_devices_facts_and_every_headline_figure_beside_the_ratios"),
    "test_ab_design.py": ("test_an_interleaved_design_order_is_tested_paired",
                          "test_several_baselines_per_model_each_with_its_own_rows_and_a_delta_row",
                          "test_n2_interval_is_its_half_width_and_the_header_names_the_intervals",
                          "test_design_exclude_leaves_a_run_out_of_every_figure_and_lists_it",
                          "test_cli_exclude_on_report_table_and_compare"),
    "test_findings.py": ("test_findings_follow_the_results_and_say_what_the_data_do_not_support",),
    "test_ci_gate.py": ("test_slowdown_fails_with_summary_and_junit", "test_aa_store_passes",
                        "test_threshold"),
    "test_baselines_by_name.py": ("test_orch_report_takes_repeatable_b",
                                  "test_orch_table_b_prints_the_studys_deltas",
                                  "test_orch_table_bad_b_exits_2_with_one_line",
                                  "test_without_repeats_in_the_session_the_earlier_ones_count"),
    "test_energy.py": ("test_agent_battery_power", "test_agent_laptop_battery_found_by_type",
                       "test_agent_no_power_source", "test_agent_rapl_hwmon_and_root_only_counters",
                       "test_calibrate_measures_idle_power_and_net_energy_is_above_it",
                       "test_imported_runs_read_power_columns_and_metrics",
                       "test_local_rapl_with_a_wrap_around_under_dash",
                       "test_the_report_draws_power_beside_temperature_and_ram",
                       "test_this_machine_says_no_power_source_and_tables_dash"),
    "test_routes.py": ("test_a_malformed_trace_is_not_imported_and_says_where",
                       "test_a_run_without_a_trace_exits_2_with_one_line",
                       "test_import_stores_the_trace_rows_and_its_preamble_with_the_run",
                       "test_orch_routes_json_gives_every_published_gemma_figure",
                       "test_orch_routes_md_prints_the_figures_with_units",
                       "test_other_fixture_folders_import_as_before"),
    # the run record
    "test_record.py": ("test_import_stores_records_with_pressure",
                       "test_runner_stores_record_and_engine_build"),
    "test_unstorable_numbers.py": ("test_import_refuses_the_file_with_its_line",
                                   "test_the_other_files_still_import"),
    "test_device_values.py": (
        "test_an_import_drops_the_values_the_store_cannot_hold_on_sqlite",
        "test_an_import_drops_the_values_the_store_cannot_hold_on_postgres",
        "test_a_runs_own_values_are_dropped_and_named_once",
        "test_a_generic_engines_token_values_are_dropped_and_named",
        "test_a_ceiling_figure_the_store_cannot_hold_is_named_in_its_notes",
        "test_a_resumed_run_replays_an_unstorable_sample_and_names_it_again",
        "test_calibrate_names_a_reading_the_store_cannot_hold_instead_of_printing_it"),
    # config: matrices, designs, inventories, local files, refused before anything is opened
    "test_matrix.py": (),
    "test_early_checks.py": (),
    "test_report_rows.py": ("test_without_a_design_no_overlap_is_claimed",),
    "test_report_structure.py": (
        "test_title_summary_and_sections_in_the_write_ups_order",
        "test_environment_has_device_facts_notes_build_and_the_designs_rows_in_order",
        "test_method_names_tokens_trim_repeats_order_cooldown_and_the_columns",
        "test_results_per_model_headed_by_its_label_with_facts_and_size_over_ram",
        "test_reproduce_of_an_import_gives_the_command_and_the_flags_per_config",
        "test_reproduce_of_a_live_session_is_the_orch_run_command",
        "test_design_facts_say_given_and_keep_their_precision",
        "test_a_date_only_design_prints_no_time_of_day",
        "test_provenance_lists_driver_logs_and_the_state_lines"),
    "test_design.py": ("test_a_matrix_notes_are_printed_like_a_designs",
                       "test_orch_table_prints_the_notes_under_each_group_markdown_only",
                       "test_report_prints_the_designs_notes_labels_and_device"),
    "test_hostile_inputs.py": ("test_hostile_input[db-proc]",
                               "test_hostile_input[db-not-a-database]",
                               "test_a_fifo_is_refused_at_the_open_not_waited_on[design]",
                               "test_interrupt_is_one_line_and_130",
                               "test_prompt_bytes_reach_the_engine_and_show_prints_its_stderr",
                               "test_subsecond_timeout_is_sent_and_honoured",
                               "test_unexpected_error_is_one_line_and_debug_shows_it"),
    "test_overlapping_workdirs.py": ("test_reap_leaves_the_jobs_of_a_workdir_inside_its_runs_folder",
                                     "test_a_runs_path_with_pattern_characters_matches_only_itself"),
    "test_long_lines.py": ("test_a_long_line_is_cut_on_the_device",),
    "test_special_files.py": ("test_a_timed_out_local_command_leaves_no_child",
                              "test_device_model_that_is_no_regular_file_is_not_hashed"),
    "test_device_fetch.py": ("test_a_regular_file_is_fetched_whole",
                             "test_a_special_file_is_refused_at_once",
                             "test_a_file_over_its_bound_is_refused",
                             "test_nothing_there_is_not_found",
                             "test_a_command_read_whole_is_bounded_too",
                             "test_a_file_larger_than_its_stat_says_is_cut_at_its_bound",
                             "test_a_read_that_hangs_times_out_and_leaves_nothing",
                             "test_orch_run_a_special_route_trace_costs_a_warning_not_the_run",
                             "test_ctrl_c_during_a_hung_fetch_leaves_nothing_running"),
    # formatting
    "test_flags_cells.py": (),
    "test_escapes.py": ("test_show_runs_and_table_print_escapes_visibly",),
    "test_hostile_text.py": ("test_markdown_shows_every_hostile_text_literally",
                             "test_the_html_page_loads_nothing_from_another_host",
                             "test_a_bidi_label_on_the_terminal_prints_escaped"),
    "test_terminal_views.py": (),
    "test_low_memory.py": (),
    "test_lab_failures.py": (),     # its tests under `ulimit -v` run orch: slow, out   # `orch run`'s board and closing table (its e2e is slow)
    # parsers: engine output, bmoe's formats, quality probes and graders, llama.cpp's parts
    "test_adapters.py": (),
    "test_bmoe_format.py": (),
    "test_quality.py": (),
    "test_llama_units.py": ("test_failed_step_raises_with_output_tail",
                            "test_llama_token_without_bindings_says_so"),
}


def _check_table() -> None:
    """Every listed file exists and every exception names a test function in it."""
    for name, left_out in UNIT.items():
        path = TESTS / name
        if not path.is_file():
            raise pytest.UsageError(f"tests/unit_tier.py: UNIT lists {name}, which does not exist")
        defined = set(re.findall(r"^\s*def (test_\w+)\(", path.read_text(), re.M))
        for test in left_out:
            if test.partition("[")[0] not in defined:
                raise pytest.UsageError(f"tests/unit_tier.py: UNIT leaves {test} of {name} out, "
                                        f"but {name} has no such test")


def _shares_state(item: pytest.Item) -> bool:
    """The test uses a fixture of tests/ shared between tests (module or session scope) that
    SHARED_PURE does not name: an imported store, a server. pytest's own fixtures
    (tmp_path_factory) and plugins' have no baseid."""
    info = getattr(item, "_fixtureinfo", None)
    for name in getattr(info, "names_closure", ()):
        for fixturedef in info.name2fixturedefs.get(name, ()):
            if fixturedef.scope != "function" and fixturedef.baseid and name not in SHARED_PURE:
                return True
    return False


def mark(items: list[pytest.Item]) -> None:
    """Mark the unit tests among the collected items (pytest_collection_modifyitems)."""
    _check_table()
    unit = pytest.mark.unit
    for item in items:
        left_out = UNIT.get(item.path.name)
        if left_out is None or item.get_closest_marker("slow") is not None:
            continue
        if getattr(item, "originalname", item.name) in left_out or item.name in left_out:
            continue
        if not _shares_state(item):
            item.add_marker(unit)


def _importing() -> bool:
    """A module is being imported somewhere up the stack: what it does then (urllib3 binds a
    socket to probe for IPv6) is the module's own first-import probe, not the test's doing,
    and which test imports a module first depends on the order the tests run in."""
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


# what guard_on replaced (to put back) and what another thread of the test tried
_GUARD = pytest.StashKey[tuple[list[tuple[Any, str, Any]], list[str]]]()


def guard_on(item: pytest.Item) -> None:
    """From the start of a unit test's setup (its fixtures included) to the end of its
    teardown: starting a process, connecting a socket and opening SQLite fail it, outside a
    module's import. A try in another thread than the test's is also kept for guard_off: a
    thread's failure alone would not fail the test. The teardown of fixtures shared with other
    tests, which the last test of a module or worker runs, is outside it (tears_down_shared)."""
    if item.get_closest_marker("unit") is None:
        return
    undo: list[tuple[Any, str, Any]] = []
    seen: list[str] = []
    test_thread = threading.current_thread()

    def fail(what: str) -> NoReturn:
        if threading.current_thread() is not test_thread:
            seen.append(what)
        pytest.fail(f"{item.nodeid} is in the unit tier but {what}: a unit test starts no "
                    f"process and opens no socket or database. Keep it pure, or leave it out "
                    f"of the tier in tests/unit_tier.py (UNIT[{item.path.name!r}])",
                    pytrace=False)

    def refusing(owner: Any, name: str, what: str) -> None:
        original = getattr(owner, name)

        def refuse(*args: Any, **kwargs: Any) -> Any:
            if _importing():
                return original(*args, **kwargs)
            fail(what)
        undo.append((owner, name, original))
        setattr(owner, name, refuse)

    refusing(subprocess.Popen, "__init__", "started a process")
    for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system"):
        if hasattr(os, name):
            refusing(os, name, f"started a process (os.{name})")
    for name in ("connect", "connect_ex"):
        refusing(socket.socket, name, f"connected a socket ({name})")
    refusing(sqlite3, "connect", "opened a SQLite database")
    refusing(sqlite3.dbapi2, "connect", "opened a SQLite database")
    item.stash[_GUARD] = (undo, seen)


def tears_down_shared(item: pytest.Item, nextitem: pytest.Item | None) -> bool:
    """This item's teardown also stops fixtures of a wider scope: it is the last of its module
    (or of the worker's session) to run here."""
    return nextitem is None or nextitem.path != item.path


def guard_off(item: pytest.Item) -> None:
    """Undo guard_on (once; a second call does nothing); fail the test if another thread of it
    tried what a unit test may not."""
    undo, seen = item.stash.get(_GUARD, ([], []))
    if _GUARD in item.stash:
        del item.stash[_GUARD]
    for owner, name, original in reversed(undo):
        setattr(owner, name, original)
    undo.clear()
    if seen:
        pytest.fail(f"{item.nodeid} is in the unit tier but {seen[0]} in another thread "
                    f"(tests/unit_tier.py)", pytrace=False)
