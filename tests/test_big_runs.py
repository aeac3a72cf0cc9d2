"""Big runs in bounded memory (issue 27, item 2): the figures (db/figures.py) read only the
token columns they need, in chunks, with the same figures to the bit as a frame of every
row, and stored figures are read without any token row; the within-run bootstrap of a long run works on means of consecutive tokens; import
streams its CSV through the recorder line by line (ingest/write.py lines())."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from peak_rss import run_measured, run_orch

from orchestrator.db import figures as figures_module
from orchestrator.db.runs import Runs
from orchestrator.db.store import Store
from orchestrator.engines.bmoe import BmoeRunParser
from orchestrator.run.recorder import RunRecorder
from orchestrator.stats import statistics, within_run

HEADER9 = "step,steps,wall_ms,io_ms,compute_ms,read_bytes,cache_hit_pct,stall_ms,mgmt_ms"
HEADER22 = ("step,steps,wall_ms,io_ms,compute_ms,read_bytes,cache_hit_pct,stall_ms,mgmt_ms,"
            "majflt,cpu_ms,dense_resident_frac,turn,majflt_mib,cache_budget_mib,rss_mib,"
            "rss_anon_mib,rss_file_mib,swap_mib,mem_available_mib,mem_free_mib,swap_free_mib")


def _wall(i: int, run: int) -> float:
    return round(180 + (i * 7 + run * 13) % 97 + ((i * 7919) % 1000) / 1000, 3)


def _record(store: Store, session: int, device: int, run: int, tokens: int,
            wide: bool) -> int:
    run_id = store.create_run(uid=f"r{run}", session_id=session, device_id=device,
                              cell_key=f"m|c{run}|0", model="m", config=f"c{run}",
                              repeat_index=0, order_index=run, status="running",
                              engine="bmoe", superseded=False)
    rec = RunRecorder(store, run_id, BmoeRunParser(), flush_rows=700)
    rec.handle("H\tproto=1\tagent=t\trun=r\tt0=0")
    rec.handle("C\t" + (HEADER22 if wide else HEADER9))
    for i in range(tokens):
        # an empty stall field now and then (NULL), a cache hit that moves
        row = (f"{i + 1},{tokens},{_wall(i, run)},{120 + i % 13}.5,{150 + i % 7}.25,"
               f"{235000000 + i * 3},{(i * 3 + run) % 100}.25,"
               f"{'' if i % 17 == 3 else f'{40 + i % 5}.{i % 10}'},20.75")
        if wide:
            row += (f",{i % 9}.5,{700 + i % 11}.125,0.848,0,0.08,3000.0,4630.4,4625.4,4.7,"
                    f"533.9,1581.9,390.9,8510.7")
        rec.handle("C\t" + row)
        if i % 50 == 0:
            rec.handle(f"S\t{i * 200}\trss_kb=5000000\thwm_kb={5100000 + i}")
    rec.handle("X\t0\t0\t1000")
    rec.flush()
    store.update_run(run_id, status="ok", summary=rec.parser.record().stored())
    return run_id


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    s = Store.open(str(tmp_path_factory.mktemp("big") / "orch.db"))
    device = s.upsert_device("d", "local")
    session = s.create_session(kind="run", name="big", matrix_name="big")
    for run, tokens in enumerate((1500, 9000, 40, 0, 2600)):
        run_id = _record(s, session, device, run, tokens, wide=run % 2 == 1)
        # ended as the runner ends a run: its figures computed once and stored
        s.update_run(run_id, figures=figures_module.compute_run(s, Runs(s).get(run_id)))
    return s


def _by_frame(store: Store, rows, **kw) -> dict:
    """The figures computed from a frame of every token and sample column."""
    ids = [r.id for r in rows]
    inputs = {r.id: figures_module.run_input(r) for r in rows}
    return statistics.compute(store.frame("token", ids), inputs, store.frame("sample", ids),
                              **kw)


@pytest.mark.parametrize("kw", [{}, {"trim": 25}, {"quantile_method": "lower"},
                                {"trim": 100}])
def test_the_narrow_read_gives_every_figure_to_the_bit(store: Store, kw) -> None:
    rows = Runs(store).current()
    got = Runs(store).figures(rows, **kw)
    assert repr(got) == repr(_by_frame(store, rows, **kw))


def test_stored_figures_are_the_computed_ones_and_read_without_token_rows(
        store: Store, monkeypatch) -> None:
    rows = Runs(store).current()
    computed = _by_frame(store, rows)

    def no_rows(*_a, **_k):
        raise AssertionError("the token rows were read")

    monkeypatch.setattr(figures_module, "read_tokens", no_rows)
    monkeypatch.setattr(Store, "frame", no_rows)
    stored = Runs(store).figures(rows)
    assert repr(stored) == repr(computed)       # every value and type, to the bit
    assert sorted(stored[r.id].n for r in rows) == [0, 40, 1500, 2600, 9000]


def test_one_run_alone_and_among_others_agrees(store: Store) -> None:
    rows = Runs(store).current()
    alone = Runs(store).figures([rows[1]], trim=10)
    assert alone[rows[1].id] == Runs(store).figures(rows, trim=10)[rows[1].id]


def test_the_figures_never_read_a_frame_of_every_token_column(store: Store,
                                                              monkeypatch) -> None:
    """Behaviour, not time: Store.frame("token") is never called, and the rows arrive in
    chunks of CHUNK_ROWS, so no list of every row exists."""
    real = Store.frame

    def frame(self, table, ids):
        assert table != "token", "the figures read a frame of every token column"
        return real(self, table, ids)

    monkeypatch.setattr(Store, "frame", frame)
    monkeypatch.setattr(figures_module, "CHUNK_ROWS", 257)
    with store.engine.connect() as conn:
        tokens = figures_module.read_tokens(conn, [r.id for r in Runs(store).current()])
    assert "extra" not in tokens and "io_ms" not in tokens
    assert len(tokens) == 1500 + 9000 + 40 + 2600
    Runs(store).figures(Runs(store).current(), trim=5)


@pytest.fixture
def copy(store: Store, tmp_path: Path) -> Store:
    """A copy of the store, to change."""
    import sqlite3

    path = tmp_path / "copy.db"
    with sqlite3.connect(store.engine.url.database) as source, sqlite3.connect(path) as target:
        source.backup(target)
    return Store.open(str(path), create=False)


def test_a_run_without_stored_figures_is_computed_and_not_stored(copy: Store) -> None:
    """A run still recording (or stored by another FIGURES_VERSION) has its figures computed
    when read, by the same function; only ending or importing a run writes them."""
    row = Runs(copy).current()[0]
    want = Runs(copy).figures([row])[row.id]
    copy.update_run(row.id, figures={**row.figures, "version": -1})
    row = Runs(copy).get(row.id)
    assert row.stored_figures is None
    assert Runs(copy).figures([row])[row.id] == want
    assert Runs(copy).get(row.id).figures["version"] == -1


def test_pressure_figures_from_samples(copy: Store) -> None:
    """Ties in time, times missing, readings missing, a run without HWM."""
    from sqlalchemy import text

    ids = [r.id for r in Runs(copy).current()]
    samples = [  # run, seq, t_ms, rss, hwm, avail, cpu mC, batt dC
        (ids[0], 9001, 5, 7340033, None, 3000001, 51234, 333),
        (ids[0], 9002, 5, 7340035, None, 2999999, 49877, None),
        (ids[0], 9003, None, 7340099, None, 1000003, 61001, 411),
        (ids[0], 9004, 3, None, None, None, None, 299),
        (ids[1], 9001, None, None, 6291457, 123457, 40001, None),
        (ids[1], 9002, 7, None, None, None, 40003, None),
    ]
    with copy.engine.begin() as conn:
        conn.execute(text("DELETE FROM sample WHERE run_id IN (:a, :b, :c)"),
                     {"a": ids[0], "b": ids[1], "c": ids[2]})     # ids[2]: no samples
        for values in samples:
            conn.execute(text("INSERT INTO sample (run_id, seq, t_ms, rss_kb, hwm_kb, "
                              "mem_avail_kb, cpu_temp_mC, batt_temp_dC) VALUES "
                              "(:r, :s, :t, :rss, :hwm, :a, :c, :b)"),
                         dict(zip(("r", "s", "t", "rss", "hwm", "a", "c", "b"), values)))
    frame = statistics.pressure_by_run(copy.frame("sample", ids))
    got = Runs(copy).figures(Runs(copy).current(), trim=1)       # computed again from the rows
    for rid in ids[:2]:
        assert {k: got[rid].get(k) for k in frame[rid]} == frame[rid]
    assert got[ids[2]].peak_rss_gib is None and ids[2] not in frame
    assert frame[ids[0]]["peak_rss_gib"] == 7340099 / 1048576         # no HWM: the max RSS
    assert frame[ids[0]]["cpu_temp_start_c"] == 51.234   # t 3 has none; of t 5, seq first


def test_a_long_run_is_bootstrapped_over_means_of_consecutive_tokens() -> None:
    rng = np.random.default_rng(5)
    long = 200 + rng.normal(0, 10, 300_000).cumsum() * 0.01 + rng.normal(0, 5, 300_000)
    figures = within_run.run_figures(long)
    assert "over means of 147 consecutive tokens" in figures["ci_method"]
    lo, hi = figures["mean_ms_ci_low"], figures["mean_ms_ci_high"]
    assert lo < long.mean() < hi
    short = within_run.run_figures(long[:within_run.COARSE_ABOVE])
    assert "over means" not in short["ci_method"]        # short runs: token by token, as before


def test_import_reads_the_csv_lazily_with_the_lines_splitlines_gives() -> None:
    from orchestrator.ingest import lines as text_lines
    from orchestrator.ingest import write

    text = "a\r\nb\rc\x0cd\u2028e\n\nf\n" * 50
    old, text_lines.LINES_CHUNK = text_lines.LINES_CHUNK, 7
    try:
        got = text_lines.lines(text)
        assert not isinstance(got, list) and list(got) == text.splitlines()
    finally:
        text_lines.LINES_CHUNK = old
    body = "step,rss_mib,wall_ms\n1,0,5.5\n2,0.0,6.5\n# summary tokens=2\n"
    kept, dead = write.not_measured(body)
    assert dead == ["rss_mib"] and list(kept) == ["step,wall_ms", "1,5.5", "2,6.5",
                                                  "# summary tokens=2"]


def _csv(folder: Path, rows: int) -> np.ndarray:
    folder.mkdir()
    walls = np.array([_wall(i, 0) for i in range(rows)])
    with (folder / "big_k6.csv").open("w") as f:
        f.write("# bmoe_metrics v1\n# model=big.gguf moe_stream=1\n" + HEADER9 + "\n")
        f.writelines(f"{i + 1},{rows},{w:.3f},{120 + i % 13}.5,{150 + i % 7}.25,{235000000 + i},"
                     f"76.25,{40 + i % 5}.5,20.75\n" for i, w in enumerate(walls))
        f.write(f"# summary tokens={rows} s/tok=0.250 tok/s=4.0 prefill_tps=6.63\n")
    return walls


def _orch(*argv: str) -> tuple[str, float]:
    """(stdout, peak RSS MiB of that process alone: tests/peak_rss.py) of one orch command."""
    proc, peak_mib = run_orch(list(argv), timeout=600)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout, peak_mib


@pytest.mark.slow
def test_a_300k_token_run_imported_and_shown(tmp_path: Path) -> None:
    rows = 300_000
    walls = _csv(tmp_path / "study", rows)
    db = str(tmp_path / "orch.db")
    _orch("import", str(tmp_path / "study"), "--db", db, "-d", "dev")
    store = Store.open(db, create=False)
    row = Runs(store).current()[0]
    stats = Runs(store).figures([row])[row.id]
    tps = np.sort(1000.0 / walls)
    assert stats["n"] == rows
    assert stats["mean"] == rows / (np.cumsum(walls)[-1] / 1000.0)      # n / decode s, exactly
    assert (stats["min"], stats["max"]) == (tps[0], tps[-1])
    for key, q in (("median", 50), ("p5", 5), ("p95", 95)):
        assert stats[key] == pytest.approx(np.percentile(tps, q), rel=1e-12)
    assert stats["stall_ms_per_token"] == pytest.approx(np.mean([40 + i % 5 + 0.5
                                                                 for i in range(rows)]))
    out, rss = _orch("show", str(row.id), "--db", db)
    assert f"{rows} tokens" in out and f"{stats['median']:.2f}" in out
    # a frame of every column of these rows, as `orch show` read them before, needs far more
    script = ("import sys; from orchestrator.db.store import Store; "
              "s = Store.open(sys.argv[1], create=False); print(len(s.frame('token', [1])))")
    proc, frame_mib = run_measured([sys.executable, "-c", script, db], timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert rss < frame_mib - 60, (rss, frame_mib)
