"""A PostgreSQL server that stops answering in the middle of a statement (docs/reliability.md,
"Store faults during a run"): a stopped or hung server whose kernel still acknowledges every
packet defeats libpq's connect timeout, TCP keepalives and TCP user timeout alike, and libpq
has no read timeout, so the statement would wait for ever.

A statement (or a commit) that has had no answer for `QUIET_S` is not judged by its own
silence: a long query on a busy server is silent too. The watch asks the server, on a
connection of its own with libpq's connect timeout: connect and `SELECT 1`, bounded by
`PROBE_S`. A server that answers is working on the statement: it is left alone (and asked
again after another `QUIET_S`). A server that does not answer is gone: the waiting
connections' sockets are shut down, so the driver raises its "server closed the connection"
OperationalError, which db/faults.py calls *lost* and db/reconnect.py rides out within the
run's grace like any other lost connection (then one line, exit 1)."""
from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from sqlalchemy import Engine, event

log = logging.getLogger("orch.store")

QUIET_S = 10.0     # no answer this long: ask the server whether it is there
PROBE_S = 20.0     # the server's answer to that question (connect timeout 10 s + SELECT 1)


class StatementWatch:
    """Watches every statement and commit of one PostgreSQL engine (see the module doc)."""

    def __init__(self, engine: Engine, quiet_s: float = QUIET_S, probe_s: float = PROBE_S,
                 probe: Callable[[], bool] | None = None) -> None:
        self.engine, self.quiet_s, self.probe_s = engine, quiet_s, probe_s
        self._probe = probe or self._server_answers
        self._waiting: dict[int, tuple[float, Any]] = {}   # id(dbapi conn) -> (since, conn)
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self.cut = 0        # connections shut down because the server was silent
        event.listen(engine, "before_cursor_execute", self._before)
        event.listen(engine, "after_cursor_execute", self._after)
        event.listen(engine, "handle_error", self._error)
        dialect = engine.dialect
        # a COMMIT, a ROLLBACK and the pool's pre-ping wait on the server as a statement does,
        # unseen by the cursor events: this engine's own dialect instance wraps them
        for name in ("do_commit", "do_rollback", "do_ping"):
            setattr(dialect, name, self._watched(getattr(dialect, name)))

    # -- what is waiting ---------------------------------------------------------------------
    def _begin(self, dbapi_conn: Any) -> None:
        with self._lock:
            self._waiting[id(dbapi_conn)] = (time.monotonic(), dbapi_conn)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="orch-statement-watch",
                                                daemon=True)
                self._thread.start()

    def _end(self, dbapi_conn: Any) -> None:
        with self._lock:
            self._waiting.pop(id(dbapi_conn), None)

    def _before(self, _conn: Any, cursor: Any, *_args: Any) -> None:
        self._begin(cursor.connection)

    def _after(self, _conn: Any, cursor: Any, *_args: Any) -> None:
        self._end(cursor.connection)

    def _error(self, context: Any) -> None:
        cursor = getattr(context, "cursor", None)
        if cursor is not None:
            self._end(cursor.connection)

    def _watched(self, call: Callable[[Any], None]) -> Callable[[Any], None]:
        def watched(dbapi_conn: Any) -> None:
            self._begin(dbapi_conn)
            try:
                call(dbapi_conn)
            finally:
                self._end(dbapi_conn)
        return watched

    # -- the watch ---------------------------------------------------------------------------
    def _loop(self) -> None:
        """Runs while anything waits; a new thread starts with the next statement."""
        while True:
            self._wake.wait(1.0)
            with self._lock:
                if not self._waiting:
                    self._thread = None
                    return
                now = time.monotonic()
                quiet = [(key, conn) for key, (since, conn) in self._waiting.items()
                         if now - since >= self.quiet_s]
            if not quiet or self._answers():
                with self._lock:       # working, not gone: asked again after quiet_s
                    for key, conn in quiet:
                        if key in self._waiting:
                            self._waiting[key] = (time.monotonic(), conn)
                continue
            for key, conn in quiet:
                with self._lock:
                    if key not in self._waiting:
                        continue
                self._shut(conn)

    def _answers(self) -> bool:
        """The probe, bounded by probe_s (a probe that hangs is an answer of silence)."""
        result: list[bool] = []
        thread = threading.Thread(target=lambda: result.append(self._probe()), daemon=True,
                                  name="orch-store-probe")
        thread.start()
        thread.join(self.probe_s)
        return bool(result and result[0])

    def _server_answers(self) -> bool:
        dialect = self.engine.dialect
        cargs, cparams = dialect.create_connect_args(self.engine.url)
        cparams = {**cparams, "connect_timeout": 10}
        try:
            conn = dialect.dbapi.connect(*cargs, **cparams)   # type: ignore[union-attr]
        except Exception:  # noqa: BLE001 - any failure to reach the server is silence
            return False
        try:
            cursor = conn.cursor()
            cursor.execute("SELECT 1")
            return cursor.fetchone() is not None
        except Exception:  # noqa: BLE001
            return False
        finally:
            try:
                conn.close()
            except Exception:  # noqa: BLE001 - the socket's end; nothing to tell
                pass

    def _shut(self, dbapi_conn: Any) -> None:
        """Shut the connection's socket down under the driver, which then raises (its read
        returns end of file); the descriptor itself stays the driver's to close."""
        try:
            fd = dbapi_conn.fileno()
            dup = socket.socket(fileno=os.dup(fd))
        except (OSError, ValueError, AttributeError) as exc:
            log.warning("could not cut a connection to a silent store: %s", exc)
            return
        try:
            dup.shutdown(socket.SHUT_RDWR)
            self.cut += 1
            log.warning("the store's server has not answered a statement for %.0f s nor a new "
                        "connection: its connection was cut", self.quiet_s)
        except OSError:
            pass
        finally:
            dup.close()
