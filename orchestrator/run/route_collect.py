"""A traced cell's `# route_trace v1` file (docs/routes.md §1), fetched from the device after
the run and stored with it: rows into the `route` table, preamble and layer sizes into the
record's route_trace field (as `orch import` stores an imported trace), so `orch routes RUN`
reads a measured run and an imported one alike.

A trace that is missing, refused (not a regular file, over its bound: transports/fetch.py),
too slow to fetch, or that does not parse costs the run a warning, never the run: its tokens
and summary are measured and stored either way.
"""
from __future__ import annotations

from orchestrator.db.store import Store
from orchestrator.engines.route_trace import parse_route_trace
from orchestrator.record import RunRecord
from orchestrator.run.link_retry import retry_link
from orchestrator.transports.base import RemoteFileNotFound, Transport, TransportError
from orchestrator.transports.fetch import ROUTE_TRACE, FetchRefused, fetch_file

TRACE_NAME = "route.csv"


def trace_path(jobdir: str) -> str:
    """Where a traced cell's engine writes its trace: next to the per-token CSV."""
    return f"{jobdir}/{TRACE_NAME}"


def collect_route_trace(transport: Transport, store: Store, run_id: int, path: str,
                        record: RunRecord, required: bool = True) -> str | None:
    """Fetch, parse and store the trace at `path`; None when stored, else the run's warning.
    `required` False (a run that did not end ok): a missing file is no news, no warning."""
    try:
        data = retry_link(transport, f"the fetch of {path}",
                          lambda: fetch_file(transport, path, ROUTE_TRACE))
    except RemoteFileNotFound:
        return f"route trace: the engine wrote no {path}" if required else None
    except FetchRefused as exc:   # it says the path and why (not a regular file, too large)
        return f"route trace: {exc}"
    except TransportError as exc:
        return f"route trace: could not fetch {path}: {exc}"
    try:
        trace = parse_route_trace(data.decode("utf-8", errors="replace"))
    except ValueError as exc:
        return f"route trace: {path} not stored: {exc}"
    store.insert_route(run_id, trace.rows)
    record.route_trace = trace.meta()
    return None
