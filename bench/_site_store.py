"""A synthetic store of N sessions for bench/site, written in bulk: eight template sessions
are recorded once (token rows, then their figures computed as a real run's are, db/backfill.py)
in a scratch store; every session of the bench store is a copy of one of them (runs, figures,
tokens), alternating between two devices of one matrix, the second half from the slower
templates: a step halfway, as a history with a regression has.

Per session: 4 configs x 3 repeats, 32 token rows per run.
"""
from __future__ import annotations

import datetime as dt
import math
from pathlib import Path

from sqlalchemy import select

from orchestrator.db import schema
from orchestrator.db.backfill import backfill
from orchestrator.db.store import Store

CONFIGS, REPEATS, TOKENS, TEMPLATES = ("mmap", "cache-2g", "cache-4g", "pinned"), 3, 32, 8
T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def _templates(path: Path) -> Store:
    store = Store.open(str(path))
    dev = store.upsert_device("template", "local")
    for t in range(TEMPLATES):
        sid = store.create_session(kind="run", name=f"t{t}", matrix_name="bench",
                                   started_at=T0)
        level = 20.0 * (0.85 if t >= TEMPLATES // 2 else 1.0) * (1 + 0.01 * (t % 4 - 1.5))
        for c, config in enumerate(CONFIGS):
            for rep in range(REPEATS):
                rid = store.create_run(
                    uid=f"t{t}-{config}-{rep}", session_id=sid, device_id=dev,
                    cell_key=f"qwen|{config}|{rep}", model="qwen", config=config,
                    flags=f"--{config}", repeat_index=rep, order_index=c * REPEATS + rep,
                    status="ok", engine="llama-bench", superseded=False,
                    engine_build="abc1234 (1)", started_at=T0, ended_at=T0,
                    binary_path=f"/root/.cache/orch/llama.cpp/0.3.{30 + t // 4}/bin/x")
                tps = level * (1 + 0.1 * c) * math.exp(0.02 * math.sin(7 * t + 3 * rep))
                with store.engine.begin() as conn:
                    conn.execute(schema.token.insert(), [
                        {"run_id": rid, "seq": i, "step": i + 1,
                         "wall_ms": 1000.0 / tps * (1 + 0.01 * math.sin(i))}
                        for i in range(TOKENS)])
    backfill(store)
    return store


def synthetic_store(path: Path, sessions: int, scratch: Path) -> Store:
    """A store of `sessions` sessions at `path` (`scratch`: the templates' store, reused)."""
    templates = Store.open(str(scratch)) if scratch.exists() else _templates(scratch)
    with templates.engine.connect() as conn:
        runs = [dict(r._mapping) for r in conn.execute(select(schema.run)
                                                       .order_by(schema.run.c.id))]
        tokens = [dict(r._mapping) for r in conn.execute(select(schema.token))]
    by_session: dict[int, list[dict]] = {}
    for r in runs:
        by_session.setdefault(r["session_id"], []).append(r)
    tokens_of: dict[int, list[dict]] = {}
    for t in tokens:
        tokens_of.setdefault(t["run_id"], []).append(t)
    template_ids = sorted(by_session)
    store = Store.open(str(path))
    devices = [store.upsert_device(name, "local") for name in ("phone-a", "phone-b")]
    session_rows, run_rows, token_rows = [], [], []
    run_id = 0
    for k in range(sessions):
        late = k >= sessions // 2
        template = template_ids[(k // 2) % (TEMPLATES // 2) + (TEMPLATES // 2 if late else 0)]
        started = T0 + dt.timedelta(hours=k)
        session_rows.append({"id": k + 1, "kind": "run", "name": f"nightly-{k}",
                             "matrix_name": "bench", "started_at": started,
                             "ended_at": started})
        for r in by_session[template]:
            run_id += 1
            run_rows.append({**r, "id": run_id, "uid": f"s{k}-{r['uid']}", "session_id": k + 1,
                             "device_id": devices[k % 2], "started_at": started,
                             "ended_at": started})
            token_rows += [{**t, "run_id": run_id} for t in tokens_of[r["id"]]]
    with store.engine.begin() as conn:
        conn.execute(schema.session.insert(), session_rows)
        conn.execute(schema.run.insert(), run_rows)
        for i in range(0, len(token_rows), 50_000):
            conn.execute(schema.token.insert(), token_rows[i:i + 50_000])
    return store
