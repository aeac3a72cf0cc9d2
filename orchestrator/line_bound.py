"""The longest line of an engine's output orch holds, live or imported: one bound, here.

An engine printing without newlines (a runaway loop, its output linked to /dev/zero) must
not make one line the controller's memory or minutes of its time. `orch import` refuses a
bmoe line longer than MAX_LINE characters (engines/bmoe_format.py), and a live run cuts
each spool line at MAX_LINE bytes and marks it with CUT (run/stream.py LineSplitter, through
transports/fetch.py SPOOL_LINE): the same bound for both, so a line an import would not read
is never stored whole by a live run either. At the bottom of the layers (docs/architecture.md)
so that engines/, transports/ and run/ all read it; it imports nothing."""
from __future__ import annotations

MAX_LINE = 64 * 1024    # 65,536: far beyond any line an engine prints for a person to read

# appended to a line cut at MAX_LINE
CUT = f" [cut: the line was over {MAX_LINE:,} bytes]"
