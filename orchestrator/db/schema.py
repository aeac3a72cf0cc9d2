"""The store's tables (docs/architecture.md, "The store"), as SQLAlchemy Core metadata.

Alembic migrations in `db/migrations/versions` create and evolve exactly these tables; a change
here needs a migration there (tests compare the two).
"""
from __future__ import annotations

from sqlalchemy import (
                        JSON,
                        BigInteger,
                        Boolean,
                        Column,
                        DateTime,
                        Float,
                        ForeignKey,
                        Index,
                        Integer,
                        MetaData,
                        SmallInteger,
                        String,
                        Table,
                        Text,
                        UniqueConstraint,
)

metadata = MetaData()

device = Table(
    "device", metadata,
    Column("id", Integer, primary_key=True),
    Column("name", String(200), nullable=False, unique=True),
    Column("kind", String(20), nullable=False),
    Column("facts", JSON),                     # F lines of the last probe: key -> value
    Column("facts_at", DateTime(timezone=True)),
    Column("idle_baseline", JSON),             # sensor -> idle temperature (calibrate)
)

session = Table(
    "session", metadata,
    Column("id", Integer, primary_key=True),
    Column("kind", String(20), nullable=False),          # run | import
    Column("name", String(200)),
    Column("matrix_name", String(200)),
    Column("matrix_path", Text),
    Column("matrix_text", Text),
    Column("matrix_sha256", String(64)),
    Column("source_dir", Text),                            # import: the directory read
    Column("orch_version", String(50)),
    Column("git_rev", String(60)),
    Column("python_version", String(50)),                  # the controller's Python
    Column("controller_host", String(200)),
    Column("command", Text),                               # the orch command line
    Column("seed", Integer),                               # shuffled order's seed
    Column("repeat_stop", Text),                           # why adaptive repeats stopped
    Column("label", Text),                                 # import --label: shown in reports
    Column("import_options", JSON),                        # import: device, name, model, label
    Column("device_facts", JSON),                          # the device's facts when it ran
    Column("started_at", DateTime(timezone=True)),
    Column("ended_at", DateTime(timezone=True)),
)

run = Table(
    "run", metadata,
    Column("id", Integer, primary_key=True),
    Column("uid", String(40), nullable=False, unique=True),   # names the job dir on the device
    Column("session_id", Integer, ForeignKey("session.id", ondelete="CASCADE"), nullable=False),
    Column("device_id", Integer, ForeignKey("device.id"), nullable=False),
    Column("cell_key", String(400), nullable=False),
    Column("model", String(200)),
    Column("config", String(400)),
    Column("flags", Text),
    Column("argv", JSON),
    Column("repeat_index", Integer, default=0),
    Column("order_index", Integer, default=0),
    Column("status", String(20), nullable=False),   # stats/status.py Status
    Column("cause", Text),
    Column("rc", Integer),
    Column("signal", Integer),
    Column("started_at", DateTime(timezone=True)),
    Column("ended_at", DateTime(timezone=True)),
    Column("cooldown_s", Float),
    Column("cooldown_met", Boolean),
    Column("temp_start", JSON),                      # sensor -> value at the start
    Column("mem_avail_start_kb", BigInteger),
    Column("engine", String(50)),
    Column("engine_build", Text),
    Column("binary_path", Text),
    Column("binary_sha256", String(64)),
    Column("model_size", BigInteger),
    Column("model_sha256", String(64)),
    Column("remote_dir", Text),
    Column("spool_lines", Integer, default=0),       # stream lines consumed: resume point
    Column("summary", JSON),                         # orchestrator.record.RunRecord.stored()
    Column("text", Text),
    Column("warnings", JSON),
    Column("superseded", Boolean, nullable=False, default=False),
    # Where started_at came from: NULL for a live run (orch's clock, UTC); for an import, the
    # part of the study that recorded it (runs.LOCAL_TIME_SOURCES: local wall-clock times, stored
    # naive) or "mtime" (the file's modification time, UTC: a guess).
    Column("time_source", String(20)),
    Column("source_file", Text),                     # an import's file, relative to the study
    # the run's figures (stats/figures.py RunFigures.stored(), with their version), computed
    # once when it ended or was imported (db/figures.py); NULL while it runs
    Column("figures", JSON),
)
Index("ix_run_session", run.c.session_id, run.c.cell_key)

token = Table(
    "token", metadata,
    Column("run_id", Integer, ForeignKey("run.id", ondelete="CASCADE"), primary_key=True),
    Column("seq", Integer, primary_key=True),        # row order in the engine's CSV, 0-based
    Column("step", Integer),
    Column("wall_ms", Float),
    Column("io_ms", Float),
    Column("compute_ms", Float),
    Column("stall_ms", Float),
    Column("mgmt_ms", Float),
    Column("read_bytes", BigInteger),
    Column("cache_hit_pct", Float),
    Column("majflt", Float),
    Column("cpu_ms", Float),
    Column("turn", Integer),                         # session turn (1-based); NULL: one-shot
    Column("extra", JSON),
)

sample = Table(
    "sample", metadata,
    Column("run_id", Integer, ForeignKey("run.id", ondelete="CASCADE"), primary_key=True),
    Column("seq", Integer, primary_key=True),
    Column("t_ms", BigInteger),                      # a device clock can jump past 2^31 ms
    Column("rss_kb", BigInteger),
    Column("hwm_kb", BigInteger),
    Column("mem_avail_kb", BigInteger),
    Column("majflt", BigInteger),
    Column("cpu_ticks", BigInteger),
    Column("cpu_temp_mC", BigInteger),               # as the device reports it: unbounded
    Column("batt_temp_dC", BigInteger),
    # the session turn last begun when sampled (0: before the first; NULL: a one-shot run)
    Column("turn", Integer),
    Column("extra", JSON),
)

output = Table(
    "output", metadata,
    Column("run_id", Integer, ForeignKey("run.id", ondelete="CASCADE"), primary_key=True),
    Column("seq", Integer, primary_key=True),
    Column("stream", String(1), nullable=False),     # O stdout, E stderr, W agent warning,
                                                     # T a session's step (agent T line)
    Column("line", Text, nullable=False),
)

route = Table(
    # bmoe-cli `# route_trace v1` rows (docs/routes.md §1): one per routed expert, in file order.
    # The preamble and per-layer sizes live in the run's summary, route_trace field.
    "route", metadata,
    Column("run_id", Integer, ForeignKey("run.id", ondelete="CASCADE"), primary_key=True),
    Column("seq", Integer, primary_key=True),        # row order in the trace, 0-based
    Column("turn", Integer, nullable=False),
    Column("phase", SmallInteger, nullable=False),   # 0 prefill, 1 decode
    Column("step", Integer, nullable=False),         # absolute token position
    Column("layer", SmallInteger, nullable=False),
    Column("slot", SmallInteger, nullable=False),    # router rank 0..k-1
    Column("expert", Integer, nullable=False),
    Column("weight", Float),                         # NULL: the engine did not expose it
    Column("residency", SmallInteger, nullable=False),   # 0 miss, 1 hit, 2 prefetched
    Column("expert_bytes", BigInteger, nullable=False),  # bytes this routing read
    Column("dropped", SmallInteger),                 # newer writers only
)

imported_file = Table(
    "imported_file", metadata,
    Column("id", Integer, primary_key=True),
    Column("session_id", Integer, ForeignKey("session.id", ondelete="CASCADE"), nullable=False),
    Column("path", Text, nullable=False),
    Column("sha256", String(64), nullable=False),
    UniqueConstraint("session_id", "path"),
)

SAMPLE_FIELDS = ("rss_kb", "hwm_kb", "mem_avail_kb", "majflt", "cpu_ticks", "cpu_temp_mC",
                 "batt_temp_dC")

ceiling = Table(
    # `orch ceilings`: a device's measured hardware ceilings, one row per (device, UTC day); a
    # second measurement on the same day replaces the first. Figures in MiB/s, GiB/s, tok/s.
    "ceiling", metadata,
    Column("id", Integer, primary_key=True),
    Column("device_id", Integer, ForeignKey("device.id", ondelete="CASCADE"), nullable=False),
    Column("day", String(10), nullable=False),       # YYYY-MM-DD (UTC) of measured_at
    Column("measured_at", DateTime(timezone=True), nullable=False),
    Column("abi", String(20)),
    Column("probe_sha", String(64)),                 # cache key of the probe sources
    Column("path", Text),                            # directory whose file system was read
    Column("fstype", String(40)),
    Column("direct", Boolean),                       # O_DIRECT honoured (else buffered reads)
    Column("seq_mibps", Float),                      # median of the sequential samples
    Column("seq_samples", JSON),                     # [{offset_mib, mib, seconds, mibps}]
    Column("lanes", JSON),                           # [{lanes, read_kib, mib, seconds, mibps}]
    Column("best_mibps", Float),                     # best of the lanes x size sweep
    Column("knee_lanes", Integer),                   # fewest lanes within 95% of the best
    Column("knee_read_kib", BigInteger),
    Column("dram_gibps", Float),                     # median pass
    Column("dram", JSON),                            # {best_gibps, passes: [...], threads, mib}
    Column("compute_tps", Float),                    # NULL: see compute_note
    Column("compute_note", Text),                    # what was run, or why there is no figure
    Column("notes", JSON),                           # warnings (buffered fallback, RAM fs, ...)
    UniqueConstraint("device_id", "day"),
)

quality = Table(
    # Quality probes (matrix `quality:`, config/quality.py, run/quality.py): one row per (session, model,
    # config, probe). Kept out of `run` on purpose: a probe invocation is short and answers a
    # different question, so it must never enter a speed statistic, and no query over `run`
    # has to remember to leave it out. A re-run probe (--resume) replaces its row.
    "quality", metadata,
    Column("id", Integer, primary_key=True),
    Column("session_id", Integer, ForeignKey("session.id", ondelete="CASCADE"), nullable=False),
    Column("device_id", Integer, ForeignKey("device.id"), nullable=False),
    Column("model", Text, nullable=False),
    Column("config", Text, nullable=False),
    Column("flags", Text),
    Column("probe_id", Text, nullable=False),
    Column("prompt", Text),
    Column("expected", Text),
    Column("grader", Text),                          # gsm8k | exact | contains | regex:...
    Column("reply", Text),                           # the generated text, prompt removed
    Column("answer", Text),                          # what the grader read from the reply
    Column("correct", Boolean),
    Column("status", String(20), nullable=False),    # ok | failed | timeout | killed | ...
    Column("cause", Text),
    Column("argv", JSON),
    Column("uid", String(32)),
    Column("remote_dir", Text),
    Column("rc", Integer),
    Column("started_at", DateTime(timezone=True)),
    Column("ended_at", DateTime(timezone=True)),
    UniqueConstraint("session_id", "model", "config", "probe_id"),
)

# -- the lab (orchestrator/lab): devices served by workers, submissions, cells ------------------
lab_device = Table(
    # One row per device a lab worker serves. The store, not the broker, holds the lab's
    # state: which worker serves a device, whether it is quarantined and why, its heartbeat.
    "lab_device", metadata,
    Column("id", Integer, primary_key=True),
    Column("name", String(200), nullable=False, unique=True),
    Column("kind", String(20), nullable=False),
    Column("worker", String(200)),                   # the serving worker's name (--name)
    Column("host", String(200)),                     # the host that worker runs on
    Column("state", String(20), nullable=False),     # active | quarantined | removed
    Column("reason", Text),                          # why quarantined (or the last failure)
    Column("failures", Integer, nullable=False, default=0),   # infrastructure checks failed in a row
    Column("pid", Integer),                          # the device's consumer process
    Column("current_cell_id", Integer),              # lab_cell being run now
    Column("seen_at", DateTime(timezone=True)),      # the consumer's last heartbeat
    Column("updated_at", DateTime(timezone=True)),
)

lab_batch = Table(
    # One `orch lab submit`: the matrix as submitted (text and resolved prompt, so a worker
    # on another host runs exactly it), and the sessions it made (one per device).
    "lab_batch", metadata,
    Column("id", Integer, primary_key=True),
    Column("matrix_name", String(200)),
    Column("matrix_path", Text),
    Column("matrix_text", Text),
    Column("prompt_text", Text),
    # the `session:` turns' prompt files as read on the submitting host: {prompt_file: text}
    Column("session_prompts", JSON),
    Column("command", Text),
    Column("submitted_from", String(200)),
    Column("created_at", DateTime(timezone=True)),
)

lab_cell = Table(
    # One Celery task: a (device, cell) of a batch. `state` follows the task: queued ->
    # delivered (a consumer took it) -> running (its run exists) -> the run's status, or
    # `kept` (it was already ok: a redelivered task does nothing).
    "lab_cell", metadata,
    Column("id", Integer, primary_key=True),
    Column("batch_id", Integer, ForeignKey("lab_batch.id", ondelete="CASCADE"), nullable=False),
    Column("session_id", Integer, ForeignKey("session.id", ondelete="CASCADE"), nullable=False),
    Column("device", String(200), nullable=False),
    Column("cell_key", String(400), nullable=False),
    Column("position", Integer, nullable=False),     # the cell's place in the device's order
    Column("state", String(20), nullable=False),
    Column("run_id", Integer),
    Column("worker", String(200)),
    Column("attempts", Integer, nullable=False, default=0),
    Column("enqueued_at", DateTime(timezone=True)),
    Column("delivered_at", DateTime(timezone=True)),
    Column("ended_at", DateTime(timezone=True)),
    # why the cell failed (one line; NULL unless it did): its run's cause, or what stopped it
    # before a run started (migration 0017)
    Column("error", Text),
    UniqueConstraint("session_id", "cell_key"),
)
Index("ix_lab_cell_device_state", lab_cell.c.device, lab_cell.c.state)
Index("ix_lab_cell_batch", lab_cell.c.batch_id)

# -- the regression loop (docs/regressions.md): notes, acknowledgements, posted alerts ---------
annotation = Table(
    # A user's note on a session or a run (`orch note`), or the acknowledgement of a
    # regression (`orch ack`): target_kind session | run | change_point, target the session's
    # or run's id or the change point's id (results/regression_ids.py).
    "annotation", metadata,
    Column("id", Integer, primary_key=True),
    Column("target_kind", String(20), nullable=False),
    Column("target", String(64), nullable=False),
    Column("text", Text, nullable=False),
    Column("author", String(200)),                   # user@host of the command
    Column("created_at", DateTime(timezone=True)),
)
Index("ix_annotation_target", annotation.c.target_kind, annotation.c.target)

alert = Table(
    # What the lab's watcher (lab/watch.py) has done, once per event: a webhook posted (or
    # tried: `outcome`), a session evaluated. The unique key is what keeps an event from
    # being posted twice, by one worker or by several.
    "alert", metadata,
    Column("id", Integer, primary_key=True),
    Column("key", String(300), nullable=False, unique=True),
    Column("kind", String(20), nullable=False),      # change_point | step | silent | evaluated
    Column("payload", JSON),
    Column("outcome", Text),                         # "posted 200", "failed: ...", None
    Column("created_at", DateTime(timezone=True)),
)
