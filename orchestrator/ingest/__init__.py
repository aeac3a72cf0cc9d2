"""`orch import`: a study's existing folders into the store. importer coordinates: scan (what
each file is), checks (is it usable), state (start facts from .state files), sections (driver
log sections), write (one run into the store through the recorder)."""
