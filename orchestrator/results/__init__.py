"""Stored runs -> numbers and views: per-run statistics (statistics, from the store via
query), comparability warnings (drift), text divergence (divergence), the published tables
(tables, session_tables), terminal views (terminal), one formatter set (formatting, markdown,
values), and data in and out (importer, export)."""
