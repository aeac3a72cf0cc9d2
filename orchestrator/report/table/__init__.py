"""The data commands' outputs: `orch table` (session.py, runs.py, pivot.py), `orch quality`,
`orch routes`, `orch tokens` as markdown, csv or json, and `orch export`'s files."""
