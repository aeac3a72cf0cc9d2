"""`orch report` and `orch compare`'s documents, `orch table`'s tables and the terminal views:
every view of stored results, rendered from the data results/ reads and computes (a view reads
no store: results/report_data.py builds a report's data, report/render.py renders it).
"""
