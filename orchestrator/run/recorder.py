"""Stream lines of one run -> rows in the store, in batches, as they arrive.

The recorder counts complete stream lines. What it has flushed and the count it has flushed
up to are written in one transaction, so after a crash or a dropped link the run resumes from
exactly the line after the last stored one: no row lost, none duplicated.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from operator import attrgetter
from typing import Any

from orchestrator.db.storable import merged, storable_samples, storable_token
from orchestrator.db.store import Store
from orchestrator.db.writes import SAMPLE_FIELDS, write_batch
from orchestrator.engines.base import RunParser, TokenRow
from orchestrator.run.stream import (
    Event,
    Exit,
    GarbledExit,
    ProtocolError,
    TurnEvent,
    parse_line,
)

TokenCallback = Callable[[TokenRow, int], None]

# a TokenRow's values in TOKEN_KEYS' order after run_id and seq (db/writes.py): one C call
_ROW_VALUES = attrgetter("step", "wall_ms", "io_ms", "compute_ms", "stall_ms", "mgmt_ms",
                         "read_bytes", "cache_hit_pct", "majflt", "cpu_ms", "turn",
                         "extra")


class RunRecorder:
    def __init__(self, store: Store, run_id: int, parser: RunParser, stored_lines: int = 0,
                 flush_rows: int = 5000, flush_seconds: float = 1.0,
                 on_token: TokenCallback | None = None,
                 on_sample: Callable[[dict[str, int]], None] | None = None,
                 session: bool = False) -> None:
        self.store = store
        self.run_id = run_id
        self.parser = parser
        # Lines below this index were stored by an earlier attach: replay them through the
        # parser (to rebuild its state: CSV header, preamble) but store nothing again.
        self.stored_lines = stored_lines
        self.lines = 0
        self.token_seq = 0
        self.sample_seq = 0
        self.output_seq = 0
        self.exit: Exit | None = None
        self.garbled: str | None = None   # the X line came but could not be read
        self.first_sample: dict[str, int] | None = None
        self.last_sample: dict[str, int] | None = None
        # the decode phase begins at the sample just before the first token (stats/energy.py)
        self.last_sample_t_ms: int | None = None
        self.decode_from_ms: int | None = None
        self.warnings: list[str] = []
        self.protocol_errors: list[str] = []
        # a session run (docs/sessions.md): its T lines in order (replayed ones too, so a
        # resumed run rebuilds them), and the turn last begun, which each sample carries
        # (0 before the first; None for a one-shot run, whose samples have no turn)
        self.turn_events: list[TurnEvent] = []
        self.turn: int | None = 0 if session else None
        self._tokens: list[tuple[Any, ...]] = []
        self._samples: list[dict[str, Any]] = []
        self._outputs: list[dict[str, Any]] = []
        self._flush_rows = flush_rows
        self._flush_seconds = flush_seconds
        self._last_flush = time.monotonic()
        self._on_token = on_token
        self._on_sample = on_sample
        # given each batch of token tuples (TOKEN_KEYS order) once the store has it, as it
        # was inserted (ingest/figures.py keeps an import's token figures from them)
        self.on_stored: Callable[[list[tuple[Any, ...]]], None] | None = None
        # a parser's C-line hot path (a token row or None), when it has one (engines/bmoe.py)
        self._feed_row: Callable[[str], TokenRow | None] | None = getattr(parser, "feed_row",
                                                                           None)
        # ... and as the tuple of its fields (TokenRow's order, which is TOKEN_KEYS' after
        # run_id and seq) when no callback wants the row: stored as it is
        self._feed_values: Callable[[str], tuple[Any, ...] | None] | None = (
            getattr(parser, "feed_values", None) if on_token is None else None)

    def handle_csv(self, text: str) -> None:
        """handle("C\t" + text) without building that line: the importer's hot path
        (ingest/write.py), one per CSV line."""
        if self._feed_row is None or self.lines < self.stored_lines:
            self.handle("C\t" + text)
            return
        self.lines += 1
        row = None
        if self._feed_values is not None:
            values = self._feed_values(text)
        else:
            row = self._feed_row(text)
            values = None if row is None else _ROW_VALUES(row)
        if values is not None:
            if self.decode_from_ms is None:   # the first token: the decode phase begins
                self.decode_from_ms = self.last_sample_t_ms or 0
            self._tokens.append((self.run_id, self.token_seq) + values)
            self.token_seq += 1
            if self._on_token is not None and row is not None:   # then a row was built
                self._on_token(row, self.token_seq)
        if not self.lines & 63 and self._flush_due():
            self.flush()

    def handle_csv_lines(self, lines: Iterable[str]) -> None:
        """handle_csv for each of `lines`, the loop in one frame with its state in locals:
        the importer's hot path (ingest/write.py), 2M turns for a long run. The same rows,
        counts and flushes as handle_csv line by line."""
        feed = self._feed_values
        if feed is None or self.lines < self.stored_lines:
            for text in lines:
                self.handle_csv(text)
            return
        run_id, count, seq = self.run_id, self.lines, self.token_seq
        tokens = self._tokens
        for text in lines:
            count += 1
            values = feed(text)
            if values is not None:
                if self.decode_from_ms is None:   # the first token: the decode phase begins
                    self.decode_from_ms = self.last_sample_t_ms or 0
                tokens.append((run_id, seq) + values)
                seq += 1
            if not count & 63:
                self.lines, self.token_seq = count, seq
                if self._flush_due():
                    self.flush()
                    tokens = self._tokens      # flush starts a new batch
        self.lines, self.token_seq = count, seq

    def handle(self, line: str) -> None:
        if line[:2] == "C\t" and self._feed_row is not None \
                and self.lines >= self.stored_lines:
            # the hot path, one per token: what the general path below does for a C line
            # that is not replayed, without its tag dispatch and per-row list
            self.handle_csv(line[2:])
            return
        replay = self.lines < self.stored_lines
        self.lines += 1
        if line.startswith("C\t"):  # the hot path: one per token, no Event object
            tag = "C"
            self._stream(tag, line[2:], replay)
        else:
            event = self._parse(line)
            if event is None:
                return
            tag = event.tag
            by_tag = _BY_TAG.get(tag)
            if by_tag is not None:
                by_tag(self, event, replay)
        # Checking the clock on every line costs more than the row itself; every 64 lines
        # keeps batches at most ~flush_seconds old at any realistic token rate.
        if (not self.lines & 63 or tag != "C") and self._flush_due():
            self.flush()

    def _flush_due(self) -> bool:
        """A full batch, or one older than flush_seconds (asked every 64 lines at most)."""
        return (len(self._tokens) + len(self._samples) >= self._flush_rows
                or time.monotonic() - self._last_flush >= self._flush_seconds)

    def _parse(self, line: str) -> Event | None:
        """The line's event; None for a line that breaks the protocol (noted)."""
        try:
            return parse_line(line)
        except GarbledExit as exc:   # the engine ended; how is unknown: not ok
            self.protocol_errors.append(str(exc))
            self.garbled = str(exc)
        except ProtocolError as exc:
            self.protocol_errors.append(str(exc))
        return None

    def _stream(self, tag: str, payload: str, replay: bool) -> None:
        """A C (CSV), O (stdout) or E (stderr) line: the parser's token rows, and the
        line itself for O and E."""
        for row in self.parser.feed(tag, payload):
            # what the store cannot hold is dropped and named (db/storable.py); a row whose
            # step it cannot hold is skipped
            values, dropped = storable_token(_ROW_VALUES(row))
            if dropped:
                self.warnings.extend(merged(self.warnings, dropped)[len(self.warnings):])
            if values is None:
                continue
            if self.decode_from_ms is None:   # the first token: the decode phase begins
                self.decode_from_ms = self.last_sample_t_ms or 0
            if not replay:   # in TOKEN_KEYS' order (db/writes.py), spelled out: one per token
                self._tokens.append((self.run_id, self.token_seq) + values)
            self.token_seq += 1
            if self._on_token is not None:
                self._on_token(row, self.token_seq)
        if tag != "C":
            self._output(tag, payload, replay)

    def _output(self, stream: str, line: str, replay: bool) -> None:
        if not replay:
            self._outputs.append({"run_id": self.run_id, "seq": self.output_seq,
                                  "stream": stream, "line": line})
        self.output_seq += 1

    def _stream_event(self, event: Event, replay: bool) -> None:
        self._stream(event.tag, event.text, replay)

    def _sample_event(self, event: Event, replay: bool) -> None:
        """An S line: the device's readings (first and last kept), a sample row."""
        if event.sample is None:
            return
        # only values the store can hold go on (db/storable.py): into the row, the start
        # readings and the progress line alike; what was dropped is named once (replayed
        # lines too, so a resumed run names it again)
        kept, dropped = storable_samples([self._sample_row(event.sample.t_ms,
                                                           event.sample.values)])
        self.warnings.extend(merged(self.warnings, dropped)[len(self.warnings):])
        if not kept:          # no time the store can hold: a reading at no known time
            return
        row = kept[0]
        values = {k: row[k] for k in event.sample.values if k in SAMPLE_FIELDS}
        values.update(row["extra"] or {})
        values = {k: v for k, v in values.items() if v is not None}
        if self.first_sample is None:
            self.first_sample = values
        self.last_sample = values
        self.last_sample_t_ms = event.sample.t_ms
        if not replay:
            if self._on_sample is not None:
                self._on_sample(values)
            self._samples.append(row)
        self.sample_seq += 1

    def _sample_row(self, t_ms: int, values: dict[str, int]) -> dict[str, Any]:
        """A sample's row: the SAMPLE_FIELDS columns, the other readings in `extra`."""
        row: dict[str, Any] = dict.fromkeys(SAMPLE_FIELDS)
        row.update(run_id=self.run_id, seq=self.sample_seq, t_ms=t_ms, turn=self.turn)
        extra = {}
        for key, value in values.items():
            if key in SAMPLE_FIELDS:
                row[key] = value
            else:
                extra[key] = value
        row["extra"] = extra or None
        return row

    def _warning_event(self, event: Event, replay: bool) -> None:
        self.warnings.append(event.text)
        self._output("W", event.text, replay)

    def _turn_event(self, event: Event, replay: bool) -> None:
        """A T line: kept in order (replayed too), stored as an output row of stream T; a
        `sent` begins the turn later samples carry."""
        assert event.turn is not None   # parse_line makes one for every T line
        self.turn_events.append(event.turn)
        if event.turn.event == "sent":
            self.turn = event.turn.turn
        self._output("T", event.text, replay)

    def _exit_event(self, event: Event, _replay: bool) -> None:
        self.exit = event.exit

    @property
    def ended(self) -> bool:
        """The agent's X line has arrived (readable or not): nothing follows it."""
        return self.exit is not None or self.garbled is not None

    def flush(self) -> None:
        """Store what is buffered and the line count it reaches, in one transaction."""
        self._last_flush = time.monotonic()
        if self.lines <= self.stored_lines:
            return
        write_batch(self.store, self.run_id, self._tokens, self._samples, self._outputs,
                    self.lines)
        if self.on_stored is not None:
            self.on_stored(self._tokens)
        self.stored_lines = self.lines
        self._tokens, self._samples, self._outputs = [], [], []


# handle()'s line kinds (run/stream.py; others, such as the H header, store nothing)
_BY_TAG: dict[str, Callable[[RunRecorder, Event, bool], None]] = {
    "C": RunRecorder._stream_event, "O": RunRecorder._stream_event,
    "E": RunRecorder._stream_event, "S": RunRecorder._sample_event,
    "W": RunRecorder._warning_event, "X": RunRecorder._exit_event,
    "T": RunRecorder._turn_event,
}
