"""Every view of stored results, rendered from the data results/ reads and computes (a view
reads no store: results/report_data.py builds a report's data, report/document/render.py
renders it). Four packages, by what they render:

- format/: the formatting kit every view shares (one formatter per figure, the columns of
  every statistics table, cells, labels, markdown, paths); it imports none of the others.
- document/: `orch report` and `orch compare`'s documents, one module per section
  (document/sections_registry.py lists them).
- table/: `orch table`, `orch quality`, `orch routes`, `orch tokens` and `orch export`: rows as
  markdown, csv or json.
- terminal/: the rich views (`orch run`, `orch runs`, `orch show`, `orch ceilings`).

document/, table/ and terminal/ do not import each other (import-linter, pyproject.toml).
"""
